"""Mnode.Heartbeats against a real server: many consumers' heartbeats in one call, each
checked and answered exactly as its own Heartbeat call would be, one bad beat failing
only itself, and a call over the limit refused whole."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from sqltopic.client import Connection
from sqltopic.errors import AuthenticationFailed, Error, NoPermission
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import from_call_status
from sqltopic.server.common.turns import PER_TURN
from sqltopic.server.rpc.mnode_service import MAX_BEATS_PER_CALL
from tests.server.wire import CALL_TIMEOUT_S, Wire, status

TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters WHERE voltage > 220"


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    return live_power


def token(wire: Wire) -> str:
    return wire.md[0][1].removeprefix("Bearer ")


def login(wire: Wire, user: str, password: str) -> str:
    answer = pb_grpc.SessionStub(wire.channel).Login(
        pb.LoginRequest(user=user, password=password), timeout=CALL_TIMEOUT_S
    )
    return str(answer.token)


def subscriptions(conn: Connection) -> dict[tuple[str, int], Any]:
    return {
        (r["consumer_id"], r["vgroup_id"]): r["rows"]
        for r in conn.query("SHOW SUBSCRIPTIONS").to_pylist()
    }


def beats(wire: Wire, requests: list[tuple[str, pb.HeartbeatRequest]]) -> list[Any]:
    """Each beat's answer: its HeartbeatResponse or the error it carries."""
    call = pb.HeartbeatsRequest(beats=[pb.Beat(token=t, heartbeat=r) for t, r in requests])
    answer = wire.mnode.Heartbeats(call, timeout=CALL_TIMEOUT_S)  # no header: beats carry it
    assert len(answer.results) == len(requests)
    return [
        from_call_status(r.error) if r.WhichOneof("result") == "error" else r.heartbeat
        for r in answer.results
    ]


