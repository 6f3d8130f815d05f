"""The CLI test helpers: a hung command fails its test with its threads' stacks."""

from __future__ import annotations

import pytest

from sqltopic.client import Connection
from tests.cli import support
from tests.live_server import ServerProcess


def test_a_command_past_its_deadline_fails_with_its_stacks(
    live_power: Connection, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    live_power.execute("CREATE TOPIC quiet AS SELECT ts, current FROM power.meters")
    # a follow without limits never ends by itself: the deadline ends it
    monkeypatch.setattr(support, "RUN_DEADLINE_S", 5.0)
    with pytest.raises(AssertionError) as failed:
        support.run_on(server, "consume", "quiet", "--format", "jsonl")
    said = str(failed.value)
    assert "still ran after 5 s" in said
    assert "Current thread" in said  # the fault handler's dump of the main thread
    assert "cli/consume.py" in said  # ... where it waited
