"""A client in another language: tests/node/client.js (Node.js, @grpc/grpc-js with the
.proto loaded at run time, Arrow decoded by apache-arrow) against a real server. It logs
in (lower-case `bearer`), lists services over reflection v1, runs DDL and INSERTs through
Sql.Run, consumes a topic as two consumers of one group (Poll and Fetch), commits, is
fenced for an invented epoch, unsubscribes one consumer (its epoch rises), survives a
SIGKILL and restart of the server with the group and offsets intact, and leaves with
CloseConsumer. `make setup` installs its modules (`npm ci --prefix tests/node`)."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import ServerProcess

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
# The whole run takes a few seconds; a deadline, not an expectation.
LINE_DEADLINE_S = 60.0
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node (Node.js) is not installed")


class NodeClient:
    """`node client.js ADDRESS`, its JSON lines read as they come."""

    def __init__(self, address: str) -> None:
        assert NODE is not None
        self.proc = subprocess.Popen(
            [NODE, str(NODE_DIR / "client.js"), address],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self) -> dict[str, Any]:
        line = self._lines.get(timeout=LINE_DEADLINE_S)
        if line is None:
            self.proc.wait(timeout=LINE_DEADLINE_S)
            assert self.proc.stderr is not None
            raise AssertionError(f"node exited {self.proc.returncode}: {self.proc.stderr.read()}")
        step: dict[str, Any] = json.loads(line)
        assert step["step"] != "error", step
        return step

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=LINE_DEADLINE_S)


def test_a_node_client_written_from_the_proto_consumes_and_survives_a_restart(
    data: Path,
) -> None:
    assert (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir(), (
        "tests/node has no node_modules: run `make setup` (npm ci --prefix tests/node)"
    )
    server = ServerProcess(data)
    client: NodeClient | None = None
    try:
        server.wait_ready()
        client = NodeClient(server.address)
        steps: dict[str, dict[str, Any]] = {}
        while (step := client.next())["step"] != "kill":
            steps[step["step"]] = step
        server.kill()  # SIGKILL: no graceful anything
        server = ServerProcess(data, port=server.port)
        server.wait_ready()
        client.say("restarted")
        while (step := client.next())["step"] != "done":
            steps[step["step"]] = step
        assert client.proc.wait(timeout=LINE_DEADLINE_S) == 0
    finally:
        if client is not None:
            client.kill()
        server.kill()

    services = steps["reflection"]["services"]
    assert {"sqltopic.v1.Session", "sqltopic.v1.Sql", "sqltopic.v1.Mnode",
            "sqltopic.v1.Vnode", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection"} <= set(services)  # fmt: skip
    assert steps["login"] == {"step": "login", "user": "root", "max_chunk_bytes": 4_128_768}
    assert steps["sql"]["ddl_affected"] == [0, 0, 0]
    assert steps["sql"]["written"] == 20

    assign = steps["assign"]
    assert assign["c1_first"] == [1, 2]
    assert assign["c2_status"] == "CONSUMER_STATUS_REBALANCING"
    assert assign["c1_epoch_rose"] is True
    assert sorted(assign["c1_after"] + assign["c2"]) == [1, 2]  # one each, no overlap

    consume = steps["consume"]
    assert sorted(consume["c1"] + consume["c2"]) == consume["written"]  # every row once
    assert consume["c1"]
    assert consume["c2"]
    assert consume["committed"] == consume["positions"]

    positions = steps["positions"]
    assert (positions["zero_kind"], positions["zero_offset"]) != ("data_lost", 0)
    assert positions["zero_offset"] == 1
    assert positions["invented_epoch"]["code"] == "ABORTED"
    assert positions["invented_epoch"]["error"] == "ConsumerFenced"

    unsubscribe = steps["unsubscribe"]
    assert unsubscribe["epoch_rose"] is True
    assert (unsubscribe["unchanged"], unsubscribe["left"]) == (False, [])
    assert (unsubscribe["c1_refresh"], unsubscribe["c1"]) == (True, [1, 2])

    takeover = steps["takeover"]
    assert takeover["stale_token"]["code"] == "UNAUTHENTICATED"
    assert takeover["stale_token"]["error"] == "AuthenticationFailed"
    assert (takeover["status"], takeover["epoch_kept"]) == ("CONSUMER_STATUS_READY", True)
    assert takeover["rows"] == takeover["written"]  # from the committed offsets: no duplicate

    assert steps["close"] == {
        "step": "close", "status": "CONSUMER_STATUS_REMOVED", "epoch": "0", "unchanged": False,
    }  # fmt: skip