def alone(wire: Wire, tok: str, request: pb.HeartbeatRequest) -> Any:
    """The same beat as its own Heartbeat call: its answer, or (code, error class)."""
    metadata = (("authorization", f"Bearer {tok}"),)
    try:
        return wire.mnode.Heartbeat(request, metadata=metadata, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        code, trailers = status(exc)
        return code, trailers["sqltopic-error"]


def test_each_beat_is_answered_as_its_own_heartbeat_would_be(hot: Connection, wire: Wire) -> None:
    hot.execute("CREATE USER bob PASS 'bob-pw-12'")
    root, bob = token(wire), login(wire, "bob", "bob-pw-12")
    a = wire.subscribe("ga", ["hot"])
    b = wire.subscribe("gb", ["hot"])
    assignment = wire.assignment(a.consumer_id)
    progress = [
        pb.VgroupProgress(topic="hot", vgroup=x.vgroup, rows=7) for x in assignment.assignments
    ]
    current = pb.HeartbeatRequest(
        consumer_id=a.consumer_id, epoch=assignment.epoch, polled=True, progress=progress
    )
    stale = pb.HeartbeatRequest(consumer_id=b.consumer_id, epoch=0)
    unknown = pb.HeartbeatRequest(consumer_id=987_654_321)
    requests = [
        (root, current),
        (root, stale),
        ("not-a-token", current),
        (bob, current),  # root's consumer: not bob's to keep alive
        (root, unknown),
    ]
    answers = beats(wire, requests)
    assert answers[0] == pb.HeartbeatResponse(
        epoch=assignment.epoch, status=pb.CONSUMER_STATUS_READY, takes_progress_changes=True
    )
    assert answers[1].refresh_assignment
    assert answers[1].epoch == b.epoch
    assert isinstance(answers[2], AuthenticationFailed)
    assert "unknown or expired token" in str(answers[2])
    assert isinstance(answers[3], NoPermission)
    assert answers[4] == pb.HeartbeatResponse(
        status=pb.CONSUMER_STATUS_REMOVED, takes_progress_changes=True
    )
    # the same beats as calls of their own answer alike (the good ones changed nothing
    # more: the progress was reported already)
    expected = [alone(wire, t, r) for t, r in requests]
    assert [answers[0], answers[1], answers[4]] == [expected[0], expected[1], expected[4]]
    assert expected[2] == (grpc.StatusCode.UNAUTHENTICATED, "AuthenticationFailed")
    assert expected[3] == (grpc.StatusCode.PERMISSION_DENIED, "NoPermission")
    # the good beat's progress reached the mnode
    mine = {v: n for (c, v), n in subscriptions(hot).items() if c == str(a.consumer_id)}
    assert mine == {x.vgroup: 7 for x in assignment.assignments}


def test_beats_answered_over_several_turns_keep_their_order(hot: Connection, wire: Wire) -> None:
    """A call of more beats than one turn of the event loop answers (PER_TURN)
    answers each in its place, across the turns."""
    a = wire.subscribe("ga", ["hot"])
    assignment = wire.assignment(a.consumer_id)
    good = pb.HeartbeatRequest(consumer_id=a.consumer_id, epoch=assignment.epoch)
    count = 3 * PER_TURN + 5
    requests = [(token(wire) if i % 3 else "not-a-token", good) for i in range(count)]
    answers = beats(wire, requests)
    for i, answer in enumerate(answers):
        if i % 3:
            assert answer.status == pb.CONSUMER_STATUS_READY, i
            assert answer.epoch == assignment.epoch, i
        else:
            assert isinstance(answer, AuthenticationFailed), i


def test_a_heartbeat_of_changes_updates_only_what_it_lists(hot: Connection, wire: Wire) -> None:
    """progress_changed_only: the vgroups it does not list keep what the last full
    listing said, and a vgroup being revoked that it does not list is not let go; a
    member without a full listing is asked for one."""
    tok = token(wire)
    a = wire.subscribe("g", ["hot"])
    asg = wire.assignment(a.consumer_id)
    vgroups = sorted(x.vgroup for x in asg.assignments)

    def heartbeat(rows: dict[int, int], changed_only: bool) -> pb.HeartbeatResponse:
        progress = [pb.VgroupProgress(topic="hot", vgroup=v, rows=n) for v, n in rows.items()]
        request = pb.HeartbeatRequest(
            consumer_id=a.consumer_id, epoch=asg.epoch, polled=True, progress=progress,
            progress_changed_only=changed_only,
        )  # fmt: skip
        answer = alone(wire, tok, request)
        assert isinstance(answer, pb.HeartbeatResponse), answer
        return answer

    # its first heartbeat lists only changes: kept, and a full listing is asked for
    first = heartbeat({vgroups[0]: 3}, changed_only=True)
    assert (first.takes_progress_changes, first.wants_full_progress) == (True, True)
    full = heartbeat(dict.fromkeys(vgroups, 7), changed_only=False)
    assert (full.takes_progress_changes, full.wants_full_progress) == (True, False)
    changed = heartbeat({vgroups[1]: 9}, changed_only=True)
    assert changed.wants_full_progress is False
    mine = {v: n for (c, v), n in subscriptions(hot).items() if c == str(a.consumer_id)}
    assert mine == {v: 9 if v == vgroups[1] else 7 for v in vgroups}
    # a second consumer joins: half of a's vgroups are being revoked, and a heartbeat of
    # changes that lists none of them does not let them go
    b = wire.subscribe("g", ["hot"])
    heartbeat({}, changed_only=True)
    assert wire.assignment(b.consumer_id).assignments == []
    # a full listing without them does
    kept = {x.vgroup for x in wire.assignment(a.consumer_id).assignments}
    heartbeat(dict.fromkeys(kept, 9), changed_only=False)
    moved = {x.vgroup for x in wire.assignment(b.consumer_id).assignments}
    assert moved == set(vgroups) - kept
    assert moved


def test_an_empty_call_answers_nothing(hot: Connection, wire: Wire) -> None:
    assert beats(wire, []) == []


def test_too_many_beats_are_refused_and_change_nothing(hot: Connection, wire: Wire) -> None:
    a = wire.subscribe("ga", ["hot"])
    assignment = wire.assignment(a.consumer_id)
    progress = [
        pb.VgroupProgress(topic="hot", vgroup=x.vgroup, rows=5) for x in assignment.assignments
    ]
    beat = pb.Beat(
        token=token(wire),
        heartbeat=pb.HeartbeatRequest(
            consumer_id=a.consumer_id, epoch=assignment.epoch, progress=progress
        ),
    )
    before = subscriptions(hot)
    request = pb.HeartbeatsRequest(beats=[beat] * (MAX_BEATS_PER_CALL + 1))
    with pytest.raises(grpc.RpcError) as caught:
        wire.mnode.Heartbeats(request, timeout=CALL_TIMEOUT_S)
    code, trailers = status(caught.value)
    assert (code, trailers["sqltopic-error"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "InvalidRequest",
    )
    details = str(caught.value.details())
    assert f"{MAX_BEATS_PER_CALL + 1} beats in one call" in details
    assert "several calls" in details
    assert subscriptions(hot) == before
    assert all(rows != 5 for rows in before.values())


def test_error_classes_survive_the_call_status() -> None:
    err = from_call_status(pb.CallStatus(code=99, message="odd"))
    assert type(err) is Error
    assert str(err) == "odd"
