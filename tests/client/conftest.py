"""Fixtures of the client tests: `power` with TDengine's example rows and a query topic."""

from __future__ import annotations

import pytest

from sqltopic.client import Connection
from tests.client.support import METERS, TOPIC


@pytest.fixture
def power(live_power: Connection) -> Connection:
    """`power` with the eight example rows and topic `overvoltage` (voltage > 219)."""
    live_power.execute(METERS)
    live_power.execute(TOPIC)
    return live_power
