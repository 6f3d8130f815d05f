"""Spark filter pushdown for the `sqltopic_wal` source: conditions on `_vgroup` and
`_version` become the vgroups and version range a read plans pieces for.

Both are exact at entry level (every row of a WAL entry has the entry's vgroup and
version, neither is ever NULL), so a pushed filter is fully handled and Spark does not
evaluate it again. Only comparisons of those columns with integers are taken: =, <, <=,
>, >=, and IN for `_vgroup`; anything else stays with Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqltopic.spark_jobs.spec import VERSION, VGROUP

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter


@dataclass
class Pushed:
    """What the pushed filters allow: versions [low, high) (high None: no bound), and the
    vgroups passing every vgroup condition ((op, value) pairs, evaluated per vgroup)."""

    low: int = 0
    high: int | None = None
    vgroup_tests: list[tuple[str, int | frozenset[int]]] = field(default_factory=list)

    def take(self, f: Filter) -> bool:
        """Narrow to `f` and answer True when it is handled fully, else leave it."""
        from pyspark.sql.datasource import In  # noqa: PLC0415 - pyspark is heavy to import

        path: tuple[str, ...] = getattr(f, "attribute", ())  # comparisons have one; Not does not
        column = path[0] if len(path) == 1 else None
        op = _OPS.get(type(f).__name__)
        if column == VGROUP and isinstance(f, In):
            values = f.value
            if all(_is_int(v) for v in values):
                self.vgroup_tests.append(("in", frozenset(int(v) for v in values)))
                return True
            return False
        value = getattr(f, "value", None)
        if op is None or not _is_int(value):
            return False
        assert isinstance(value, int)
        if column == VGROUP:
            self.vgroup_tests.append((op, value))
            return True
        if column == VERSION:
            self._version(op, value)
            return True
        return False

    def _version(self, op: str, value: int) -> None:
        low, high = {"=": (value, value + 1), ">": (value + 1, None), ">=": (value, None),
                     "<": (0, value), "<=": (0, value + 1)}[op]  # fmt: skip
        self.low = max(self.low, low)
        if high is not None:
            self.high = high if self.high is None else min(self.high, high)

    def keeps_vgroup(self, vgroup: int) -> bool:
        return all(_holds(op, vgroup, value) for op, value in self.vgroup_tests)


_OPS = {"EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
        "LessThanOrEqual": "<="}  # fmt: skip


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _holds(op: str, vgroup: int, value: int | frozenset[int]) -> bool:
    if isinstance(value, frozenset):
        return vgroup in value
    return {"=": vgroup == value, ">": vgroup > value, ">=": vgroup >= value,
            "<": vgroup < value, "<=": vgroup <= value}[op]  # fmt: skip
