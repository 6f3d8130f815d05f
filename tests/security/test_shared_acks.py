"""Shared groups under hostile callers: only a member of the shared group, as its own
user, polls and acknowledges its rows; a malformed Acknowledge is refused whole and
changes nothing; a dead-letter table needs WRITE on its database. Each refusal leaves
every lease and acknowledgement as it was."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from sqltopic.client import Connection
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.security.hostile import UserWire, refusal
from tests.security.test_consumer_binding import PASSWORD, alice, bob, users

__all__ = ["alice", "bob", "users"]  # fixtures
DENIED = (grpc.StatusCode.PERMISSION_DENIED, "NoPermission")
BAD = (grpc.StatusCode.INVALID_ARGUMENT, "ConfigError")
FENCED = (grpc.StatusCode.ABORTED, "ConsumerFenced")


def _poll(wire: UserWire, consumer: int, epoch: int, vgroup: int) -> pb.PollResponse:
    request = pb.PollRequest(
        consumer_id=consumer, group_id="s", topic="t1", vgroup=vgroup, epoch=epoch,
        max_wait_ms=2_000,
    )  # fmt: skip
    return wire.fetch(request)


Leased = tuple[int, int, int, pb.PollResponse]  # consumer, epoch, vgroup, the answer


@pytest.fixture
def leased(alice: UserWire) -> Iterator[Leased]:
    """Alice's shared consumer, its epoch, and a poll that leased it rows of a vgroup."""
    joined = alice.subscribe("s", ["t1"], group_type="shared")
    epoch = alice.assignment(joined.consumer_id).epoch
    for vgroup in (1, 2):
        answer = _poll(alice, joined.consumer_id, epoch, vgroup)
        if answer.WhichOneof("message") == "data":
            yield joined.consumer_id, epoch, vgroup, answer
            return
    raise AssertionError("no rows leased")


def _ack(leased: Leased, **fields: object) -> pb.AcknowledgeRequest:
    consumer, epoch, vgroup, answer = leased
    data = answer.data
    base: dict[str, object] = {
        "consumer_id": consumer, "group_id": "s", "topic": "t1", "epoch": epoch,
        "versions": list(data.row_versions), "indexes": list(data.row_indexes),
        "type": pb.ACK_TYPE_ACCEPT, "vgroup": vgroup,
    }  # fmt: skip
    return pb.AcknowledgeRequest(**(base | fields))  # type: ignore[arg-type]


def test_only_the_consumers_own_user_acknowledges_its_rows(
    alice: UserWire, bob: UserWire, users: Connection, leased: Leased
) -> None:
    consumer, _, vgroup, answer = leased
    rows = len(answer.data.row_versions)
    code, error, message = refusal(lambda: bob.acknowledge(_ack(leased)))
    assert (code, error) == DENIED
    assert f"consumer {consumer} belongs to user alice, not bob" in message
    # bob's own consumer of the group cannot settle alice's rows either
    theirs = bob.subscribe("s", ["t1"], group_type="shared")
    bob_epoch = bob.assignment(theirs.consumer_id).epoch
    answered = bob.acknowledge(_ack(leased, consumer_id=theirs.consumer_id, epoch=bob_epoch))
    assert (answered.settled, answered.not_held) == (0, rows)
    # nor release them: they stay alice's, and her acknowledgement settles them all
    answered = bob.acknowledge(
        _ack(leased, consumer_id=theirs.consumer_id, epoch=bob_epoch, type=pb.ACK_TYPE_RELEASE)
    )
    assert answered.settled == 0
    assert alice.acknowledge(_ack(leased)).settled == rows
    # polls are bound the same way, and end with the right to consume
    code, error, message = refusal(lambda: _poll(bob, consumer, leased[1], vgroup))
    assert (code, error) == DENIED
    users.execute("REVOKE SUBSCRIBE ON t1 FROM alice")
    code, error, message = refusal(lambda: _poll(alice, consumer, leased[1], vgroup))
    assert (code, error) == DENIED, message


def test_malformed_acknowledgements_are_refused_whole(
    alice: UserWire, users: Connection, leased: Leased
) -> None:
    consumer, epoch, _, answer = leased
    rows = len(answer.data.row_versions)
    attacks = {
        "no type": (_ack(leased, type=pb.ACK_TYPE_UNSPECIFIED), BAD),
        "unknown type": (_ack(leased, type=7), BAD),
        "lengths differ": (_ack(leased, indexes=[0] * (rows + 1)), BAD),
        "too many rows": (
            _ack(leased, versions=[1] * 1_000_001, indexes=[0] * 1_000_001),
            (grpc.StatusCode.RESOURCE_EXHAUSTED, "TooLarge"),
        ),
        "bad group": (_ack(leased, group_id="g" * 193), BAD),
        "not a member": (_ack(leased, consumer_id=consumer + 99), FENCED),
        "future epoch": (_ack(leased, epoch=epoch + 5), FENCED),
        "no such topic": (_ack(leased, topic="nope"), FENCED),  # not one of its topics
        "no such vgroup": (_ack(leased, vgroup=99), None),
    }
    for name, (request, expected) in attacks.items():
        code, error, message = refusal(lambda r=request: alice.acknowledge(r))  # type: ignore[misc]
        assert code != grpc.StatusCode.INTERNAL, (name, message)
        if expected is not None:
            assert (code, error) == expected, (name, message)
    # the rows are still leased to alice, untouched: one real acknowledgement settles all
    assert alice.acknowledge(_ack(leased)).settled == rows
    # nor can a standalone commit move the shared group's progress
    commit = pb.CommitRequest(
        group_id="s", offsets=[pb.TopicVgroupOffset(topic="t1", vgroup=leased[2], offset=1)]
    )
    assert refusal(lambda: alice.commit(commit))[:2] == FENCED  # a member reads there
    alice.close_consumer(consumer)
    code, error, message = refusal(lambda: alice.commit(commit))
    assert ((code, error), "shared group" in message) == (BAD, True)


