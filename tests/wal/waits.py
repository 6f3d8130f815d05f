"""Waiting in tests of background work: for a condition, with a deadline, never for a
fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable

# A condition that does not hold this long after it should is a bug, not a slow machine.
DEADLINE_S = 30.0
# How often the condition is looked at.
POLL_S = 0.005


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)
