"""Writes in the lock's no-wait mode (the server's event loop runs small INSERTs and small
Arrow writes so): what would wait raises WouldBlock and writes nothing; the rest is
written as usual."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.server.common.rwlock import WouldBlock
from sqltopic.server.core.engine import Engine

LEVELS = "CREATE DATABASE fast VGROUPS 2 WAL_LEVEL 1; CREATE DATABASE safe VGROUPS 2 WAL_LEVEL 2"
STABLES = (
    "CREATE STABLE {db}.m (ts TIMESTAMP, v INT) TAGS (n INT); "
    "CREATE TABLE {db}.t0 USING {db}.m TAGS (0)"
)


@pytest.fixture
def levels(engine: Engine) -> Engine:
    engine.execute(LEVELS)
    for db in ("fast", "safe"):
        engine.execute(STABLES.format(db=db))
    return engine


def no_wait(engine: Engine, sql: str) -> int:
    with engine.state.lock.without_waiting():
        return engine.execute(sql).affected_rows


def count(engine: Engine, table: str) -> int:
    return int(engine.execute(f"SELECT count(*) FROM {table}").rows[0][0])


def versions(engine: Engine) -> list[int]:
    return [v.wal.next_version for _, v in sorted(engine.state.vnodes.items())]


def test_a_level_1_insert_is_written(levels: Engine) -> None:
    assert no_wait(levels, "INSERT INTO fast.t0 VALUES (1700000000000, 1) (1700000000001, 2)") == 2
    assert count(levels, "fast.t0") == 2


def test_a_level_2_insert_would_wait_for_fsync_and_writes_nothing(levels: Engine) -> None:
    before = versions(levels)
    with pytest.raises(WouldBlock):
        no_wait(levels, "INSERT INTO safe.t0 VALUES (1700000000000, 1)")
    assert versions(levels) == before
    assert levels.execute("INSERT INTO safe.t0 VALUES (1700000000000, 1)").affected_rows == 1


def test_an_insert_creating_a_table_would_wait_and_creates_nothing(levels: Engine) -> None:
    before = versions(levels)
    with pytest.raises(WouldBlock):
        no_wait(levels, "INSERT INTO fast.t9 USING fast.m TAGS (9) VALUES (1700000000000, 1)")
    assert versions(levels) == before
    assert "t9" not in {t for (db, t) in levels.state.catalog.tables if db == "fast"}


def no_wait_write(engine: Engine, target: str, table: pa.Table) -> int:
    with engine.state.lock.without_waiting():
        return engine.write(target, table)


ROW = {"ts": pa.array([1700000000000], pa.timestamp("ms")), "v": pa.array([1], pa.int32())}


def test_a_level_1_arrow_write_is_written(levels: Engine) -> None:
    assert no_wait_write(levels, "fast.t0", pa.table(ROW)) == 1
    assert count(levels, "fast.t0") == 1


def test_a_level_2_arrow_write_would_wait_for_fsync_and_writes_nothing(levels: Engine) -> None:
    before = versions(levels)
    with pytest.raises(WouldBlock):
        no_wait_write(levels, "safe.t0", pa.table(ROW))
    assert versions(levels) == before
    assert levels.write("safe.t0", pa.table(ROW)) == 1


def test_an_arrow_write_creating_a_child_would_wait_and_creates_nothing(levels: Engine) -> None:
    before = versions(levels)
    named = pa.table({"tbname": ["t9"], **ROW, "n": pa.array([9], pa.int32())})
    with pytest.raises(WouldBlock):
        no_wait_write(levels, "fast.m", named)
    assert versions(levels) == before
    assert ("fast", "t9") not in levels.state.catalog.tables
    assert levels.write("fast.m", named) == 1
