"""Rebalance callbacks (`subscribe(on_assign=, on_revoke=, on_lost=)`), pause/resume and
commit(offsets=assignment()) against a real server, sync and asyncio (the order and
the corner cases are in test_core.py, without a server)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from sqltopic import aio
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import TopicPartition
from tests.client.support import (
    DEADLINE_S,
    METERS,
    SELECT,
    TOPIC,
    config,
    drain,
    drain_async,
    later_rows,
    rows_of,
)
from tests.live_server import POWER, ServerProcess

# Heartbeats this often make the group react within a couple of seconds.
FAST = {"heartbeat_interval_ms": 1000, "session_timeout_ms": 6000}
# Polls of a paused consumer: enough to have fetched new rows were it not paused.
PAUSED_POLLS = 3


def _keys(parts: list[TopicPartition]) -> list[tuple[str, int]]:
    return sorted((p.topic, p.vgroup) for p in parts)


def test_pause_resume_and_commit_of_an_unpolled_assignment(
    power: Connection, server: ServerProcess
) -> None:
    with Consumer(config(server.address, "g")) as consumer:
        consumer.subscribe(["overvoltage"])
        parts = consumer.assignment()
        consumer.commit(offsets=parts)  # no position yet: skipped, as TDengine
        assert [p.offset for p in consumer.committed(parts)] == [None, None]
        first = drain(consumer)
        assert set(rows_of(first)) == set(power.execute(SELECT).rows)
        consumer.pause(parts)
        assert _keys(consumer.paused()) == _keys(parts)
        before = consumer.position(parts)
        power.execute(later_rows(1_700_000_000_000, 3))
        for _ in range(PAUSED_POLLS):
            assert consumer.poll(0.3) is None
        assert consumer.position(parts) == before
        consumer.resume(parts)
        assert consumer.paused() == []
        later = drain(consumer)
        assert sum(len(m.rows()) for m in later) == 3
        consumer.commit(offsets=consumer.assignment())
        assert consumer.committed(parts) == consumer.position(parts)


def test_a_vgroup_is_revoked_with_a_commit_and_assigned_to_the_new_member(
    power: Connection, server: ServerProcess
) -> None:
    events: list[tuple[str, str, list[tuple[str, int]]]] = []
    committed: dict[tuple[str, int], int | None] = {}

    def record(name: str) -> Any:
        def on_assign(consumer: Consumer, parts: list[TopicPartition]) -> None:
            events.append((name, "assign", _keys(parts)))

        def on_revoke(consumer: Consumer, parts: list[TopicPartition]) -> None:
            events.append((name, "revoke", _keys(parts)))
            positions = consumer.position(parts)
            consumer.commit(offsets=positions)  # still held: the commit is accepted
            committed.update({(p.topic, p.vgroup): p.offset for p in positions})

        return {"on_assign": on_assign, "on_revoke": on_revoke}

    with (
        Consumer(config(server.address, "g", **FAST)) as first,
        Consumer(config(server.address, "g", **FAST)) as second,
    ):
        first.subscribe(["overvoltage"], **record("first"))
        got = drain(first)  # nothing committed: only on_revoke's commit hands over
        assert events == [("first", "assign", [("overvoltage", 1), ("overvoltage", 2)])]
        second.subscribe(["overvoltage"], **record("second"))
        deadline = time.monotonic() + DEADLINE_S
        while not any(name == "second" for name, _, _ in events):
            assert time.monotonic() < deadline, f"no hand-over: {events}"
            for consumer in (first, second):
                message = consumer.poll(0.2)
                got += [message] if message is not None else []
        revoked = [keys for name, kind, keys in events if (name, kind) == ("first", "revoke")]
        assert revoked
        assert events[-1] == ("second", "assign", revoked[0])
        key = revoked[0][0]
        assert committed[key] is not None
        # the new member starts where on_revoke committed: no row comes twice
        assert second.committed([TopicPartition(*key)])[0].offset == committed[key]
        got += drain(second)
        assert rows_of(got) == Counter(power.execute(SELECT).rows)  # each row once


def test_async_callbacks_may_be_coroutines_and_rewind_on_assign(server: ServerProcess) -> None:
    events: list[tuple[str, list[tuple[str, int]]]] = []

    async def on_assign(consumer: aio.Consumer, parts: list[TopicPartition]) -> None:
        events.append(("assign", _keys(parts)))
        for part in parts:  # TDengine's examples rewind this way
            await consumer.seek(TopicPartition(part.topic, part.vgroup, 0))

    def on_revoke(consumer: aio.Consumer, parts: list[TopicPartition]) -> None:
        events.append(("revoke", _keys(parts)))

    async def main() -> None:
        async with await aio.connect(server.address) as conn:
            await conn.execute(POWER + METERS + ";" + TOPIC)
            expected = Counter((await conn.execute(SELECT)).rows)
            async with aio.Consumer(config(server.address, "g")) as consumer:
                await consumer.subscribe(["overvoltage"])
                await drain_async(consumer)
                await consumer.commit()
            # a consumer of the same group would resume at the end; on_assign rewinds
            latest = config(server.address, "g", auto_offset_reset="latest")
            async with aio.Consumer(latest) as consumer:
                await consumer.subscribe(["overvoltage"], on_assign=on_assign, on_revoke=on_revoke)
                first = await consumer.poll(0.5)
                assert first is not None
                assert events == [("assign", [("overvoltage", 1), ("overvoltage", 2)])]
                got = [first, *await drain_async(consumer)]
                parts = await consumer.assignment()
                consumer.pause(parts[:1])
                assert _keys(consumer.paused()) == _keys(parts[:1])
                consumer.resume(parts[:1])
                await consumer.unsubscribe()
                assert events[-1] == ("revoke", [("overvoltage", 1), ("overvoltage", 2)])
            assert rows_of(got) == expected  # every row again, from the first version

    asyncio.run(main())


def test_a_consumer_removed_by_drop_consumer_group_loses_its_vgroups_then_rejoins(
    power: Connection, server: ServerProcess
) -> None:
    events: list[tuple[str, list[tuple[int, int | None]]]] = []

    def recorder(kind: str) -> Any:
        def callback(consumer: Consumer, parts: list[TopicPartition]) -> None:
            events.append((kind, [(p.vgroup, p.offset) for p in parts]))

        return callback

    with Consumer(config(server.address, "g", **FAST)) as consumer:
        kinds = ("assign", "revoke", "lost")
        consumer.subscribe(["overvoltage"], **{f"on_{k}": recorder(k) for k in kinds})
        drain(consumer)
        ends = [p.offset for p in consumer.position(consumer.assignment())]
        power.execute("DROP CONSUMER GROUP FORCE g ON overvoltage")
        deadline = time.monotonic() + DEADLINE_S
        while len(events) < 3:
            assert time.monotonic() < deadline, f"not lost and assigned again: {events}"
            consumer.poll(0.2)
        # taken away without a chance to commit (the group's offsets are gone too), then
        # the consumer joins again and starts anew
        assert events == [
            ("assign", [(1, None), (2, None)]),
            ("lost", [(1, ends[0]), (2, ends[1])]),
            ("assign", [(1, None), (2, None)]),
        ]
