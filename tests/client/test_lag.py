"""Lag in rows and in time against a real server: a consumer made to fall behind by a
known number of rows shows it in SHOW SUBSCRIPTIONS, in Consumer.lag() (threads and
asyncio) and in Vnode.Committed's answer; figures in time are checked within the bounds
this machine's clock (the server's) allows, no duration is assumed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from sqltopic import aio
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from tests.client.support import config, drain, drain_async, later_rows
from tests.live_server import ServerProcess

BEHIND = 7  # rows written after the consumer caught up


def now_us() -> int:
    return time.time_ns() // 1000


def subscriptions(conn: Connection, group: str) -> dict[int, dict[str, Any]]:
    rows = conn.query("SHOW SUBSCRIPTIONS").to_pylist()
    return {r["vgroup_id"]: r for r in rows if r["consumer_group"] == group}


def vgroup_of(conn: Connection, table: str) -> int:
    rows = conn.query("SHOW power.TABLES").to_pylist()
    return int(next(r["vgroup_id"] for r in rows if r["table_name"] == table))


@pytest.fixture
def behind(power: Connection, server: ServerProcess) -> Iterator[tuple[Consumer, int, int, int]]:
    """A consumer of `overvoltage` that drained and committed everything, then BEHIND
    rows written to d1001: (consumer, d1001's vgroup, clock before, clock after the
    write)."""
    consumer = Consumer(config(server.address, "lagging"))
    try:
        consumer.subscribe(["overvoltage"])
        drain(consumer)
        consumer.commit()
        before = now_us()
        power.execute(later_rows(1_700_000_000_000, BEHIND))
        after = now_us()
        yield consumer, vgroup_of(power, "d1001"), before, after
    finally:
        consumer.close()


def within(lag_ms: int, written: tuple[int, int], asked: tuple[int, int]) -> bool:
    """Whether `lag_ms`, taken between `asked`, of an entry written between `written`
    (all µs of this machine's clock), is one the clock allows."""
    lowest = (asked[0] - written[1]) // 1000 - 1
    highest = (asked[1] - written[0]) // 1000 + 1
    return lowest <= lag_ms <= highest


def test_show_subscriptions_has_lag_in_rows_and_time(
    power: Connection, behind: tuple[Consumer, int, int, int]
) -> None:
    consumer, vgroup, before, after = behind
    asked = now_us()
    rows = subscriptions(power, "lagging")
    done = now_us()
    assert sorted(rows) == sorted(p.vgroup for p in consumer.assignment())
    late = rows[vgroup]
    assert late["lag_rows"] == BEHIND
    assert within(late["lag_ms"], (before, after), (asked, done))
    for other, row in rows.items():
        if other != vgroup:
            assert (row["lag_rows"], row["lag_ms"]) == (0, 0)
    for row in rows.values():  # it polled and committed every vgroup, before the write
        assert row["last_poll"] is not None
        assert row["last_commit"] is not None
        assert row["last_poll"].timestamp() * 1e6 <= before + 1
        assert row["last_commit"].timestamp() * 1e6 <= before + 1
    drain(consumer)  # caught up again
    consumer.commit()
    rows = subscriptions(power, "lagging")
    assert [(r["lag_rows"], r["lag_ms"]) for r in rows.values()] == [(0, 0)] * len(rows)
    assert rows[vgroup]["last_commit"].timestamp() * 1e6 >= after - 1


def test_consumer_lag_follows_its_position(behind: tuple[Consumer, int, int, int]) -> None:
    consumer, vgroup, before, after = behind
    asked = now_us()
    lags = {lag.vgroup: lag for lag in consumer.lag()}
    done = now_us()
    assert sorted(lags) == sorted(p.vgroup for p in consumer.assignment())
    late = lags[vgroup]
    assert (late.topic, late.rows) == ("overvoltage", BEHIND)
    assert late.position is not None
    assert late.end > late.position
    assert late.ms is not None
    assert within(late.ms, (before, after), (asked, done))
    assert all((lag.rows, lag.ms) == (0, 0) for v, lag in lags.items() if v != vgroup)
    drain(consumer)
    assert [(lag.rows, lag.ms) for lag in consumer.lag()] == [(0, 0)] * len(lags)


def test_committed_answers_carry_the_group_lag(
    server: ServerProcess, behind: tuple[Consumer, int, int, int]
) -> None:
    _consumer, vgroup, before, after = behind
    with grpc.insecure_channel(server.address) as channel:
        token = (
            pb_grpc.SessionStub(channel)
            .Login(pb.LoginRequest(user="root", password="taosdata"))
            .token
        )
        stub = pb_grpc.VnodeStub(channel)
        request = pb.CommittedRequest(
            group_id="lagging", vgroups=[pb.TopicVgroup(topic="overvoltage", vgroup=vgroup)]
        )
        asked = now_us()
        (found,) = stub.Committed(request, metadata=(("authorization", f"Bearer {token}"),)).offsets
        done = now_us()
    assert found.lag_rows == BEHIND
    assert within(found.lag_ms, (before, after), (asked, done))
    assert found.committed_ms * 1000 <= before + 1000


def test_an_asyncio_consumer_reports_its_lag(power: Connection, server: ServerProcess) -> None:
    async def main() -> None:
        async with aio.Consumer(config(server.address, "lag-aio")) as consumer:
            await consumer.subscribe(["overvoltage"])
            await drain_async(consumer)
            power.execute(later_rows(1_700_000_000_100, BEHIND))
            lags = await consumer.lag()
            assert sum(lag.rows or 0 for lag in lags) == BEHIND
            await drain_async(consumer)
            assert all(lag.rows == 0 for lag in await consumer.lag())

    asyncio.run(main())
