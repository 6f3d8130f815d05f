"""One poll without the network (server/dnode/poll.py) and the durable offsets it starts from
(server/vnode/offsets.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sqltopic.errors import NoCommittedOffset, OffsetOutOfRange
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.poll import (
    FirstMessages,
    PollLimits,
    first_message,
    read_message,
    start_position,
)
from sqltopic.server.vnode.offsets import OffsetStore
from sqltopic.server.vnode.vnode import Vnode

ONE_VGROUP = """
CREATE DATABASE db VGROUPS 1 WAL_RETENTION_PERIOD 0 WAL_SEGMENT_SIZE 1;
USE db;
CREATE TABLE t (ts TIMESTAMP, v INT);
CREATE TOPIC odd AS SELECT ts, v FROM t WHERE v % 2 = 1;
CREATE TOPIC everything WITH META AS DATABASE db;
"""


@pytest.fixture
def db(engine: Engine) -> Engine:
    engine.execute(ONE_VGROUP)
    return engine


def _vnode(engine: Engine) -> Vnode:
    return engine.vnode_of("odd", 1)


def _insert(engine: Engine, first: int, count: int) -> None:
    values = " ".join(f"({1_700_000_000_000 + i}, {i})" for i in range(first, first + count))
    engine.execute(f"INSERT INTO t VALUES {values}")


def _values(engine: Engine, topic: str, position: int, limits: PollLimits) -> tuple[list[int], int]:
    msg = read_message(engine, _vnode(engine), topic, position, limits)
    values = [v for b in msg.blocks for v in b.data.column("v").to_pylist()]
    return values, msg.end_offset


def test_a_message_gathers_min_rows_over_many_entries(db: Engine) -> None:
    start = _vnode(db).wal.next_version
    for i in range(40):
        _insert(db, i * 10, 10)  # 5 matching rows per entry
    values, end = _values(db, "odd", start, PollLimits(min_rows=50, read_ahead=0))
    # whole entries, in steps sized by the selectivity seen: at least 50, not all
    assert 50 <= len(values) < 100
    assert values == list(range(1, 2 * len(values), 2))
    rest, final = _values(db, "odd", end, PollLimits(min_rows=10_000))
    assert values + rest == list(range(1, 400, 2))
    assert final == _vnode(db).wal.next_version


def test_a_pass_makes_one_message_of_the_same_items_for_every_topic(db: Engine) -> None:
    db.execute("CREATE TOPIC odd2 AS SELECT ts, v FROM t WHERE v % 2 = 1")
    start = _vnode(db).wal.next_version
    _insert(db, 0, 10)
    found, end = db.read_topics(["odd", "odd2", "everything"], 1, start)
    assert found["odd"] == found["odd2"]  # one form over the same entry: its block
    made: FirstMessages = {}
    first = first_message(db, "odd", found["odd"], start, end, made)
    assert first_message(db, "odd2", found["odd2"], start, end, made) is first
    alone = first_message(db, "odd", found["odd"], start, end)
    assert (alone.kind, alone.offset, alone.end_offset) == (first.kind, start, end)
    assert [b.data for b in alone.blocks] == [b.data for b in first.blocks]
    assert first.blocks[0].data.column("v").to_pylist() == [1, 3, 5, 7, 9]
    other = first_message(db, "everything", found["everything"], start, end, made)
    assert other is not first  # other items: a message of its own
    assert other.blocks[0].data.column("v").to_pylist() == list(range(10))


def test_with_entries_waiting_a_poll_reads_ahead_of_min_rows(db: Engine) -> None:
    start = _vnode(db).wal.next_version
    for i in range(40):
        _insert(db, i * 10, 10)
    values, final = _values(db, "odd", start, PollLimits(min_rows=5, read_ahead=200))
    assert values == list(range(1, 200, 2))  # 200 rows read: 20 entries, 100 matching
    assert final == start + 20


def test_max_rows_bounds_a_message_to_whole_entries(db: Engine) -> None:
    start = _vnode(db).wal.next_version
    for i in range(10):
        _insert(db, i * 10, 10)
    values, end = _values(db, "odd", start, PollLimits(min_rows=1000, max_rows=12))
    assert values == list(range(1, 30, 2))  # three entries: the third crosses 12 rows
    assert end == start + 3


def test_nothing_matching_is_an_empty_message_that_moves_the_position(db: Engine) -> None:
    start = _vnode(db).wal.next_version
    db.execute("INSERT INTO t VALUES (1700000000000, 2) (1700000000001, 4)")
    msg = read_message(db, _vnode(db), "odd", start, PollLimits())
    assert (msg.kind, msg.offset, msg.end_offset, msg.blocks) == ("empty", start, start + 1, [])


def test_meta_events_come_alone_in_wal_order(db: Engine) -> None:
    vnode = _vnode(db)
    start = vnode.wal.next_version
    _insert(db, 0, 3)
    db.execute("CREATE TABLE t2 (ts TIMESTAMP, w INT)")
    _insert(db, 3, 3)
    data = read_message(db, vnode, "everything", start, PollLimits())
    assert (data.kind, data.rows, data.end_offset) == ("data", 3, start + 1)
    meta = read_message(db, vnode, "everything", data.end_offset, PollLimits())
    assert meta.kind == "meta"
    assert meta.meta is not None
    assert (meta.meta.event["type"], meta.meta.event["tableName"]) == ("create", "t2")
    assert meta.end_offset == meta.meta.version + 1
    after = read_message(db, vnode, "everything", meta.end_offset, PollLimits())
    assert (after.kind, after.rows) == ("data", 3)


def test_a_position_removed_by_retention_is_data_lost(db: Engine) -> None:
    for i in range(30):
        _insert(db, i, 1)
    wal = _vnode(db).wal
    assert wal.maintain()
    msg = read_message(db, _vnode(db), "odd", 1, PollLimits())
    assert (msg.kind, msg.offset, msg.end_offset) == ("data_lost", 1, wal.first_version)


def test_a_position_past_the_end_is_out_of_range(db: Engine) -> None:
    end = _vnode(db).wal.next_version
    with pytest.raises(OffsetOutOfRange, match=rf"position {end + 1} is outside") as info:
        read_message(db, _vnode(db), "odd", end + 1, PollLimits())
    assert (info.value.begin, info.value.end) == (_vnode(db).wal.first_version, end)


def test_start_positions_follow_commits_then_the_reset_policy(db: Engine) -> None:
    vnode = _vnode(db)
    _insert(db, 0, 2)
    assert start_position(vnode, "odd", "g", "earliest") == vnode.wal.first_version
    assert start_position(vnode, "odd", "g", "latest") == vnode.wal.next_version
    with pytest.raises(NoCommittedOffset, match=r"auto\.offset\.reset is none"):
        start_position(vnode, "odd", "g", "none")
    vnode.offsets.commit([("odd", "g", 3)], now_us=1)
    assert start_position(vnode, "odd", "g", "none") == 3


def test_offsets_survive_a_reopen_and_are_forgotten_with_the_topic(
    make_engine: object, db: Engine
) -> None:
    vnode = _vnode(db)
    vnode.offsets.commit([("odd", "g1", 5), ("odd", "g2", 7)], now_us=1)
    db.execute("DROP CONSUMER GROUP g1 ON odd")
    assert vnode.offsets.groups("odd") == {"g2": 7}
    db.execute("DROP TOPIC odd")
    assert vnode.offsets.groups("odd") == {}


def test_the_offset_store_is_durable_and_atomic(tmp_path: Path) -> None:
    store = OffsetStore.open(tmp_path)
    store.commit([("t", "g", 10), ("u", "g", 20)], now_us=1)
    store.commit([("t", "g", 11)], now_us=2)
    with pytest.raises(sqlite3.ProgrammingError):
        store.commit([("t", "g", 12), ("u", "g", object())], now_us=3)  # type: ignore[list-item]
    store.close()
    again = OffsetStore.open(tmp_path)
    assert (again.get("t", "g"), again.get("u", "g"), again.get("t", "x")) == (11, 20, None)
    again.close()
