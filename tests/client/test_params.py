"""Parameterized topics end to end: each binding is its own subscription (groups,
offsets, SHOW SUBSCRIPTIONS), receives exactly its rows, caught up (the shared pass) or
reading a backlog alone; binding errors are clear and change nothing."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from sqltopic.aio import Consumer as AsyncConsumer
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.errors import ConfigError, Error
from tests.cli.support import run_on
from tests.client.support import DEADLINE_S, config

TOPIC = (
    "CREATE TOPIC bydev AS SELECT ts, voltage FROM power.meters WHERE tbname = ? AND voltage > 0"
)
MULTI = (
    "CREATE TOPIC bysite AS SELECT ts, voltage, tbname FROM power.meters "
    "WHERE location = ? AND groupid IN (?)"
)
DEVICES = [(f"d{i}", f"site{i % 2}", i % 3) for i in range(6)]


def _setup(conn: Connection) -> None:
    conn.execute(
        "CREATE TABLE " + " ".join(f"{d} USING meters TAGS ('{s}', {g})" for d, s, g in DEVICES)
    )
    conn.execute(TOPIC)
    conn.execute(MULTI)


def _write(conn: Connection, first: int) -> None:
    conn.execute(
        "INSERT INTO "
        + " ".join(
            f"{d} VALUES ({first + i}, 1.0, {first + i}, 0.5)"
            for i, (d, _, _) in enumerate(DEVICES)
        )
    )


def _take(consumer: Consumer, want: int) -> Counter[tuple[Any, ...]]:
    got: Counter[tuple[Any, ...]] = Counter()
    deadline = time.monotonic() + DEADLINE_S
    while sum(got.values()) < want:
        assert time.monotonic() < deadline, f"{sum(got.values())} of {want} rows: {got}"
        message = consumer.poll(0.5)
        if message is not None:
            got.update(tuple(r[1:]) if len(r) > 2 else (r[1],) for r in message.rows())
    return got


def test_each_binding_receives_exactly_its_rows(live_power: Connection, server: Any) -> None:
    _setup(live_power)
    _write(live_power, 100)  # a backlog: read alone from earliest
    consumers = {d: Consumer(config(server.address, f"g-{d}")) for d in ("d1", "d4", "D2")}
    try:
        for device, consumer in consumers.items():
            consumer.subscribe(["bydev"], params={"tbname": device})
            assert consumer.subscription() == [f'bydev?{{"tbname":"{device.lower()}"}}']
        index = {d: i for i, (d, _, _) in enumerate(DEVICES)}
        for device, consumer in consumers.items():
            assert _take(consumer, 1) == Counter({(100 + index[device.lower()],): 1})
        _write(live_power, 200)  # caught up: the shared pass partitions the entries
        for device, consumer in consumers.items():
            assert _take(consumer, 1) == Counter({(200 + index[device.lower()],): 1})
        consumers["d1"].commit(asynchronous=False)
        shown = {r[0] for r in live_power.execute("SHOW SUBSCRIPTIONS").rows}
        assert shown == {f'bydev?{{"tbname":"{d}"}}' for d in ("d1", "d4", "d2")}
    finally:
        for consumer in consumers.values():
            consumer.close()
    # the committed binding is still shown; a dropped topic's bindings' offsets go with it
    shown = {r[0] for r in live_power.execute("SHOW SUBSCRIPTIONS").rows}
    assert 'bydev?{"tbname":"d1"}' in shown
    live_power.execute("DROP TOPIC bydev")
    live_power.execute(TOPIC)
    assert live_power.execute("SHOW SUBSCRIPTIONS").rows == []


def test_several_parameters_and_an_in_list_with_the_aio_consumer(
    live_power: Connection, server: Any
) -> None:
    _setup(live_power)

    async def scenario() -> Counter[tuple[Any, ...]]:
        async with AsyncConsumer(config(server.address, "g-multi")) as consumer:
            await consumer.subscribe(["bysite"], params={"location": "site0", "groupid": [0, 1]})
            want = [d for d, s, g in DEVICES if s == "site0" and g in (0, 1)]
            await consumer.poll(0.2)
            _write(live_power, 300)
            got: Counter[tuple[Any, ...]] = Counter()
            deadline = time.monotonic() + DEADLINE_S
            while sum(got.values()) < len(want):
                assert time.monotonic() < deadline
                message = await consumer.poll(0.5)
                if message is not None:
                    got.update(r[2] for r in message.rows())
            return got

    got = asyncio.run(scenario())
    assert got == Counter(d for d, s, g in DEVICES if s == "site0" and g in (0, 1))


BINDING_ERRORS = [
    (None, "topic 'bydev' has parameters"),
    ({}, "needs a value for parameter 'tbname'"),
    ({"tbname": "d1", "extra": 1}, "has no parameter 'extra'"),
    ({"tbname": 7}, "tbname"),
]


def test_binding_errors_are_clear(live_power: Connection, server: Any) -> None:
    _setup(live_power)
    with Consumer(config(server.address, "g-bad")) as consumer:
        for params, message in BINDING_ERRORS:
            with pytest.raises(ConfigError, match=message):
                consumer.subscribe(["bydev"], params=params)
            assert consumer.subscription() == []


def test_params_on_a_topic_without_parameters_are_refused(
    live_power: Connection, server: Any
) -> None:
    _setup(live_power)
    live_power.execute("CREATE TOPIC plain AS SELECT ts FROM power.meters")
    with (
        Consumer(config(server.address, "g-plain")) as consumer,
        pytest.raises(Error, match="has no parameter"),
    ):
        consumer.subscribe(["plain"], params={"tbname": "d1"})


def test_the_cli_consumes_a_binding(live_power: Connection, server: Any) -> None:
    _setup(live_power)
    _write(live_power, 500)
    out = run_on(
        server, "consume", "bydev", "--from", "earliest", "--param", "tbname=d3",
        "--max-rows", "1", "--format", "csv", "--timeout", "20",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "503" in out.stdout
    assert "500" not in out.stdout
