"""SHOW CONSUMERS, SHOW SUBSCRIPTIONS and the DROP statements' refusals, against a real
server with consumers joined over the wire."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import SchemaInUseError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.live_server import POWER, ServerProcess
from tests.server.wire import Wire, offsets, rows, status

TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters WHERE voltage > 220"


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    rows_ = 10
    for table in ("d1", "d2", "d3", "d4"):
        live_power.write("meters", pa.table({
            "tbname": [table] * rows_, "location": ["x"] * rows_,
            "groupid": pa.array([1] * rows_, pa.int32()),
            "ts": pa.array(range(rows_), pa.timestamp("ms")),
            "current": pa.array([1.0] * rows_, pa.float32()),
            "voltage": pa.array([215 + i for i in range(rows_)], pa.int32()),
            "phase": pa.array([0.5] * rows_, pa.float32()),
        }))  # fmt: skip
    return live_power


def _show(conn: Connection, what: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = conn.query(f"SHOW {what}").to_pylist()
    return found


def test_show_consumers_and_subscriptions_follow_the_group(hot: Connection, wire: Wire) -> None:
    assert _show(hot, "CONSUMERS") == []
    assert _show(hot, "SUBSCRIPTIONS") == []
    sub = wire.subscribe("g", ["hot"], client_id="c1", fqdn="host-a",
                         auto_offset_reset=pb.OFFSET_RESET_EARLIEST)  # fmt: skip
    (consumer,) = _show(hot, "CONSUMERS")
    assert {k: consumer[k] for k in ("consumer_id", "consumer_group", "client_id", "user",
                                     "fqdn", "status", "topic")} == {
        "consumer_id": str(sub.consumer_id), "consumer_group": "g", "client_id": "c1",
        "user": "root", "fqdn": "host-a", "status": "ready", "topic": "hot",
    }  # fmt: skip
    assert consumer["up_time"] is not None
    assert consumer["parameters"].endswith("reset:earliest")
    asg = wire.assignment(sub.consumer_id)
    delivered = {}
    for a in asg.assignments:
        frames = wire.poll(sub.consumer_id, "g", "hot", a.vgroup, asg.epoch,
                           auto_offset_reset=pb.OFFSET_RESET_EARLIEST)  # fmt: skip
        delivered[a.vgroup] = (offsets(frames)[1], len(rows(frames)))
    progress = [pb.VgroupProgress(topic="hot", vgroup=v, position=pos, rows=n)
                for v, (pos, n) in delivered.items()]  # fmt: skip
    wire.mnode.Heartbeat(pb.HeartbeatRequest(consumer_id=sub.consumer_id, epoch=asg.epoch,
                                             progress=progress), metadata=wire.md)  # fmt: skip
    subs = {r["vgroup_id"]: r for r in _show(hot, "SUBSCRIPTIONS")}
    assert sorted(subs) == [1, 2]
    for vgroup, (position, n) in delivered.items():
        _, end = wire.offset_range("hot", vgroup)
        row = subs[vgroup]
        assert (row["topic_name"], row["consumer_group"], row["consumer_id"]) == (
            "hot",
            "g",
            str(sub.consumer_id),
        )
        assert (row["offset"], row["rows"], row["lag"]) == (f"log:{position}/{end}", n, 0)
    assert sum(r["rows"] for r in subs.values()) == 4 * 4  # voltages 221..224 x 4 tables
    # the consumer leaves after committing: vgroups unassigned, rows and offsets stay
    for vgroup, (position, _) in delivered.items():
        wire.commit(sub.consumer_id, "g", asg.epoch, ("hot", vgroup, position))
    wire.mnode.Close(pb.CloseRequest(consumer_id=sub.consumer_id, progress=progress),
                     metadata=wire.md)  # fmt: skip
    assert _show(hot, "CONSUMERS") == []
    after = {r["vgroup_id"]: r for r in _show(hot, "SUBSCRIPTIONS")}
    assert [r["consumer_id"] for r in after.values()] == [None, None]
    assert {v: (r["rows"], r["offset"]) for v, r in after.items()} == {
        v: (subs[v]["rows"], subs[v]["offset"]) for v in subs
    }


def test_drop_refuses_while_consumers_live_and_force_removes_them(
    hot: Connection, wire: Wire
) -> None:
    sub = wire.subscribe("g", ["hot"])
    epoch = wire.assignment(sub.consumer_id).epoch
    with pytest.raises(SchemaInUseError, match="DROP CONSUMER GROUP FORCE g ON hot"):
        hot.execute("DROP CONSUMER GROUP g ON hot")
    with pytest.raises(SchemaInUseError, match="DROP TOPIC FORCE hot"):
        hot.execute("DROP TOPIC hot")
    assert len(_show(hot, "CONSUMERS")) == 1  # nothing changed
    hot.execute("DROP CONSUMER GROUP IF EXISTS FORCE g ON hot")
    assert _show(hot, "CONSUMERS") == []
    beat = wire.mnode.Heartbeat(
        pb.HeartbeatRequest(consumer_id=sub.consumer_id, epoch=epoch), metadata=wire.md
    )
    assert beat.status == pb.CONSUMER_STATUS_REMOVED
    with pytest.raises(grpc.RpcError) as info:
        wire.poll(sub.consumer_id, "g", "hot", 1, epoch)
    assert status(info.value)[1]["sqltopic-error"] == "ConsumerFenced"
    hot.execute("DROP TOPIC hot")  # no consumer left: no FORCE needed
    assert _show(hot, "TOPICS") == []


def _held(wire: Wire, consumer: int) -> list[int]:
    return sorted(a.vgroup for a in wire.assignment(consumer).assignments)


def _let_go(wire: Wire, members: list[int]) -> None:
    """Each member heartbeats listing what it serves, which lets go of the rest."""
    for m in members:
        progress = [pb.VgroupProgress(topic=a.topic, vgroup=a.vgroup)
                    for a in wire.assignment(m).assignments]  # fmt: skip
        wire.mnode.Heartbeat(pb.HeartbeatRequest(consumer_id=m, progress=progress),
                             metadata=wire.md)  # fmt: skip


def test_four_vgroups_spread_as_consumers_join_and_leave(
    live_power: Connection, wire: Wire
) -> None:
    live_power.execute("CREATE DATABASE four VGROUPS 4")
    live_power.execute("CREATE TABLE four.t (ts TIMESTAMP, v INT)")
    live_power.execute("CREATE TOPIC ft AS SELECT * FROM four.t")
    members: list[int] = []
    expected = {1: [4], 2: [2, 2], 3: [2, 1, 1], 4: [1, 1, 1, 1], 5: [1, 1, 1, 1, 0]}
    before: dict[int, list[int]] = {}
    for k in range(1, 6):
        members.append(wire.subscribe("g", ["ft"]).consumer_id)
        _let_go(wire, members)
        now = {m: _held(wire, m) for m in members}
        assert sorted((len(v) for v in now.values()), reverse=True) == expected[k]
        assert sorted(v for vs in now.values() for v in vs) == sorted(set().union(*now.values()))
        # a vgroup moves only to the newcomer
        assert all(set(now[m]) <= set(before[m]) for m in before)
        before = now
    for k in range(5, 1, -1):
        gone = members.pop()
        wire.mnode.Close(pb.CloseRequest(consumer_id=gone), metadata=wire.md)
        _let_go(wire, members)
        now = {m: _held(wire, m) for m in members}
        assert sorted((len(v) for v in now.values()), reverse=True) == expected[k - 1]
        assert all(set(before[m]) <= set(now[m]) for m in members)  # kept what they had
        before = now


def test_each_topic_is_shared_only_by_its_subscribers(hot: Connection, wire: Wire) -> None:
    hot.execute("CREATE TOPIC cold AS SELECT ts, voltage FROM power.meters WHERE voltage <= 220")
    a = wire.subscribe("g", ["hot"]).consumer_id
    b = wire.subscribe("g", ["cold"]).consumer_id
    got: dict[str, list[int]] = {}
    for consumer, topic in ((a, "hot"), (b, "cold")):
        asg = wire.assignment(consumer)
        assert sorted(x.vgroup for x in asg.assignments) == [1, 2]
        assert {x.topic for x in asg.assignments} == {topic}
        got[topic] = []
        for x in asg.assignments:
            frames = wire.poll(consumer, "g", topic, x.vgroup, asg.epoch,
                               auto_offset_reset=pb.OFFSET_RESET_EARLIEST)  # fmt: skip
            got[topic] += [int(str(r["voltage"])) for r in rows(frames)]
    assert sorted(got["hot"]) == sorted([221, 222, 223, 224] * 4)
    assert sorted(got["cold"]) == sorted(list(range(215, 221)) * 4)


CONSUMER_CHILD = """
import sys
from sqltopic.client.consumer import Consumer
config = {"server": sys.argv[1], "group.id": "g", "session.timeout.ms": "6000",
          "heartbeat.interval.ms": "1000", "auto.offset.reset": "earliest"}