def test_a_vgroup_groups_consumer_does_not_acknowledge(alice: UserWire, users: Connection) -> None:
    joined = alice.subscribe("v", ["t1"])
    epoch = alice.assignment(joined.consumer_id).epoch
    request = pb.AcknowledgeRequest(
        consumer_id=joined.consumer_id, group_id="v", topic="t1", vgroup=1, epoch=epoch,
        versions=[1], indexes=[0], type=pb.ACK_TYPE_ACCEPT,
    )  # fmt: skip
    code, error, message = refusal(lambda: alice.acknowledge(request))
    assert (code, error) == BAD
    assert "only shared groups acknowledge rows" in message


def test_a_dead_letter_table_needs_write_on_its_database(
    alice: UserWire, users: Connection
) -> None:
    code, error, message = refusal(
        lambda: alice.subscribe("s", ["t1"], group_type="shared", dead_letter_table="power.dlq")
    )
    # alice holds no right in power: the database does not exist for her
    assert (code, error) == (grpc.StatusCode.NOT_FOUND, "NotFoundError"), message
    users.execute("GRANT READ ON power.* TO alice")
    code, error, message = refusal(
        lambda: alice.subscribe("s", ["t1"], group_type="shared", dead_letter_table="power.dlq")
    )
    assert (code, error) == DENIED
    assert "GRANT WRITE ON power.* TO alice" in message
    assert users.execute("SHOW CONSUMERS").rows == []
    users.execute("GRANT WRITE ON power.* TO alice")
    alice.subscribe("s", ["t1"], group_type="shared", dead_letter_table="power.dlq")
    assert PASSWORD  # the users' password, from the shared fixtures


def test_acknowledgements_riding_on_a_poll_are_checked(
    alice: UserWire, users: Connection, leased: Leased
) -> None:
    consumer, epoch, vgroup, answer = leased
    rows = len(answer.data.row_versions)
    request = pb.PollRequest(
        consumer_id=consumer, group_id="s", topic="t1", vgroup=vgroup, epoch=epoch,
        ack_versions=list(answer.data.row_versions), ack_indexes=[0],
    )  # fmt: skip
    code, error, message = refusal(lambda: alice.fetch(request))
    assert ((code, error), "PollRequest: " in message) == (BAD, True)
    joined = alice.subscribe("v", ["t1"])  # a vgroup group's poll carries none
    held = alice.assignment(joined.consumer_id)
    plain = pb.PollRequest(
        consumer_id=joined.consumer_id, group_id="v", topic="t1",
        vgroup=held.assignments[0].vgroup, epoch=held.epoch, position=1,
        ack_versions=[1], ack_indexes=[0],
    )  # fmt: skip
    code, error, message = refusal(lambda: alice.fetch(plain))
    assert (code, error) == BAD
    assert "are for shared groups" in message
    # the rows are still alice's: the refused poll accepted none of them
    assert alice.acknowledge(_ack(leased)).settled == rows


def test_an_acquire_mode_is_checked(alice: UserWire, leased: Leased) -> None:
    """A value outside ShareAcquireMode, or RECORD_LIMIT on a vgroup group's poll, is
    refused before anything is leased or accepted."""
    consumer, epoch, vgroup, answer = leased
    rows = len(answer.data.row_versions)
    request = pb.PollRequest(
        consumer_id=consumer, group_id="s", topic="t1", vgroup=vgroup, epoch=epoch,
        acquire_mode=7,  # type: ignore[arg-type]  # proto3 keeps unknown enum values
        ack_versions=list(answer.data.row_versions),
        ack_indexes=list(answer.data.row_indexes),
    )  # fmt: skip
    code, error, message = refusal(lambda: alice.fetch(request))
    assert (code, error) == BAD
    assert "PollRequest: acquire_mode 7 is not SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED (0)" in message
    joined = alice.subscribe("v", ["t1"])
    held = alice.assignment(joined.consumer_id)
    plain = pb.PollRequest(
        consumer_id=joined.consumer_id, group_id="v", topic="t1",
        vgroup=held.assignments[0].vgroup, epoch=held.epoch, position=1,
        acquire_mode=pb.SHARE_ACQUIRE_MODE_RECORD_LIMIT,
    )  # fmt: skip
    code, error, message = refusal(lambda: alice.fetch(plain))
    assert (code, error) == BAD
    assert "acquire_mode 1 is for shared groups; group v reads whole WAL entries" in message
    alice.close_consumer(joined.consumer_id)  # no member now: fenced, so that it joins again
    code, error, _ = refusal(lambda: alice.fetch(plain))
    assert (code, error) == FENCED
    # the refused poll accepted nothing: the rows are still alice's to acknowledge
    assert alice.acknowledge(_ack(leased)).settled == rows


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"group_type": "shared", "group_key": "location"},
         "group.key: a key_shared group's setting; group g is shared"),
        ({"group_type": "key_shared", "group_key": "x'; DROP"}, "group.key: "),
        ({"group_type": "key_shared", "group_key": "nosuchcolumn"},
         "group.key: 'nosuchcolumn' is neither a column of topic t1's rows"),
    ],
)  # fmt: skip
def test_a_bad_group_key_is_refused_at_subscribe(
    alice: UserWire, fields: dict[str, object], expected: str
) -> None:
    code, error, message = refusal(lambda: alice.subscribe("g", ["t1"], **fields))
    assert (code, error) == BAD
    assert expected in message
    joined = alice.subscribe("g", ["t1"], group_type="key_shared")  # nothing was kept
    assert joined.consumer_id
