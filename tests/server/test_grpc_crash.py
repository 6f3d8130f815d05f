"""Crash: SIGKILL the server while producers write at WAL_LEVEL 2 and a consumer commits;
restart it on the same directory; every acknowledged row is consumable and every
acknowledged commit is intact."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pyarrow as pa

from sqltopic.client import connect
from sqltopic.errors import Error
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.live_server import ServerProcess
from tests.server.wire import Wire, kind, offsets, rows

# Rows acknowledged before the kill: enough that writes and commits are in flight then.
ACKED_WRITES = 40
WAIT_DEADLINE_S = 120.0
BATCH = 200
SETUP = """
CREATE DATABASE crash VGROUPS 2 WAL_LEVEL 2;
CREATE STABLE crash.s (ts TIMESTAMP, seq BIGINT) TAGS (p INT);
CREATE TOPIC all_rows AS SELECT ts, seq FROM crash.s;
"""


def _batch(producer: int, n: int) -> pa.Table:
    first = (producer * 1_000_000) + n * BATCH
    return pa.table({
        "tbname": [f"p{producer}"] * BATCH,
        "p": pa.array([producer] * BATCH, pa.int32()),
        "ts": pa.array(range(first, first + BATCH), pa.timestamp("ms")),
        "seq": pa.array(range(first, first + BATCH), pa.int64()),
    })  # fmt: skip


class Producer(threading.Thread):
    def __init__(self, address: str, producer: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.producer, self.stop = address, producer, stop
        self.acked: list[int] = []

    def run(self) -> None:
        try:
            with connect(self.address, timeout=30) as conn:
                n = 0
                while not self.stop.is_set():
                    conn.write("crash.s", _batch(self.producer, n))
                    self.acked += _batch(self.producer, n).column("seq").to_pylist()
                    n += 1
        except Error:
            pass  # the kill: anything not acknowledged may or may not be there


class Committer(threading.Thread):
    """Polls vgroup `vgroup` and commits each message's end offset."""

    def __init__(self, address: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.address, self.stop = address, stop
        self.acked: dict[int, int] = {}  # vgroup -> last acknowledged commit
        self.attempted: dict[int, int] = {}

    def run(self) -> None:
        try:
            wire = Wire(self.address)
            sub = wire.subscribe("g", ["all_rows"])
            asg = wire.assignment(sub.consumer_id)
            positions: dict[int, int | None] = {a.vgroup: None for a in asg.assignments}
            while not self.stop.is_set():
                for vgroup, position in positions.items():
                    frames = wire.poll(sub.consumer_id, "g", "all_rows", vgroup, asg.epoch,
                                       position, auto_offset_reset=pb.OFFSET_RESET_EARLIEST,
                                       max_wait_ms=50)  # fmt: skip
                    end = offsets(frames)[1]
                    positions[vgroup] = end
                    self.attempted[vgroup] = end
                    wire.commit(sub.consumer_id, "g", asg.epoch, ("all_rows", vgroup, end))
                    self.acked[vgroup] = end
        except grpc.RpcError:
            pass


def _wait(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_sigkill_during_writes_and_commits_loses_nothing_acknowledged(data: Path) -> None:
    server = ServerProcess(data)
    server.wait_ready()
    stop = threading.Event()
    try:
        with connect(server.address) as conn:
            conn.execute(SETUP)
        producers = [Producer(server.address, p, stop) for p in range(3)]
        committer = Committer(server.address, stop)
        for thread in (*producers, committer):
            thread.start()
        _wait(lambda: sum(len(p.acked) for p in producers) >= ACKED_WRITES * BATCH, "writes")
        _wait(lambda: len(committer.acked) == 2, "commits on both vgroups")
        server.kill()  # SIGKILL, mid-flight
        stop.set()
        for thread in (*producers, committer):
            thread.join(60)
    finally:
        server.kill()
    acked_rows = {seq for p in producers for seq in p.acked}
    acked_commits = dict(committer.acked)
    attempted = dict(committer.attempted)
    again = ServerProcess(data, port=server.port)
    again.wait_ready()
    try:
        wire = Wire(again.address)
        for vgroup, offset in acked_commits.items():
            # the commit in flight at the kill may or may not have landed
            assert wire.committed("g", "all_rows", vgroup) in {offset, attempted[vgroup]}
        sub = wire.subscribe("check", ["all_rows"])
        asg = wire.assignment(sub.consumer_id)
        seen: set[int] = set()
        for a in asg.assignments:
            position = a.begin
            while position < a.end:
                frames = wire.poll(sub.consumer_id, "check", "all_rows", a.vgroup, asg.epoch,
                                   position)  # fmt: skip
                assert kind(frames) in {"data", "empty"}
                seen |= {int(r["seq"]) for r in rows(frames)}  # type: ignore[call-overload]
                position = offsets(frames)[1]
        assert acked_rows <= seen, f"{len(acked_rows - seen)} acknowledged rows lost"
        wire.close()
    finally:
        again.kill()
