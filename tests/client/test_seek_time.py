"""Seek by time against a real server: offsets_for_times and seek_to_time (threads and
asyncio) find the first version ingested at or after a time. The server stamps ingest
times with its own clock, which is this machine's: the test writes on either side of a
mark it reads from the same clock, so only the bounds that clock allows are assumed."""

from __future__ import annotations

import asyncio
import time

import pytest

from sqltopic import aio
from sqltopic.client import Connection
from sqltopic.client.message import TopicPartition
from sqltopic.errors import ConfigError
from tests.client.conftest import Make
from tests.client.support import config, drain, drain_async, later_rows, rows_of
from tests.live_server import ServerProcess

# The clock must pass a mark within this (it moves every microsecond)
CLOCK_DEADLINE_S = 5.0
LATER_ROWS = 5


def clock_past(us: int) -> int:
    """Wait until the wall clock reads more than `us` (µs since the epoch); what it reads."""
    deadline = time.monotonic() + CLOCK_DEADLINE_S
    while (now := time.time_ns() // 1000) <= us:
        assert time.monotonic() < deadline, "the wall clock did not move"
        time.sleep(0.001)
    return now


def mark_then_write(power: Connection) -> int:
    """A time (ms) after every entry written so far and at or before the entries of a
    write of LATER_ROWS rows into d1001 made now."""
    mark_ms = clock_past(time.time_ns() // 1000) // 1000 + 1  # above all written so far
    clock_past(mark_ms * 1000 - 1)  # the write below is stamped at mark_ms or later
    power.execute(later_rows(1_700_000_000_000, LATER_ROWS))
    return mark_ms


def test_offsets_for_times_finds_the_first_version_at_or_after_a_time(
    power: Connection, make: Make
) -> None:
    consumer = make()
    consumer.subscribe(["overvoltage"])
    drain(consumer)
    before = consumer.assignment()  # each vgroup's end before the later write
    mark_ms = mark_then_write(power)
    asked = [TopicPartition(p.topic, p.vgroup, mark_ms) for p in before]
    found = consumer.offsets_for_times(asked)
    # the later write's entry on d1001's vgroup; the end elsewhere
    assert [(p.vgroup, p.offset) for p in found] == [(p.vgroup, p.end) for p in before]
    assert [p.offset for p in asked] == [mark_ms] * len(asked)
    ends = {p.vgroup: p.end for p in consumer.assignment()}
    assert [(p.begin, p.end) for p in found] == [(p.begin, ends[p.vgroup]) for p in before]
    earliest = consumer.offsets_for_times([TopicPartition(p.topic, p.vgroup, 0) for p in before])
    assert [p.offset for p in earliest] == [p.begin for p in before]
    future = time.time_ns() // 1_000_000 + 3_600_000
    latest = consumer.offsets_for_times([TopicPartition(p.topic, p.vgroup, future) for p in before])
    assert [p.offset for p in latest] == [ends[p.vgroup] for p in before]


def test_seek_to_time_replays_exactly_the_rows_since(power: Connection, make: Make) -> None:
    consumer = make()
    consumer.subscribe(["overvoltage"])
    everything = drain(consumer)
    mark_ms = mark_then_write(power)
    later = drain(consumer)
    assert sum(m.row_count for m in later) == LATER_ROWS
    positions = consumer.seek_to_time(mark_ms)
    assert sorted(p.vgroup for p in positions) == sorted(p.vgroup for p in consumer.assignment())
    assert rows_of(drain(consumer)) == rows_of(later)  # the later rows once more, only them
    consumer.seek_to_time(0)  # before everything: all of it again
    assert rows_of(drain(consumer)) == rows_of(everything) + rows_of(later)
    with pytest.raises(ConfigError, match="before the epoch"):
        consumer.seek_to_time(-1)


def test_an_asyncio_consumer_seeks_by_time(power: Connection, server: ServerProcess) -> None:
    async def main() -> None:
        consumer = aio.Consumer(config(server.address, "g-aio"))
        try:
            await consumer.subscribe(["overvoltage"])
            await drain_async(consumer)
            mark_ms = mark_then_write(power)
            later = await drain_async(consumer)
            parts = await consumer.assignment()
            found = await consumer.offsets_for_times(
                [TopicPartition(p.topic, p.vgroup, mark_ms) for p in parts]
            )
            assert len(found) == len(parts)
            await consumer.seek_to_time(mark_ms)
            assert rows_of(await drain_async(consumer)) == rows_of(later)
        finally:
            await consumer.close()

    asyncio.run(main())
