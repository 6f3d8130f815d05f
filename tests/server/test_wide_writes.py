"""Wide writes (issue 14, point 5): a write through a super table naming many children
appends one multi-table entry per vgroup, and every reader (query, stable, database
and WITH META topics; ad hoc SELECT; the Spark WAL source) gets exactly the rows it
gets when the same rows are written table by table, also with old single-table entries
and a schema change in the same WAL. Rights are exact per table: a refused table in a
wide write writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.errors import NoPermission, NotFoundError
from sqltopic.server.common.result import Session
from sqltopic.server.core import writes
from sqltopic.server.core.engine import Engine
from sqltopic.spark_jobs.pieces import list_pieces
from sqltopic.spark_jobs.read import read_piece
from sqltopic.spark_jobs.spec import VERSION, build_spec
from sqltopic.sql.entries import TABLE_KEY, TABLES_KEY
from sqltopic.wal import EntryType
from tests.server.support import (
    EngineFactory,
    block_rows,
    blocks,
    metas,
    read_vgroups,
    tabled_rows,
    vgroups_of,
)

CHILDREN = 40
DDL = (
    """
CREATE DATABASE w VGROUPS 4; USE w;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, note VARCHAR(8))
    TAGS (location VARCHAR(16), groupid INT);
CREATE TABLE other (ts TIMESTAMP, x INT);
CREATE USER u PASS 'secret-pw-1';
"""
    + "".join(
        f"CREATE TABLE d{i} USING meters TAGS ('loc{i % 5}', {i % 4});" for i in range(CHILDREN)
    )
    + """
