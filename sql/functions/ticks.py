"""Time in TDengine's terms, as DuckDB expressions: ticks (integers in the database
precision), durations (`1s`, `36500d`), NOW and TODAY, and conversions between DuckDB
timestamps and ticks.

TDengine computes every time function on the integer timestamp in the database precision
("The precision of the input timestamp is determined by the precision of the table
queried", docs/en/14-reference/03-taos-sql/22-function.md). So does sqltopic: a
timestamp becomes ticks, the function works on integers with C's truncating division and
remainder (DuckDB's `//` and `%` on integers, Spark's `DIV` and `%`), and the result
becomes a timestamp again. The server's time zone is UTC.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp

from sqltopic.sql.types import Precision
from sqltopic.sql.values import TICK_NS, UNIT_NS

# Duration units (22-function.md, NOW: "Supported time units include ...") and
# precisions: INSERT's tables (sql/values), one copy.
# A day in nanoseconds: TODAY() is NOW truncated to it (UTC midnight).
DAY_NS = UNIT_NS["d"]


class Duration(exp.Expression):
    """A TDengine duration literal, `36500d`: `this` the amount (a number Literal),
    `unit` the unit letter, lower-case. Parsed by the dialect, turned into ticks by the
    function translation."""

    arg_types: ClassVar[dict[str, bool]] = {"this": True, "unit": True}

    @property
    def amount(self) -> int:
        return int(self.this.this)

    @property
    def unit(self) -> str:
        return str(self.args["unit"])


def duration_sql(gen: Any, node: Duration) -> str:
    """A duration as TDengine writes it (the dialect's generator)."""
    return f"{node.amount}{node.unit}"


def duration_ns(node: Duration) -> int:
    return node.amount * UNIT_NS[node.unit]


def in_ticks(ns: int, precision: Precision) -> int | None:
    """`ns` nanoseconds as ticks of `precision`, or None when it is not a whole number
    of them (a duration finer than the database precision)."""
    ticks, rest = divmod(ns, TICK_NS[precision])
    return None if rest else ticks


def fn(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def number(value: int) -> exp.Expr:
    literal = exp.Literal.number(abs(value))
    return exp.Neg(this=literal) if value < 0 else literal


def to_ticks(ts: exp.Expr, precision: Precision) -> exp.Expr:
    """A DuckDB timestamp as ticks (BIGINT). The ms form is DuckDB's `epoch_ms`, which the
    Spark translation reads by its integer result type."""
    name = {"ms": "epoch_ms", "us": "epoch_us", "ns": "epoch_ns"}[precision]
    return fn(name, ts)


def from_ticks(ticks: exp.Expr, precision: Precision) -> exp.Expr:
    """Ticks as a DuckDB timestamp of the precision (`epoch_ms(BIGINT)` is a TIMESTAMP)."""
    name = {"ms": "epoch_ms", "us": "make_timestamp", "ns": "make_timestamp_ns"}[precision]
    return fn(name, ticks)


def now_ticks(precision: Precision) -> exp.Expr:
    """NOW in ticks: DuckDB's clock at the start of the query (so each read of a topic
    sees its own NOW, as TDengine evaluates NOW once per statement). DuckDB's clock
    counts microseconds; in a nanosecond database NOW is a whole microsecond."""
    clock = fn("get_current_timestamp")
    if precision == "ms":
        return fn("epoch_ms", clock)
    us = fn("epoch_us", clock)
    return us if precision == "us" else exp.Mul(this=us, expression=number(1000))


def today_ticks(precision: Precision) -> exp.Expr:
    """TODAY() in ticks: NOW truncated to UTC midnight (NOW is after 1970: `%` is exact)."""
    day = number(DAY_NS // TICK_NS[precision])
    now = now_ticks(precision)
    return exp.Sub(this=now, expression=exp.Paren(this=exp.Mod(this=now.copy(), expression=day)))
