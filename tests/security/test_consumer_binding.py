"""Every call naming a consumer is bound to the consumer's user: a second user can
neither drive nor evict another user's consumer, Committed and OffsetRange need the
right to consume, and bad Mnode fields are refused. Each refusal changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from sqltopic.client import Connection
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.client.support import METERS
from tests.live_server import POWER, ServerProcess
from tests.security.hostile import UserWire, refusal

PASSWORD = "secret-pw-1"
DENIED = (grpc.StatusCode.PERMISSION_DENIED, "NoPermission")
BAD = (grpc.StatusCode.INVALID_ARGUMENT, "ConfigError")


@pytest.fixture
def users(conn: Connection) -> Connection:
    """Root's connection: power.meters with 8 rows, stable topic t1, users alice, bob and
    carol; alice and bob may consume t1, carol may not."""
    conn.execute(POWER)
    conn.execute(f"{METERS}; CREATE TOPIC t1 AS STABLE power.meters")
    for name in ("alice", "bob", "carol"):
        conn.execute(f"CREATE USER {name} PASS '{PASSWORD}'")
    conn.execute("GRANT SUBSCRIBE ON t1 TO alice; GRANT SUBSCRIBE ON t1 TO bob")
    return conn


@pytest.fixture
def alice(server: ServerProcess, users: Connection) -> Iterator[UserWire]:
    with UserWire(server.address, "alice", PASSWORD) as wire:
        yield wire


@pytest.fixture
def bob(server: ServerProcess, users: Connection) -> Iterator[UserWire]:
    with UserWire(server.address, "bob", PASSWORD) as wire:
        yield wire


def consumers(conn: Connection) -> list[tuple[str, str, str]]:
    """(consumer_id, group, user) of every consumer, as root sees them."""
    return [(r[0], r[1], r[3]) for r in conn.execute("SHOW CONSUMERS").rows]


def poll_request(consumer: int, epoch: int, vgroup: int) -> pb.PollRequest:
    return pb.PollRequest(
        consumer_id=consumer, group_id="g", topic="t1", vgroup=vgroup, epoch=epoch, position=1
    )


def test_another_users_consumer_cannot_be_driven(
    alice: UserWire, bob: UserWire, users: Connection
) -> None:
    joined = alice.subscribe("g", ["t1"], client_id="alice-app")
    mine, epoch = joined.consumer_id, joined.epoch
    assignment = alice.assignment(mine)
    vgroup = assignment.assignments[0].vgroup
    before = consumers(users)
    offset = pb.TopicVgroupOffset(topic="t1", vgroup=vgroup, offset=2)
    attacks = {
        "subscribe": lambda: bob.subscribe("g", ["t1"], consumer_id=mine),
        "heartbeat": lambda: bob.heartbeat(mine, epoch),
        "assignment": lambda: bob.assignment(mine),
        "unsubscribe": lambda: bob.unsubscribe(mine),
        "close": lambda: bob.close_consumer(mine),
        "poll": lambda: bob.poll(poll_request(mine, assignment.epoch, vgroup)),
        "fetch": lambda: bob.fetch(poll_request(mine, assignment.epoch, vgroup)),
        "commit": lambda: bob.commit(
            pb.CommitRequest(consumer_id=mine, group_id="g", epoch=epoch, offsets=[offset])
        ),
    }
    for name, attack in attacks.items():
        code, error, message = refusal(attack)
        assert (code, error) == DENIED, name
        assert f"consumer {mine} belongs to user alice, not bob" in message, name
    # nothing changed: the consumer is alice's, as ready as before, with its vgroups
    assert consumers(users) == before
    answer = alice.heartbeat(mine, assignment.epoch)
    assert (answer.epoch, answer.status) == (assignment.epoch, pb.CONSUMER_STATUS_READY)
    assert len(alice.assignment(mine).assignments) == 2
    assert alice.committed("g", "t1", vgroup) is None


def test_root_may_act_on_any_consumer(alice: UserWire, server: ServerProcess) -> None:
    mine = alice.subscribe("g", ["t1"]).consumer_id
    with UserWire(server.address) as root:
        assert root.heartbeat(mine).status == pb.CONSUMER_STATUS_READY
        assert len(root.assignment(mine).assignments) == 2
        root.close_consumer(mine)
    assert alice.heartbeat(mine).status == pb.CONSUMER_STATUS_REMOVED


def test_a_standalone_evict_needs_the_user_of_every_live_member(
    alice: UserWire, bob: UserWire, users: Connection
) -> None:
    mine = alice.subscribe("g", ["t1"]).consumer_id
    vgroups = [a.vgroup for a in alice.assignment(mine).assignments]
    evict = pb.CommitRequest(
        group_id="g", evict=True,
        offsets=[pb.TopicVgroupOffset(topic="t1", vgroup=v, offset=1) for v in vgroups],
    )  # fmt: skip
    code, error, message = refusal(lambda: bob.commit(evict))
    assert (code, error) == DENIED
    assert f"would remove consumer {mine} of user alice from group g" in message
    assert [c[2] for c in consumers(users)] == ["alice"]
    assert [bob.committed("g", "t1", v) for v in vgroups] == [None, None]
    # the user of every live member may: alice's own consumer is evicted, offsets stored
    alice.commit(evict)
    assert consumers(users) == []
    assert [alice.committed("g", "t1", v) for v in vgroups] == [1, 1]


def test_committed_and_offset_range_need_the_right_to_consume(
    alice: UserWire, server: ServerProcess, users: Connection
) -> None:
    with UserWire(server.address, "carol", PASSWORD) as carol:
        calls = (
            lambda: carol.committed("g", "t1", 1),
            lambda: carol.offset_range("t1", 1),
            lambda: carol.offsets_for_times("t1", 1, 0),
        )
        for call in calls:  # carol may not even read what t1 reads: t1 does not exist for her
            code, error, message = refusal(call)
            assert (code, error) == (grpc.StatusCode.NOT_FOUND, "TopicNotFound")
            assert message == "topic 't1' does not exist"
        users.execute("GRANT READ ON power.* TO carol")
        for call in calls:
            code, error, message = refusal(call)
            assert (code, error) == DENIED
            assert "user carol may not consume topic t1" in message
    begin, end = alice.offset_range("t1", 1)
    assert 1 <= begin < end
    assert alice.committed("g", "t1", 1) is None
    assert alice.offsets_for_times("t1", 1, 0, 2**62) == [begin, end]


@pytest.mark.parametrize(
    ("positions", "words"),
    [
        ([1, 1], "2 positions for 1 vgroups; give one per vgroup (-1 for none)"),
        ([-2], "position -2 of topic t1 vgroup 1 is below -1"),
    ],
)
def test_bad_lag_positions_are_refused(alice: UserWire, positions: list[int], words: str) -> None:
    request = pb.OffsetRangeRequest(
        vgroups=[pb.TopicVgroup(topic="t1", vgroup=1)], positions=positions
    )
    code, error, message = refusal(lambda: alice.vnode.OffsetRange(request, metadata=alice.md))
    assert (code, error) == BAD
    assert words in message
    fine = pb.OffsetRangeRequest(vgroups=[pb.TopicVgroup(topic="t1", vgroup=1)], positions=[1])
    (found,) = alice.vnode.OffsetRange(fine, metadata=alice.md).ranges
    assert found.HasField("lag_rows")
    assert found.lag_rows >= 0


def test_bad_time_look_ups_are_refused(alice: UserWire) -> None:
    code, error, message = refusal(lambda: alice.offsets_for_times("t1", 1, 0, -5))
    assert (code, error) == BAD
    assert message == (
        "OffsetsForTimes: time_ms -5 of topic t1 vgroup 1 is before the epoch; give "
        "milliseconds since 1970-01-01 UTC"
    )
    code, error, message = refusal(lambda: alice.offsets_for_times("t1", 1, *[0] * 65_537))
    assert (code, error) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LimitExceeded")
    assert "65537 look-ups in one call; at most 65536 are allowed" in message
    code, error, message = refusal(lambda: alice.offsets_for_times("t1", 999, 0))
    assert (code, error) == (grpc.StatusCode.NOT_FOUND, "NotFoundError")
    assert "vgroup 999 is not a vgroup of topic t1" in message
    assert alice.offsets_for_times("t1", 1, *[0] * 65_536)[-1] >= 1  # the limit itself is fine


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"auto_offset_reset": 77}, "auto_offset_reset: unknown value 77"),
        ({"fqdn": "h" * 5_000_000}, "fqdn: 'hhhh"),
        ({"fqdn": "host\nname"}, "fqdn: 'host\\nname' holds control characters"),
        ({"client_id": "app\x00x"}, "client.id: 'app\\x00x' holds control characters"),
        ({"client_id": "c" * 256}, "the limit is 255"),
        ({"auto_commit_interval_ms": -5}, "auto_commit_interval_ms: -5 is negative"),
        ({"session_timeout_ms": -1}, "session.timeout.ms: -1 is out of range"),
        ({"group_type": "shard"}, "group.type: unknown value 'shard'; use one of vgroup,"),
        ({"group_type": "x" * 5_000_000}, "group.type: unknown value 'xxxx"),
        ({"group_type": "broadcast"}, "client.id: required by group.type broadcast"),
    ],
)
def test_bad_subscribe_fields_are_refused(
    alice: UserWire, users: Connection, fields: dict[str, object], names: str
) -> None:
    code, error, message = refusal(lambda: alice.subscribe("g", ["t1"], **fields))
    assert (code, error) == BAD
    assert names in message
    assert len(message) < 400  # a 5 MB value is not echoed back
    assert consumers(users) == []


@pytest.mark.parametrize(
    ("group", "names"),
    [
        ("", "group.id: required"),
        ("a:b", "group.id: 'a:b' may not contain ':'"),
        ("g\x00", "group.id: 'g\\x00' holds control characters"),
        ("g" * 193, "the limit is 192"),
    ],
)
def test_bad_group_ids_are_refused(
    alice: UserWire, users: Connection, group: str, names: str
) -> None:
    code, error, message = refusal(lambda: alice.subscribe(group, ["t1"]))
    assert (code, error) == BAD
    assert names in message
    assert consumers(users) == []


def test_too_many_topics_are_refused(alice: UserWire, users: Connection) -> None:
    code, error, message = refusal(lambda: alice.subscribe("g", ["t1"] * 4097))
    assert (code, error) == BAD
    assert "at most 4096 topics" in message
    # repeats of one name are one topic
    assert alice.subscribe("g", ["t1"] * 100).consumer_id > 0
    assert len(consumers(users)) == 1


def test_negative_progress_is_refused_and_changes_nothing(
    alice: UserWire, users: Connection
) -> None:
    mine = alice.subscribe("g", ["t1"]).consumer_id
    vgroup = alice.assignment(mine).assignments[0].vgroup
    before = users.execute("SHOW SUBSCRIPTIONS").rows
    for report in (
        pb.VgroupProgress(topic="t1", vgroup=vgroup, position=-3, rows=1),
        pb.VgroupProgress(topic="t1", vgroup=vgroup, position=2, rows=-10),
    ):
        code, error, message = refusal(lambda r=report: alice.heartbeat(mine, progress=[r]))  # type: ignore[misc]
        assert (code, error) == BAD
        assert "must not be negative" in message
    assert users.execute("SHOW SUBSCRIPTIONS").rows == before


@pytest.mark.parametrize("group", ["g" * 193, "a:", ":b", "a:" + "c" * 256, "x\n\x1b[31m"])
def test_commit_and_committed_check_the_group_id(
    alice: UserWire, users: Connection, group: str
) -> None:
    commit = pb.CommitRequest(
        group_id=group, offsets=[pb.TopicVgroupOffset(topic="t1", vgroup=1, offset=1)]
    )
    for call in (lambda: alice.commit(commit), lambda: alice.committed(group, "t1", 1)):
        code, error, _ = refusal(call)
        assert (code, error) == BAD
    assert users.execute("SHOW SUBSCRIPTIONS").rows == []


def test_a_broadcast_lane_is_its_consumers_alone(
    alice: UserWire, bob: UserWire, users: Connection
) -> None:
    mine = alice.subscribe("g", ["t1"], client_id="a", group_type="broadcast")
    assert mine.offsets_group == "g:a"
    epoch = alice.assignment(mine.consumer_id).epoch
    theirs = bob.subscribe("g", ["t1"], client_id="b", group_type="broadcast")
    bob_epoch = bob.assignment(theirs.consumer_id).epoch
    request = pb.PollRequest(
        consumer_id=theirs.consumer_id, group_id="g:a", topic="t1", vgroup=1,
        epoch=bob_epoch, position=1,
    )  # fmt: skip
    assert refusal(lambda: bob.poll(request))[:2] == (grpc.StatusCode.ABORTED, "ConsumerFenced")
    request.consumer_id, request.epoch = mine.consumer_id, epoch  # alice's consumer
    assert refusal(lambda: bob.poll(request))[:2] == (
        grpc.StatusCode.PERMISSION_DENIED,
        "NoPermission",
    )
    commit = pb.CommitRequest(  # standalone, into a lane a live consumer holds
        group_id="g:a", offsets=[pb.TopicVgroupOffset(topic="t1", vgroup=1, offset=1)]
    )
    assert refusal(lambda: bob.commit(commit))[:2] == (grpc.StatusCode.ABORTED, "ConsumerFenced")
    assert alice.committed("g:a", "t1", 1) is None
    # another type in the group is refused, whoever asks
    code, error, _ = refusal(lambda: bob.subscribe("g", ["t1"], client_id="c"))
    assert (code, error) == (grpc.StatusCode.FAILED_PRECONDITION, "GroupConflict")
