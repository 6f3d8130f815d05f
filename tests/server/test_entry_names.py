"""The tables of recent data entries (server/vnode/entry_names.py): remembered at an
entry's first decode, bounded, and used by a topic's own read to skip the entries that
hold none of its tables, with every read's items unchanged."""

from __future__ import annotations

import pyarrow as pa

from sqltopic.server.core.engine import Engine
from sqltopic.server.vnode.entry_names import EntryNames, holds_none
from sqltopic.sql.entries import TABLES_FORMAT, TABLES_KEY, entry_names, multi_batch
from tests.server.support import tabled_rows


def test_names_are_kept_for_the_newest_entries_only() -> None:
    names = EntryNames(kept=3)
    for version in range(1, 6):
        names.put(version, frozenset({f"t{version}"}))
    assert [names.get(v) for v in range(1, 6)] == [
        None, None, frozenset({"t3"}), frozenset({"t4"}), frozenset({"t5"}),
    ]  # fmt: skip


def test_holds_none_looks_through_either_side() -> None:
    few, many = frozenset({"a", "b"}), {f"t{i}": None for i in range(10)}
    assert holds_none(few, many)
    assert not holds_none(few, {**many, "b": None})
    assert holds_none(frozenset(many), {"a": None})
    assert not holds_none(frozenset(many), {"t7": None})


def test_the_names_of_either_form_of_entry() -> None:
    data = pa.record_batch({"ts": pa.array([1, 2, 3], pa.int64())})
    one = data.replace_schema_metadata({b"sqltopic.table": b"d1"})
    assert entry_names(one) == frozenset({"d1"})
    multi = multi_batch(
        data, "meters", pa.array(["d1", "d2"]), pa.array([11, 12], pa.int64()),
        pa.array([1, 3], pa.int32()),
    )  # fmt: skip
    assert multi.schema.metadata[TABLES_KEY] == TABLES_FORMAT
    assert entry_names(multi) == frozenset({"d1", "d2"})


def _history(power: Engine) -> int:
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1); CREATE TABLE b USING meters TAGS ('y', 2);"
        "CREATE TOPIC ta AS SELECT ts, voltage, tbname FROM meters WHERE tbname = 'a'"
    )
    for k in range(6):
        power.execute(f"INSERT INTO a VALUES ({k}, 1, {k}, 1) b VALUES ({k}, 1, {k + 10}, 1)")
        power.execute(f"INSERT INTO b VALUES ({k + 100}, 1, {k}, 1)")  # b's alone
    return power.state.catalog.tables[("power", "a")].vgroup


def test_a_topic_reads_the_same_with_the_names_known_and_skips_other_tables(
    power: Engine,
) -> None:
    vgroup = _history(power)
    vnode = power.state.vnode(vgroup)
    vnode.entry_names = EntryNames()
    start, end = vnode.wal.first_version, vnode.wal.next_version
    cold = [power.read_topic("ta", vgroup, v, 10_000) for v in range(start, end + 1)]
    rows = tabled_rows(cold[0][0])
    assert [(r[0], r[2], r[3]) for r in rows] == [("a", k, "a") for k in range(6)]
    known = [v for v in range(start, end) if vnode.entry_names.get(v) is not None]
    assert known  # the data entries read were remembered
    warm = [power.read_topic("ta", vgroup, v, 10_000) for v in range(start, end + 1)]
    assert [(tabled_rows(i), n) for i, n in warm] == [(tabled_rows(i), n) for i, n in cold]
    # an entry remembered as another table's is not decoded at all
    first_a = next(v for v in known if "a" in (vnode.entry_names.get(v) or ()))
    vnode.entry_names.put(first_a, frozenset({"zz"}))
    items, _ = power.read_topic("ta", vgroup, first_a, 10_000)
    assert len(tabled_rows(items)) == len(tabled_rows(cold[first_a - start][0])) - 1
