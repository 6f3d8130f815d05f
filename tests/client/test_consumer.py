"""`sqltopic.Consumer` against a real server process: every method of docs/client.md, start
positions, commits, seek, push, and the errors an application sees."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import Future
from typing import Any

import pytest

import sqltopic
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message, TopicPartition
from sqltopic.errors import (
    AuthenticationFailed,
    ConfigError,
    Error,
    NoCommittedOffset,
    OffsetOutOfRange,
    TopicNotFound,
)
from tests.client.conftest import Make
from tests.client.support import (
    BIG_ROWS,
    SELECT,
    big_write,
    config,
    drain,
    later_rows,
    rows_of,
)
from tests.live_server import ServerProcess

# Longer than any poll() of these tests: an answer within one can only be a push.
HOLD_MS = 600_000


def _subscribed(make: Make, group: str = "g1", **extra: Any) -> Consumer:
    consumer = make(group, **extra)
    consumer.subscribe(["overvoltage"])
    return consumer


def test_earliest_delivers_what_the_select_returns(power: Connection, make: Make) -> None:
    consumer = _subscribed(make)
    messages = drain(consumer)
    expected = Counter(power.execute(SELECT).rows)
    assert sum(expected.values()) == 5
    assert rows_of(messages) == expected
    assert {(m.topic, m.database, m.kind) for m in messages} == {("overvoltage", "power", "data")}
    assert {m.vgroup for m in messages} <= {p.vgroup for p in consumer.assignment()}
    for message in messages:
        assert message.to_arrow().column_names == ["ts", "current", "voltage", "location", "tbname"]
        assert message.offset < message.end_offset


def test_latest_consumes_only_rows_written_after_it_started(power: Connection, make: Make) -> None:
    consumer = _subscribed(make, auto_offset_reset="latest")
    assert drain(consumer) == []  # sets the positions at the vnodes' ends
    power.execute(later_rows(1_600_000_000_000, 3))
    assert sorted(row[2] for row in rows_of(drain(consumer)).elements()) == [230, 230, 230]


def test_none_without_a_committed_offset_is_an_error(power: Connection, make: Make) -> None:
    consumer = _subscribed(make, auto_offset_reset="none")
    with pytest.raises(NoCommittedOffset):
        consumer.poll(5.0)


def test_a_new_consumer_of_the_group_resumes_at_the_committed_offsets(
    power: Connection, make: Make
) -> None:
    first = _subscribed(make)
    drain(first)
    first.commit()
    committed = first.committed(first.assignment())
    assert [p.offset for p in committed] == [p.offset for p in first.position(committed)]
    first.close()
    power.execute(later_rows(1_600_000_000_000, 4))
    second = _subscribed(make)
    assert [p.offset for p in second.committed(second.assignment())] == [
        p.offset for p in committed
    ]
    messages = drain(second)
    assert sorted(r[2] for r in rows_of(messages).elements()) == [230] * 4
    starts = {(p.topic, p.vgroup): p.offset or 0 for p in committed}
    firsts: dict[tuple[str, int], Message] = {}
    for message in messages:
        firsts.setdefault((message.topic, message.vgroup), message)
    for key, message in firsts.items():
        assert message.offset >= starts[key]


def test_commit_of_one_message_and_of_explicit_offsets(power: Connection, make: Make) -> None:
    consumer = _subscribed(make)
    message = drain(consumer)[0]
    consumer.commit(message)
    part = TopicPartition("overvoltage", message.vgroup)
    assert consumer.committed([part])[0].offset == message.end_offset
    consumer.commit(offsets=[TopicPartition("overvoltage", message.vgroup, message.offset)])
    assert consumer.committed([part])[0].offset == message.offset
    future = consumer.commit_async(message)
    assert isinstance(future, Future)
    assert future.result(timeout=30) is None
    assert consumer.committed([part])[0].offset == message.end_offset
    with pytest.raises(ConfigError, match="give a message or offsets, not both"):
        consumer.commit(message, offsets=[part])
    # as TDengine, a vgroup without an offset (None, negative) is skipped, the rest stored
    consumer.commit(offsets=[part, TopicPartition("overvoltage", message.vgroup, -1)])
    assert consumer.committed([part])[0].offset == message.end_offset


def test_seek_moves_the_position_not_the_committed_offset(power: Connection, make: Make) -> None:
    consumer = _subscribed(make)
    first = drain(consumer)
    consumer.commit()
    parts = consumer.assignment()
    committed = consumer.committed(parts)
    for part in parts:
        assert part.begin is not None
        consumer.seek(TopicPartition(part.topic, part.vgroup, part.begin))
    assert [p.offset for p in consumer.position(parts)] == [p.begin for p in parts]
    assert consumer.committed(parts) == committed
    again = drain(consumer)  # the same rows once more, from the start
    assert rows_of(again) == rows_of(first)


def test_seek_outside_the_retained_range_is_refused(power: Connection, make: Make) -> None:
    consumer = _subscribed(make)
    part = consumer.assignment()[0]
    assert part.end is not None
    with pytest.raises(OffsetOutOfRange) as info:
        consumer.seek(TopicPartition(part.topic, part.vgroup, part.end + 1))
    assert (info.value.begin, info.value.end) == (part.begin, part.end)
    assert f"outside the retained range {part.begin}..{part.end}" in str(info.value)
    consumer.seek(TopicPartition(part.topic, part.vgroup, part.end))  # end itself is valid
    consumer.seek(TopicPartition(part.topic, part.vgroup, 0))  # 0 rewinds (TDengine examples)
    assert consumer.position([part])[0].offset == part.begin
    with pytest.raises(OffsetOutOfRange):
        consumer.seek(TopicPartition(part.topic, part.vgroup, -1))
    with pytest.raises(ConfigError, match="has no offset"):
        consumer.seek(TopicPartition(part.topic, part.vgroup))
    with pytest.raises(Error, match="vgroup 999 is not assigned to this consumer"):
        consumer.seek(TopicPartition(part.topic, 999, 1))


def test_a_waiting_poll_receives_a_row_written_later(power: Connection, make: Make) -> None:
    """Push: both vgroups' polls are held for ten minutes, so only the vnode answering at
    the write (not a later poll, nor the idle vgroup's) can deliver within poll(30)."""
    first = _subscribed(make)
    drain(first)
    first.commit()  # the start for the next member: before the write, whatever the timing
    first.close()
    consumer = _subscribed(make, fetch_max_wait_ms=HOLD_MS)
    got: list[Message | None] = []
    waiting = threading.Thread(target=lambda: got.append(consumer.poll(timeout=30)))
    waiting.start()
    power.execute(later_rows(1_600_000_000_000, 1, voltage=240))
    waiting.join(60)
    assert got, "the poll did not return"
    assert got[0] is not None, "the poll returned nothing"
    assert [row[2] for row in got[0].rows()] == [240]


def test_subscription_assignment_position_and_unsubscribe(power: Connection, make: Make) -> None:
    consumer = make()
    assert consumer.subscription() == []
    assert consumer.assignment() == []
    consumer.subscribe(["overvoltage", "overvoltage"])
    assert consumer.subscription() == ["overvoltage"]
    parts = consumer.assignment()
    assert len(parts) == 2  # VGROUPS 2, one consumer: all of them
    ranges = {p.vgroup: (p.begin, p.end) for p in parts}
    assert all(
        begin is not None and end is not None and begin <= end for begin, end in ranges.values()
    )
    assert [p.offset for p in parts] == [None, None]  # unset until the first poll
    assert [p.offset for p in consumer.position(parts)] == [None, None]
    drain(consumer)
    assert [p.offset for p in consumer.assignment()] == [end for _, end in ranges.values()]
    consumer.unsubscribe()
    assert consumer.subscription() == []
    assert consumer.assignment() == []
    assert consumer.poll(0.2) is None


def test_iteration_context_manager_and_close(power: Connection, server: ServerProcess) -> None:
    rows = 0
    with Consumer(config(server.address, "g1")) as consumer:
        consumer.subscribe(["overvoltage"])
        for message in consumer:
            rows += message.row_count
            if rows >= 5:
                break
    assert rows == 5
    with pytest.raises(Error, match="this consumer is closed"):
        consumer.poll(0.1)
    consumer.close()  # again: nothing happens


def test_close_from_another_thread_ends_the_iteration(power: Connection, make: Make) -> None:
    consumer = _subscribed(make)
    drain(consumer)
    seen: list[Message] = []
    loop = threading.Thread(target=lambda: seen.extend(consumer))
    loop.start()
    consumer.close()
    loop.join(30)
    assert not loop.is_alive()
    assert seen == []


def test_close_commits_with_auto_commit(power: Connection, make: Make) -> None:
    consumer = _subscribed(make, enable_auto_commit="true", auto_commit_interval_ms=3_600_000)
    drain(consumer)
    positions = consumer.position(consumer.assignment())
    consumer.close()
    other = make("g1")
    assert other.committed(positions) == positions


def test_auto_commit_commits_positions_from_poll(power: Connection, make: Make) -> None:
    consumer = _subscribed(make, enable_auto_commit="true", auto_commit_interval_ms=0)
    drain(consumer)
    positions = consumer.position(consumer.assignment())
    consumer.poll(0.1)  # the interval has passed: this poll commits
    assert consumer.committed(positions) == positions


def test_stable_topic_blocks_name_their_tables(power: Connection, make: Make) -> None:
    power.execute("CREATE TOPIC meters_all AS STABLE power.meters WHERE groupid = 2")
    consumer = make()
    consumer.subscribe(["meters_all"])
    blocks = [block for message in drain(consumer) for block in message]
    assert {b.table_name for b in blocks} == {"d1001", "d1003"}
    assert {len(b) for b in blocks if b.table_name == "d1001"} == {3}
    assert all(b.data.column_names == ["ts", "current", "voltage", "phase"] for b in blocks)


def test_a_message_over_one_frame_arrives_whole(power: Connection, make: Make) -> None:
    rows = big_write(power)
    power.execute("CREATE TOPIC d1001_all AS SELECT ts, voltage FROM power.d1001")
    consumer = make()
    consumer.subscribe(["d1001_all"])
    messages = drain(consumer)
    sizes = [m.to_arrow().num_rows for m in messages]
    assert sum(sizes) == rows
    assert max(sizes) >= BIG_ROWS


def test_meta_messages_of_a_database_topic(power: Connection, make: Make) -> None:
    power.execute("CREATE TOPIC everything WITH META AS DATABASE power")
    consumer = make(auto_offset_reset="latest")
    consumer.subscribe(["everything"])
    drain(consumer)
    power.execute("CREATE TABLE power.n1 (ts TIMESTAMP, v INT)")
    metas = [m for m in drain(consumer) if m.kind == "meta"]
    assert [(m.meta or {}).get("tableName") for m in metas] == ["n1"]
    assert metas[0].blocks == []
    assert metas[0].end_offset == metas[0].offset + 1


def test_errors_unknown_topic_bad_config_wrong_password(
    power: Connection, server: ServerProcess, make: Make
) -> None:
    with pytest.raises(TopicNotFound, match="nosuch"):
        make().subscribe(["nosuch"])
    with pytest.raises(ConfigError, match=r"^session.timeout.ms: 100 is out of range"):
        Consumer(config(server.address, "g1", session_timeout_ms=100))
    with pytest.raises(ConfigError, match="is not a list of topic names"):
        make().subscribe("overvoltage")  # a str is a sequence, but not of topics
    with pytest.raises(ConfigError, match="timeout -1 is negative"):
        make().poll(-1)
    with pytest.raises(AuthenticationFailed):
        Consumer(config(server.address, "g1", password="wrong"))


def test_the_package_exports_the_consumer_names() -> None:
    assert sqltopic.Consumer is Consumer
    assert sqltopic.TopicPartition is TopicPartition
    assert sqltopic.Message is Message
