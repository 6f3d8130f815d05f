"""Group commit of writes (`Engine.write_group`, writes.write_arrow_group): writes of one
session to one target that arrived together are appended as one (one entry per vgroup
for all of them) when every one passes, and read exactly as the same writes made one by
one; a write refused within a group fails alone, in its place, the others written; in
the lock's no-wait mode a group that must go one by one writes nothing first."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pytest

from sqltopic.errors import Error, InvalidValueError, NoPermission, NotFoundError
from sqltopic.server.common.result import Session
from sqltopic.server.common.rwlock import WouldBlock
from sqltopic.server.core.engine import Engine
from tests.server.support import EngineFactory, vgroups_of
from tests.server.test_wide_writes import (
    CHILDREN,
    DDL,
    assert_same_reads,
    data_entries,
    interleaved,
    rows_over,
)


@pytest.fixture
def pair(make_engine: EngineFactory, tmp_path: Path) -> tuple[Engine, Engine]:
    """Two engines with the same catalog: one written in groups, one write by write."""
    grouped, single = make_engine(tmp_path / "grouped"), make_engine(tmp_path / "single")
    for engine in (grouped, single):
        engine.execute(DDL)
    return grouped, single


def outcomes(results: list[int | Error]) -> list[int | type[Error]]:
    return [r if isinstance(r, int) else type(r) for r in results]


def one_by_one(engine: Engine, tables: list[pa.Table], session: Session | None = None) -> None:
    for table in tables:
        with contextlib.suppress(Error):
            engine.write("w.meters", table, session)


def test_a_group_is_one_entry_per_vgroup_and_reads_as_its_writes_one_by_one(
    pair: tuple[Engine, Engine],
) -> None:
    grouped, single = pair
    tables = [interleaved(60, 1_000 * k) for k in range(1, 5)]
    before = {v: len(data_entries(grouped, v)) for v in vgroups_of(grouped, "w")}
    assert grouped.write_group("w.meters", tables) == [60, 60, 60, 60]
    one_by_one(single, tables)
    for vgroup in vgroups_of(grouped, "w"):
        assert len(data_entries(grouped, vgroup)) == before[vgroup] + 1, "one entry for all"
    assert_same_reads(grouped, single)


def test_a_refused_write_fails_alone_in_its_place(pair: tuple[Engine, Engine]) -> None:
    grouped, single = pair
    bad_value = interleaved(5, 2_000).set_column(3, "voltage", pa.array(["x"] * 5))
    tables = [
        interleaved(10, 1_000),
        rows_over(["d1", "nope"], 1_500),  # a child that does not exist, without tags
        interleaved(10, 3_000),
        bad_value,  # validated callers never send it; the engine's cast refuses it
        interleaved(10, 4_000),
    ]
    got = outcomes(grouped.write_group("w.meters", tables))
    assert got == [10, NotFoundError, 10, InvalidValueError, 10]
    one_by_one(single, tables)
    assert_same_reads(grouped, single)
    assert grouped.execute("SELECT count(*) FROM w.meters").rows == [(30,)]


def test_writes_of_different_columns_go_one_by_one(pair: tuple[Engine, Engine]) -> None:
    grouped, single = pair
    tables = [interleaved(10, 1_000), interleaved(10, 2_000).drop_columns(["note"])]
    assert grouped.write_group("w.meters", tables) == [10, 10]
    one_by_one(single, tables)
    assert_same_reads(grouped, single)


def test_a_group_creating_children_reads_as_its_writes_one_by_one(
    pair: tuple[Engine, Engine],
) -> None:
    grouped, single = pair

    def creating(start: int) -> pa.Table:
        names = [f"new{(start + i) % 6}" if i % 3 else f"d{i % CHILDREN}" for i in range(30)]
        data = rows_over(names, start)
        data = data.append_column("location", pa.array([f"at{start}"] * 30))
        return data.append_column("groupid", pa.array([start % 7] * 30, pa.int32()))

    tables = [creating(100), creating(200), creating(300)]
    assert grouped.write_group("w.meters", tables) == [30, 30, 30]
    one_by_one(single, tables)
    assert_same_reads(grouped, single)
    tags = "SELECT tbname, location, groupid FROM w.meters WHERE tbname LIKE 'new%' "
    tags += "GROUP BY tbname, location, groupid ORDER BY tbname"
    assert grouped.execute(tags).rows == single.execute(tags).rows


def test_rights_are_checked_for_each_write_of_a_group(engine: Engine) -> None:
    engine.execute(DDL)
    engine.execute("GRANT READ ON w.* TO u; GRANT WRITE ON w.meters WITH groupid = 1 TO u")
    user = Session(db="w", user="u")
    covered = [f"d{i}" for i in range(CHILDREN) if i % 4 == 1]
    tables = [rows_over(covered, 1), rows_over([*covered, "d2"], 100), rows_over(covered, 200)]
    got = outcomes(engine.write_group("w.meters", tables, user))
    assert got == [len(covered), NoPermission, len(covered)]
    assert engine.execute("SELECT count(*) FROM w.meters").rows == [(2 * len(covered),)]


def test_without_waiting_a_group_that_must_go_one_by_one_writes_nothing(
    engine: Engine,
) -> None:
    engine.execute(DDL)
    tables = [interleaved(10, 1_000), rows_over(["nope"], 2_000)]
    with engine.lock.without_waiting(), pytest.raises(WouldBlock):
        engine.write_group("w.meters", tables)
    assert engine.execute("SELECT count(*) FROM w.meters").rows == [(0,)]
    with engine.lock.without_waiting():  # a group that passes is written here at once
        assert engine.write_group("w.meters", [interleaved(10, 1_000)] * 2) == [10, 10]
    assert engine.execute("SELECT count(*) FROM w.meters").rows == [(20,)]
