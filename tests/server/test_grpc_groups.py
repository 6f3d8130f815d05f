"""SHOW CONSUMERS, SHOW SUBSCRIPTIONS and the DROP statements' refusals, against a real
server with consumers joined over the wire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow as pa
import pytest

from sqltopic.client import Connection
from sqltopic.errors import SchemaInUseError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.live_server import ServerProcess
from tests.server.wire import Wire, offsets, rows, status

TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters WHERE voltage > 220"


@pytest.fixture
def wire(server: ServerProcess) -> Iterator[Wire]:
    w = Wire(server.address)
    yield w
    w.close()


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
