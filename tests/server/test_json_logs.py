"""`--log-format json`: every line the server logs is one JSON object, and membership and
rebalance events carry their facts as fields (join, assign, leave)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer
from sqltopic.server.common.logs import JsonFormatter, event_fields
from tests.client.support import config
from tests.live_server import POWER, ServerProcess

# Events are logged as they happen; the test waits this long at most for one to show.
EVENT_DEADLINE_S = 30.0


def test_a_record_becomes_one_json_object_with_its_fields() -> None:
    record = logging.LogRecord(
        "sqltopic.groups", logging.INFO, __file__, 1, "consumer %d", (7,), None
    )
    record.__dict__.update(event_fields("join", consumer_id=7, group="g", vgroups=[1, 2]))
    line = JsonFormatter().format(record)
    assert "\n" not in line
    found = json.loads(line)
    assert found["ts"].endswith("Z")
    assert {k: found[k] for k in ("level", "logger", "message", "event", "consumer_id",
                                  "group", "vgroups")} == {
        "level": "INFO", "logger": "sqltopic.groups", "message": "consumer 7", "event": "join",
        "consumer_id": 7, "group": "g", "vgroups": [1, 2],
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"log fields \['color'\] are not among"):
        event_fields("join", color="red")


def events(server: ServerProcess, wanted: set[str]) -> list[dict[str, Any]]:
    """The server's log as JSON objects, once every event in `wanted` is among them."""
    deadline = time.monotonic() + EVENT_DEADLINE_S
    while True:
        lines = [line for line in server.stderr().splitlines() if line.strip()]
        found = [json.loads(line) for line in lines]  # every line is one JSON object
        if wanted <= {f.get("event") for f in found}:
            return found
        assert time.monotonic() < deadline, f"no {wanted} in {found}"
        time.sleep(0.05)


def test_membership_and_rebalance_events_as_json(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=("--log-format", "json"))
    try:
        server.wait_ready()
        with connect(server.address) as conn:
            conn.execute(POWER + "; CREATE TOPIC t AS SELECT * FROM power.meters")
        consumer = Consumer(config(server.address, "g1", client_id="c1"))
        consumer.subscribe(["t"])
        assert len(consumer.assignment()) == 2
        consumer.close()
        found = events(server, {"join", "assign", "leave"})
    finally:
        server.kill()
    join = next(f for f in found if f.get("event") == "join")
    assert {k: join[k] for k in ("group", "client_id", "user", "mode")} == {
        "group": "g1", "client_id": "c1", "user": "root", "mode": "vgroup",
    }  # fmt: skip
    member = join["consumer_id"]
    assign = next(f for f in found if f.get("event") == "assign" and f["vgroups"])
    assert (assign["consumer_id"], assign["group"], assign["topic"]) == (member, "g1", "t")
    assert len(assign["vgroups"]) == 2
    assert assign["epoch"] >= 1
    leave = next(f for f in found if f.get("event") == "leave")
    assert (leave["consumer_id"], leave["group"]) == (member, "g1")
    assert all(f["level"] in ("INFO", "WARNING", "ERROR") and f["message"] for f in found)