CREATE TOPIC q AS SELECT tbname, ts, voltage, location FROM meters WHERE voltage % 3 <> 0;
CREATE TOPIC s WITH META AS STABLE meters;
CREATE TOPIC everything AS DATABASE w;
CREATE TOPIC one AS SELECT ts, voltage, note FROM d3;
"""
)
TOPICS = ("q", "s", "everything", "one")
# Page sizes of the topic reads compared: small pages split entries' rows across reads.
MAX_ROWS = (7, 1_000_000)


@pytest.fixture
def pair(make_engine: EngineFactory, tmp_path: Path) -> tuple[Engine, Engine]:
    """Two engines with the same catalog: one written wide, one table by table."""
    wide, narrow = make_engine(tmp_path / "wide"), make_engine(tmp_path / "narrow")
    for engine in (wide, narrow):
        engine.execute(DDL)
    return wide, narrow


def rows_over(names: list[str], start: int, *, extra: bool = False) -> pa.Table:
    """One row per name, in order (names repeat: a table's rows are not contiguous)."""
    n = len(names)
    columns: dict[str, Any] = {
        "tbname": names,
        "ts": pa.array(range(start, start + n), pa.timestamp("ms")),
        "current": pa.array([i / 4 for i in range(n)], pa.float32()),
        "voltage": pa.array(range(start, start + n), pa.int32()),
        "note": [None if i % 5 == 0 else f"n{i}" for i in range(n)],
    }
    if extra:
        columns["extra"] = pa.array([i * 10 for i in range(n)], pa.int32())
    return pa.table(columns)


def interleaved(count: int, start: int, **kw: Any) -> pa.Table:
    return rows_over([f"d{(i * 7) % CHILDREN}" for i in range(count)], start, **kw)


def write_narrow(engine: Engine, data: pa.Table) -> None:
    """`data` written table by table, tables in the order they first appear."""
    names = data.column("tbname").to_pylist()
    for name in dict.fromkeys(names):
        keep = pa.array([n == name for n in names])
        engine.write(f"w.{name}", data.filter(keep).drop_columns(["tbname"]))


def data_entries(engine: Engine, vgroup: int) -> list[pa.RecordBatch]:
    reader = engine.state.vnode(vgroup).reader()
    return [r.arrow() for b in reader.batches(0) for r in b if r.entry_type is EntryType.DATA]


def topic_rows(engine: Engine) -> dict[tuple[str, int, int], Any]:
    """What every topic delivers from every vgroup, read in small and large pages."""
    out: dict[tuple[str, int, int], Any] = {}
    for topic in TOPICS:
        for max_rows in MAX_ROWS:
            for vgroup, items in read_vgroups(engine, topic, "w", max_rows).items():
                got = block_rows(items) if topic == "q" else tabled_rows(items)
                out[(topic, max_rows, vgroup)] = got
    return out


def query_rows(engine: Engine) -> list[Any]:
    return [
        engine.execute(sql).rows
        for sql in (
            "SELECT tbname, ts, current, voltage, note, location, groupid FROM w.meters "
            "ORDER BY ts, tbname",
            "SELECT * FROM w.d3 ORDER BY ts",
            "SELECT tbname, count(*), sum(voltage) FROM w.meters GROUP BY tbname ORDER BY tbname",
        )
    ]


def spark_rows(engine: Engine) -> list[tuple[Any, ...]]:
    """The Spark WAL source's rows of `meters` (read_piece, without Spark), sorted; the
    versions differ between the two engines and are left out."""
    data_dir = engine.state.data_dir
    spec = build_spec(data_dir, engine.state.catalog, "w", "meters")
    pieces = list_pieces(data_dir, vgroups_of(engine, "w"), {}, {})
    got = []
    for piece in pieces:
        for batch in read_piece(spec, piece):
            table = pa.Table.from_batches([batch])
            table = table.drop_columns([VERSION])
            got += [tuple(r.values()) for r in table.to_pylist()]
    return sorted(got, key=repr)


def assert_same_reads(wide: Engine, narrow: Engine) -> None:
    assert topic_rows(wide) == topic_rows(narrow)
    assert query_rows(wide) == query_rows(narrow)
    assert spark_rows(wide) == spark_rows(narrow)


def test_a_wide_write_is_one_entry_per_vgroup_and_reads_as_narrow_ones(
    pair: tuple[Engine, Engine],
) -> None:
    wide, narrow = pair
    data = interleaved(200, 1_000)
    before = {v: len(data_entries(wide, v)) for v in vgroups_of(wide, "w")}
    assert wide.write("w.meters", data) == 200  # names resolved one by one
    write_narrow(narrow, data)
    for vgroup in vgroups_of(wide, "w"):
        added = data_entries(wide, vgroup)[before[vgroup] :]
        assert len(added) == 1, "one multi-table entry per vgroup"
        assert added[0].schema.metadata[TABLES_KEY] == b"runs/1"
    # the catalog did not change since: this write resolves names with the ChildIndex
    assert wide.write("w.meters", interleaved(150, 2_000)) == 150
    assert writes._INDEXES[id(wide.state)][("w", "meters")][1] is not None
    write_narrow(narrow, interleaved(150, 2_000))
    assert_same_reads(wide, narrow)
    total = sum(len(block_rows(i)) for i in read_vgroups(wide, "s", "w", 1_000_000).values())
    assert total == 350


def test_old_single_table_entries_and_a_schema_change_in_one_wal(
    pair: tuple[Engine, Engine],
) -> None:
    wide, narrow = pair
    write_narrow(wide, interleaved(30, 100))  # single-table entries: the old form
    write_narrow(narrow, interleaved(30, 100))
    wide.write("w.meters", interleaved(120, 200))
    write_narrow(narrow, interleaved(120, 200))
    for engine in pair:
        engine.execute("ALTER STABLE w.meters ADD COLUMN extra INT")
    wide.write("w.meters", interleaved(80, 400, extra=True))
    write_narrow(narrow, interleaved(80, 400, extra=True))
    write_narrow(wide, rows_over(["d3", "d5", "d3"], 600))
    write_narrow(narrow, rows_over(["d3", "d5", "d3"], 600))
    written = [b.schema.metadata for v in vgroups_of(wide, "w") for b in data_entries(wide, v)]
    assert all(TABLES_KEY in m or TABLE_KEY in m for m in written)
    assert {TABLES_KEY in m for m in written} == {True, False}, "both forms in the WALs"
    assert_same_reads(wide, narrow)
    extra = wide.execute("SELECT count(extra) FROM w.meters").rows
    assert extra == [(80,)]


def test_a_wide_write_creating_children_reads_as_narrow_creates(
    pair: tuple[Engine, Engine],
) -> None:
    wide, narrow = pair
    names = [f"new{i % 25}" if i % 2 else f"d{i % CHILDREN}" for i in range(100)]
    data = rows_over(names, 5_000).append_column(
        "location", pa.array([f"at{i}" for i in range(100)])
    )
    data = data.append_column("groupid", pa.array([i % 7 for i in range(100)], pa.int32()))
    assert wide.write("w.meters", data) == 100
    # narrow: each new child created from its first row's tags, then rows table by table
    seen: set[str] = set()
    for row in data.to_pylist():
        name = row["tbname"]
        if name.startswith("new") and name not in seen:
            seen.add(name)
            narrow.execute(
                f"CREATE TABLE w.{name} USING w.meters TAGS ('{row['location']}', {row['groupid']})"
            )
    write_narrow(narrow, data.drop_columns(["location", "groupid"]))
    assert query_rows(wide) == query_rows(narrow)
    assert spark_rows(wide) == spark_rows(narrow)
    # WITH META: in each vgroup, the write's create events come before its rows
    for items in read_vgroups(wide, "s", "w", 1_000_000).values():
        kinds = ["meta" if m in metas(items) else "data" for m in items]
        assert kinds == sorted(kinds, key=lambda k: k != "meta")
        created = {m.event["tableName"] for m in metas(items)}
        shown = {b.table_name for b in blocks(items)}
        assert {n for n in shown if n and n.startswith("new")} == {
            n for n in created if n.startswith("new")
        }


def _snapshot(engine: Engine) -> dict[int, int]:
    return {v: engine.state.vnode(v).wal.last_version for v in vgroups_of(engine, "w")}


def test_a_refused_table_in_a_wide_write_writes_nothing(engine: Engine) -> None:
    engine.execute(DDL)
    engine.execute("GRANT WRITE ON w.meters WITH groupid = 1 TO u")
    user = Session(db="w", user="u")
    covered = [f"d{i}" for i in range(CHILDREN) if i % 4 == 1]
    before = _snapshot(engine)
    # d2 (groupid 2) comes last: the tables before it pass, and still nothing is written;
    # not even readable, it is hidden (names do not leak)
    with pytest.raises(NotFoundError, match=r"w\.d2 does not exist"):
        engine.write("w.meters", rows_over([*covered, "d2"], 1), user)
    engine.execute("GRANT READ ON w.* TO u")
    with pytest.raises(NoPermission, match=r"WRITE on w\.d2"):
        engine.write("w.meters", rows_over([*covered, "d2"], 1), user)
    assert _snapshot(engine) == before
    assert engine.execute("SELECT count(*) FROM w.meters").rows == [(0,)]
    # only covered children: written, exactly checked table by table
    assert engine.write("w.meters", rows_over(covered * 3, 1), user) == 3 * len(covered)
    assert engine.execute("SELECT count(*) FROM w.meters").rows == [(3 * len(covered),)]


def test_a_wide_write_needs_write_on_the_stable(engine: Engine) -> None:
    engine.execute(DDL)
    user = Session(db="w", user="u")
    data = rows_over([f"d{i}" for i in range(CHILDREN)], 1)
    before = _snapshot(engine)
    with pytest.raises(NotFoundError):  # no right at all: the database is not seen
        engine.write("w.meters", data, user)
    engine.execute("GRANT READ ON w.* TO u")
    with pytest.raises(NoPermission, match="WRITE"):
        engine.write("w.meters", data, user)
    assert _snapshot(engine) == before
    engine.execute("GRANT WRITE ON w.* TO u")
    assert engine.write("w.meters", data, user) == CHILDREN


def test_a_multi_table_insert_reads_as_its_parts_one_by_one(pair: tuple[Engine, Engine]) -> None:
    wide, narrow = pair
    parts = [
        f"w.d{i % 9} VALUES ({100 + i}, {i / 2}, {i}, 'p{i}')"
        + (f" ({1_000 + i}, NULL, {i}, NULL)" if i % 3 == 0 else "")
        for i in range(30)
    ]  # d0..d8 named several times each, their parts not adjacent
    parts.insert(
        10, "w.meters (tbname, ts, voltage) VALUES ('d2', 50, 1) ('d3', 51, 2) ('d2', 52, 3)"
    )
    parts.append("w.d1 USING w.meters TAGS ('late', 9) VALUES (7, 1, 2, 'x')")
    parts.append("w.other VALUES (5, 1)")  # a normal table: an entry of its own
    assert wide.execute("INSERT INTO " + " ".join(parts)).affected_rows == 45
    for part in parts:
        narrow.execute("INSERT INTO " + part)
    assert_same_reads(wide, narrow)
    entries = [len(data_entries(wide, v)) for v in vgroups_of(wide, "w")]
    assert sum(entries) == 5, "a multi-table entry per vgroup, and `other`'s own"


def test_created_children_take_their_first_rows_tags(engine: Engine) -> None:
    engine.execute(
        "CREATE DATABASE t VGROUPS 2; USE t;"
        "CREATE STABLE s (ts TIMESTAMP, v INT) TAGS (since TIMESTAMP, g INT, label NCHAR(4))"
    )
    data = pa.table({
        "tbname": ["c1", "c2", "c1", "c3"],
        "ts": pa.array([1, 2, 3, 4], pa.timestamp("ms")),
        "v": pa.array([1, 2, 3, 4], pa.int32()),
        "since": pa.array([5_000, None, 9_000, 1], pa.timestamp("ms")),
        "g": pa.array([7, 8, 9, None], pa.int32()),
        "label": ["a", "b", "z", None],
    })  # fmt: skip
    assert engine.write("s", data) == 4
    engine.execute("INSERT INTO c4 USING s TAGS (5000, 7, 'a') VALUES (5, 5)")
    tags = {t.name: t.tags for t in engine.state.catalog.children("t", "s")}
    assert tags == {
        "c1": {"since": 5_000, "g": 7, "label": "a"},
        "c2": {"since": None, "g": 8, "label": "b"},
        "c3": {"since": 1, "g": None, "label": None},
        "c4": {"since": 5_000, "g": 7, "label": "a"},  # as INSERT ... USING stores them
    }
