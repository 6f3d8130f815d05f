"""`sqltopic.aio` against a real server process: the async Connection, and the async
Consumer's main flows (the same contract as tests/client/test_consumer.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import pytest

import sqltopic
from sqltopic import aio
from sqltopic.client.message import Message, TopicPartition
from sqltopic.errors import (
    ConfigError,
    Error,
    NoCommittedOffset,
    OffsetOutOfRange,
    SqlSyntaxError,
    TopicNotFound,
)
from tests.client.support import (
    BIG_ROWS,
    METERS,
    SELECT,
    TOPIC,
    big_write,
    config,
    drain_async,
    later_rows,
    rows_of,
)
from tests.live_server import POWER, ServerProcess

Scenario = Callable[[aio.Connection, str], Awaitable[None]]
LATEST = {"auto_offset_reset": "latest"}
# Longer than any poll() of these tests: an answer within one can only be a push.
HOLD_MS = 600_000


def _run(server: ServerProcess, scenario: Scenario) -> None:
    """Run `scenario(conn, address)` on a fresh event loop, with `power`, the example rows
    and topic `overvoltage` in place."""

    async def main() -> None:
        async with await aio.connect(server.address) as conn:
            await conn.execute(POWER + METERS + ";" + TOPIC)
            await scenario(conn, server.address)

    asyncio.run(main())


def _consumer(address: str, group: str = "g1", **extra: Any) -> aio.Consumer:
    return aio.Consumer(config(address, group, **extra))


def test_async_connection_executes_queries_and_writes(server: ServerProcess) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        result = await conn.execute("SELECT count(*) AS n FROM power.meters")
        assert (result.columns, result.rows) == (["n"], [(8,)])
        rows = pa.table({
            "ts": pa.array([1_600_000_000_000], pa.timestamp("ms")),
            "current": pa.array([1.0], pa.float32()),
            "voltage": pa.array([250], pa.int32()),
            "phase": pa.array([0.1], pa.float32()),
        })  # fmt: skip
        assert await conn.write("power.d1001", rows) == 1
        table = await conn.query("SELECT voltage FROM power.meters WHERE voltage = 250")
        assert table.column("voltage").to_pylist() == [250]
        with pytest.raises(SqlSyntaxError):
            await conn.execute("SELEC 1")
        async with await aio.connect(address, database="power") as other:
            assert (await other.execute("SELECT count(*) FROM meters")).rows == [(9,)]

    _run(server, scenario)


def test_earliest_equals_the_select_and_latest_sees_only_later_rows(
    server: ServerProcess,
) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        async with _consumer(address) as early, _consumer(address, "g2", **LATEST) as late:
            await early.subscribe(["overvoltage"])
            await late.subscribe(["overvoltage"])
            assert early.subscription() == ["overvoltage"]
            expected = Counter((await conn.execute(SELECT)).rows)
            assert rows_of(await drain_async(early)) == expected
            assert await drain_async(late) == []
            await conn.execute(later_rows(1_600_000_000_000, 2))
            assert sorted(r[2] for r in rows_of(await drain_async(late)).elements()) == [230, 230]

    _run(server, scenario)


def test_commit_resume_seek_and_async_iteration(server: ServerProcess) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        async with _consumer(address) as first:
            await first.subscribe(["overvoltage"])
            everything = rows_of(await drain_async(first))
            task = first.commit_async()
            assert isinstance(task, asyncio.Task)
            await task
            parts = await first.assignment()
            committed = await first.committed(parts)
            assert [p.offset for p in committed] == [p.end for p in parts]
            for part in parts:
                await first.seek(TopicPartition(part.topic, part.vgroup, part.begin))
            assert [p.offset for p in first.position(parts)] == [p.begin for p in parts]
            assert await first.committed(parts) == committed  # seek commits nothing
            again: Counter[tuple[Any, ...]] = Counter()
            async for message in first:
                again += rows_of([message])
                if again == everything:
                    break
        await conn.execute(later_rows(1_600_000_000_000, 3))
        async with _consumer(address) as second:
            await second.subscribe(["overvoltage"])
            messages = await drain_async(second)
            assert sorted(r[2] for r in rows_of(messages).elements()) == [230] * 3
            await second.unsubscribe()
            assert second.subscription() == []
            assert await second.assignment() == []

    _run(server, scenario)


def test_a_waiting_poll_receives_a_row_written_later(server: ServerProcess) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        async with _consumer(address) as first:  # commits the start, before the write
            await first.subscribe(["overvoltage"])
            await drain_async(first)
            await first.commit()
        async with _consumer(address, fetch_max_wait_ms=HOLD_MS) as consumer:
            await consumer.subscribe(["overvoltage"])
            waiting = asyncio.create_task(consumer.poll(timeout=30))
            await conn.execute(later_rows(1_600_000_000_000, 1, voltage=240))
            message = await waiting
            assert isinstance(message, Message)
            assert [row[2] for row in message.rows()] == [240]

    _run(server, scenario)


def test_a_message_over_one_frame_arrives_whole(server: ServerProcess) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        with sqltopic.connect(address) as blocking:
            rows = big_write(blocking)
        await conn.execute("CREATE TOPIC d1001_all AS SELECT ts, voltage FROM power.d1001")
        async with _consumer(address) as consumer:
            await consumer.subscribe(["d1001_all"])
            sizes = [m.to_arrow().num_rows for m in await drain_async(consumer)]
        assert sum(sizes) == rows
        assert max(sizes) >= BIG_ROWS

    _run(server, scenario)


def test_close_from_another_task_ends_the_iteration(server: ServerProcess) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        consumer = _consumer(address)
        await consumer.subscribe(["overvoltage"])
        await drain_async(consumer)

        async def iterate() -> list[Message]:
            return [message async for message in consumer]

        loop = asyncio.create_task(iterate())
        await asyncio.sleep(0)  # the loop starts polling
        await consumer.close()
        assert await asyncio.wait_for(loop, 30) == []

    _run(server, scenario)


def test_async_errors(server: ServerProcess) -> None:
    async def scenario(conn: aio.Connection, address: str) -> None:
        async with _consumer(address, auto_offset_reset="none") as consumer:
            with pytest.raises(TopicNotFound):
                await consumer.subscribe(["nosuch"])
            await consumer.subscribe(["overvoltage"])
            with pytest.raises(NoCommittedOffset):
                await consumer.poll(5.0)
            part = (await consumer.assignment())[0]
            assert part.end is not None
            with pytest.raises(OffsetOutOfRange):
                await consumer.seek(TopicPartition(part.topic, part.vgroup, part.end + 1))
        with pytest.raises(Error, match="this consumer is closed"):
            await consumer.poll(0.1)
        with pytest.raises(ConfigError, match=r"group\.id: missing"):
            aio.Consumer({"server": address})

    _run(server, scenario)


def test_the_package_exports_aio() -> None:
    assert sqltopic.aio is aio