with Consumer(config) as consumer:
    consumer.subscribe(["hot"])
    print("subscribed", flush=True)
    while True:
        consumer.poll(1.0)
"""
# Session timeout (6 s) + the mnode's 2 s timer, with room for a slow CI machine.
EXPIRY_DEADLINE_S = 60.0


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EXPIRY_DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def test_a_killed_consumer_times_out_and_its_vgroups_move(
    hot: Connection, wire: Wire, server: ServerProcess
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CONSUMER_CHILD, server.address], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "subscribed"
        survivor = wire.subscribe("g", ["hot"], session_timeout_ms=60_000).consumer_id
        # the child lets go of one vgroup (its client commits it and stops listing it)
        _wait_until(lambda: len(_held(wire, survivor)) == 1, "the survivor holds one")
        child.kill()  # SIGKILL: no close, no more heartbeats
        child.wait(30)
        _wait_until(lambda: _held(wire, survivor) == [1, 2], "the survivor holds both")
        assert [c["consumer_id"] for c in _show(hot, "CONSUMERS")] == [str(survivor)]
    finally:
        child.kill()


def test_a_consumer_that_stops_polling_is_removed(hot: Connection, wire: Wire) -> None:
    """... and when it comes back (its process was alive all along), it can neither poll
    nor commit the vgroups it held."""
    sub = wire.subscribe("g", ["hot"], max_poll_interval_ms=1000)
    held = wire.assignment(sub.consumer_id)
    vgroup = held.assignments[0].vgroup

    def beat_without_polling() -> bool:
        request = pb.HeartbeatRequest(consumer_id=sub.consumer_id, polled=False)
        answer = wire.mnode.Heartbeat(request, metadata=wire.md)
        return answer.status == pb.CONSUMER_STATUS_REMOVED

    _wait_until(beat_without_polling, "the idle consumer is removed")
    assert _show(hot, "CONSUMERS") == []
    for call in (
        lambda: wire.poll(sub.consumer_id, "g", "hot", vgroup, held.epoch),
        lambda: wire.commit(sub.consumer_id, "g", held.epoch, ("hot", vgroup, 1)),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert status(info.value)[1]["sqltopic-error"] == "ConsumerFenced"
    assert wire.committed("g", "hot", vgroup) is None


def test_groups_survive_a_server_restart(data: Path) -> None:
    first = ServerProcess(data)
    first.wait_ready()
    try:
        wire = Wire(first.address)
        with connect(first.address) as conn:
            conn.execute(POWER + "; " + TOPIC)
        sub = wire.subscribe("g", ["hot"], client_id="c1")
        asg = wire.assignment(sub.consumer_id)
        progress = [pb.VgroupProgress(topic="hot", vgroup=a.vgroup, position=1, rows=5)
                    for a in asg.assignments]  # fmt: skip
        wire.mnode.Heartbeat(pb.HeartbeatRequest(consumer_id=sub.consumer_id, epoch=asg.epoch,
                                                 progress=progress), metadata=wire.md)  # fmt: skip
        wire.close()
        assert first.stop() == 0  # graceful: progress saved too
    finally:
        first.kill()
    second = ServerProcess(data, port=first.port)
    second.wait_ready()
    try:
        wire = Wire(second.address)  # tokens die with the server: log in again
        beat = wire.mnode.Heartbeat(
            pb.HeartbeatRequest(consumer_id=sub.consumer_id, epoch=asg.epoch), metadata=wire.md
        )
        assert (beat.status, beat.epoch, beat.refresh_assignment) == (
            pb.CONSUMER_STATUS_READY,
            asg.epoch,
            False,
        )
        again = wire.assignment(sub.consumer_id)
        assert sorted(a.vgroup for a in again.assignments) == [1, 2]
        with connect(second.address) as conn:
            (consumer,) = _show(conn, "CONSUMERS")
            assert (consumer["consumer_id"], consumer["client_id"]) == (str(sub.consumer_id), "c1")
            assert [r["rows"] for r in _show(conn, "SUBSCRIPTIONS")] == [5, 5]
        # another group joins: its save writes only its own row, g's stays as loaded
        sub2 = wire.subscribe("g2", ["hot"], client_id="c2")
        asg2 = wire.assignment(sub2.consumer_id)
        second.kill()  # SIGKILL: the membership saved at subscribe time is enough
        third = ServerProcess(data, port=first.port)
        third.wait_ready()
        try:
            wire2 = Wire(third.address)
            for consumer_id, epoch in (
                (sub.consumer_id, asg.epoch),
                (sub2.consumer_id, asg2.epoch),
            ):
                beat = wire2.mnode.Heartbeat(
                    pb.HeartbeatRequest(consumer_id=consumer_id, epoch=epoch), metadata=wire2.md
                )
                assert (beat.status, beat.epoch) == (pb.CONSUMER_STATUS_READY, epoch)
            assert sorted(a.vgroup for a in wire2.assignment(sub2.consumer_id).assignments) == [
                1,
                2,
            ]
            wire2.close()
        finally:
            third.kill()
        wire.close()
    finally:
        second.kill()


def test_a_vgroup_granted_again_says_so(hot: Connection, wire: Wire) -> None:
    """A consumer that gets back a vgroup another one held in between learns it from
    `granted_epoch`, so it drops the stale position it may still keep."""
    a = wire.subscribe("g", ["hot"]).consumer_id
    first = wire.assignment(a)
    assert all(x.granted_epoch <= first.epoch for x in first.assignments)
    b = wire.subscribe("g", ["hot"]).consumer_id
    _let_go(wire, [a])  # a lets go of one vgroup: b gets it
    (moved,) = _held(wire, b)
    wire.commit(b, "g", wire.assignment(b).epoch, ("hot", moved, 3))
    wire.mnode.Close(pb.CloseRequest(consumer_id=b), metadata=wire.md)
    again = wire.assignment(a, known=first.epoch)
    granted = {x.vgroup: x.granted_epoch for x in again.assignments}
    assert sorted(granted) == [1, 2]
    assert granted[moved] > first.epoch  # anew: resume from the commit (3), not a's position
    (kept,) = {1, 2} - {moved}
    assert granted[kept] <= first.epoch


def test_the_rebalance_interval_is_an_option_with_a_range(data: Path) -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "sqltopic.server", "--data", str(data),
         "--rebalance-interval-ms", "5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--rebalance-interval-ms: 5 is out of range 100..60000" in bad.stderr
    assert not data.exists()  # refused before touching the data directory
    fast = ServerProcess(data, extra=("--rebalance-interval-ms", "200"))
    fast.wait_ready()
    try:
        wire = Wire(fast.address)
        with connect(fast.address) as conn:
            conn.execute(POWER + "; " + TOPIC)
        sub = wire.subscribe("g", ["hot"], max_poll_interval_ms=1000)
        _wait_until(
            lambda: (
                wire.mnode.Heartbeat(
                    pb.HeartbeatRequest(consumer_id=sub.consumer_id), metadata=wire.md
                ).status
                == pb.CONSUMER_STATUS_REMOVED
            ),
            "the idle consumer is removed",
        )
        wire.close()
    finally:
        fast.kill()
