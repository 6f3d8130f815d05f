"""Fixtures of the client tests: `power` with TDengine's example rows and a query topic,
and `make`, a factory of consumers on the test server (closed at the end)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from tests.client.support import METERS, TOPIC, config
from tests.live_server import ServerProcess

Make = Callable[..., Consumer]


@pytest.fixture
def power(live_power: Connection) -> Connection:
    """`power` with the eight example rows and topic `overvoltage` (voltage > 219)."""
    live_power.execute(METERS)
    live_power.execute(TOPIC)
    return live_power


@pytest.fixture
def make(server: ServerProcess) -> Iterator[Make]:
    """`make(group, **config)`: a consumer on the test server, closed at the end."""
    made: list[Consumer] = []

    def factory(group: str = "g1", **extra: Any) -> Consumer:
        consumer = Consumer(config(server.address, group, **extra))
        made.append(consumer)
        return consumer

    yield factory
    for consumer in made:
        consumer.close()
