"""Follows on Vnode.Consume against a real server (server/dnode/follow.py): a poll that
stays open and is answered again after each message, from its end, within the credit
the client grants; how it ends (a rising epoch, a cancel, a revoke); every refusal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import grpc
import pytest

from sqltopic.client import Connection
from sqltopic.errors import NoPermission
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status
from sqltopic.server.core.routing import HASH_SPACE, table_hash
from sqltopic.server.dnode.follow import MAX_FOLLOW_WINDOW
from tests.live_server import ServerProcess
from tests.server.test_consume_stream import HOLD_MS, TOPIC, Stream, write
from tests.server.test_grpc_users import PASSWORD, UserWire
from tests.server.wire import Wire, poll_request, rows, status


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    return live_power


def follow(stream: Stream, ticket: int, request: pb.PollRequest, window: int) -> None:
    stream.requests.put(pb.ConsumeRequest(ticket=ticket, poll=request, follow=window))


def grant(stream: Stream, *tickets: int) -> None:
    stream.requests.put(pb.ConsumeRequest(grants=list(tickets)))


def answer(stream: Stream) -> pb.ConsumeResponse:
    got = stream.next()
    assert isinstance(got, pb.ConsumeResponse), got
    return got


def span(got: pb.ConsumeResponse) -> tuple[str, int, int]:
    """An answer's kind and [offset, end_offset)."""
    kind = got.message.WhichOneof("message") or ""
    found = getattr(got.message, kind)
    return kind, found.offset, found.end_offset


def voltages(got: pb.ConsumeResponse) -> list[object]:
    return [r["voltage"] for r in rows([got.message])]


def follows(
    wire: Wire, group: str, window: int, start: int = 1, max_wait_ms: int = HOLD_MS
) -> tuple[Stream, pb.SubscribeResponse, int, dict[int, int]]:
    """A consumer of `hot` in `group` following each of its vgroups from the start;
    its stream, subscription, epoch and ticket -> vgroup."""
    sub = wire.subscribe(group, ["hot"], auto_offset_reset=pb.OFFSET_RESET_EARLIEST)
    asg = wire.assignment(sub.consumer_id)
    stream = Stream(wire)
    tickets = {}
    for ticket, a in enumerate(sorted(asg.assignments, key=lambda a: a.vgroup), start=start):
        request = poll_request(sub.consumer_id, group, "hot", a.vgroup, asg.epoch, 1,
                               {"max_wait_ms": max_wait_ms})  # fmt: skip
        follow(stream, ticket, request, window)
        tickets[ticket] = a.vgroup
    return stream, sub, asg.epoch, tickets


def test_a_follow_answers_each_write_from_where_the_last_answer_ended(
    hot: Connection, wire: Wire
) -> None:
    write(hot, "d1", [230, 210], 0)  # one row for the topic
    stream, _, epoch, _ = follows(wire, "g", window=4)
    first = answer(stream)
    assert (first.open, voltages(first), first.message.epoch) == (True, [230], epoch)
    ticket = first.ticket
    kind, _, end = span(first)
    assert kind == "data"
    # caught up: every write to d1 is pushed on the same ticket, contiguous, exact
    for k, voltage in enumerate([231, 232, 233, 234, 235]):
        write(hot, "d1", [voltage, 200], 10 * (k + 1))  # 200 is not the topic's
        got = answer(stream)
        assert (got.ticket, got.open, voltages(got)) == (ticket, True, [voltage])
        kind, offset, next_end = span(got)
        assert (kind, offset) == ("data", end)
        end = next_end
        grant(stream, ticket)
    assert stream.close() == []  # half-closing ends the follows


def test_a_follow_sends_no_more_than_its_credit_until_granted(hot: Connection, wire: Wire) -> None:
    write(hot, "d1", [230], 0)
    stream, _, _, _ = follows(wire, "g", window=1)
    first = answer(stream)
    ticket = first.ticket
    _, _, end = span(first)
    # no credit left: these writes wait for a grant, then come as one message
    write(hot, "d1", [231], 10)
    write(hot, "d1", [232], 20)
    grant(stream, 999, ticket)  # an unknown ticket is ignored
    got = answer(stream)
    assert (got.ticket, got.open, voltages(got)) == (ticket, True, [231, 232])
    assert span(got)[1] == end
    assert stream.close() == []


def test_a_follow_passed_by_entries_it_does_not_keep_moves_on_with_an_empty_message(
    hot: Connection, wire: Wire
) -> None:
    """An empty message moves a follow's position past entries without rows for it, at
    its deadline (a follow asking 0 ms waits the server's minimum, 1 s, not a spin);
    nothing passed by, it sends nothing (tests/server/test_shared_pass.py)."""
    write(hot, "d1", [230], 0)
    stream, _, _, tickets = follows(wire, "g", window=4, max_wait_ms=0)
    answers = [answer(stream) for _ in tickets]  # each vgroup's first poll: at once
    first = next(a for a in answers if span(a)[0] == "data")
    assert voltages(first) == [230]
    assert sorted(span(a)[0] for a in answers) == ["data"] + ["empty"] * (len(tickets) - 1)
    end = span(first)[2]
    write(hot, "d1", [200], 10)  # not the topic's: its vgroup's follow is passed by
    got = answer(stream)
    assert (got.ticket, got.open) == (first.ticket, True)
    kind, offset, moved = span(got)
    assert (kind, offset) == ("empty", moved)  # an empty message is a position
    assert moved > end
    write(hot, "d1", [231], 20)  # the next message starts where the empty ended
    got = answer(stream)
    assert (got.ticket, voltages(got), span(got)[1]) == (first.ticket, [231], moved)
    assert stream.close() == []


def test_a_follow_ends_when_its_consumers_epoch_rises(hot: Connection, wire: Wire) -> None:
    write(hot, "d1", [230], 0)
    stream, sub, epoch, tickets = follows(wire, "g", window=4)
    answer(stream)  # d1's vgroup answered; each follow now waits for writes
    # a second member joins: the first consumer's assignment moves on, and every follow
    # it holds ends at once with the new epoch (refresh, then follow again)
    wire.subscribe("g", ["hot"])
    ended: dict[int, pb.ConsumeResponse] = {}
    while len(ended) < len(tickets):
        got = answer(stream)
        assert not got.open
        ended[got.ticket] = got
    for got in ended.values():
        if got.WhichOneof("result") == "message":
            assert got.message.epoch > epoch
            assert got.message.WhichOneof("message") == "empty"
        else:  # the vgroup is no longer its own: fenced
            assert type(from_call_status(got.error)).__name__ == "ConsumerFenced"
    assert wire.assignment(sub.consumer_id).epoch > epoch
    assert stream.close() == []


def test_a_cancelled_follow_is_not_answered_again(hot: Connection, wire: Wire) -> None:
    write(hot, "d1", [230], 0)
    stream, sub, epoch, tickets = follows(wire, "g", window=4)
    first = answer(stream)
    _, _, end = span(first)
    for other in tickets:
        stream.send(other)  # cancel every follow
    # a poll sent after the cancels, answered: the server has read them (a stream's
    # requests are taken in order); an answer already under way could cross a cancel
    vgroup = tickets[first.ticket]
    stream.send(50, poll_request(sub.consumer_id, "g", "hot", vgroup, epoch, end,
                                 {"max_wait_ms": 0}))  # fmt: skip
    read = answer(stream)
    assert (read.ticket, read.message.WhichOneof("message")) == (50, "empty")
    write(hot, "d1", [231], 10)
    # a new follow of the same vgroup from there: its answer is the only one (an
    # answer of a cancelled follow would come before it, or before the stream ends)
    request = poll_request(sub.consumer_id, "g", "hot", vgroup, epoch, end,
                           {"max_wait_ms": HOLD_MS})  # fmt: skip
    follow(stream, 60, request, 4)
    got = answer(stream)
    assert (got.ticket, voltages(got), span(got)[1]) == (60, [231], end)
    assert stream.close() == []


def test_a_window_over_the_limit_ends_the_stream(hot: Connection, wire: Wire) -> None:
    stream = Stream(wire)
    grant(stream, 5)  # grants alone are a valid request
    follow(stream, 1, poll_request(1, "g", "hot", 1, 1, None, {}), MAX_FOLLOW_WINDOW + 1)
    ended = stream.next()
    assert isinstance(ended, grpc.RpcError)
    code, trailers = status(ended)
    assert (code, trailers["sqltopic-error"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "InvalidRequest",
    )
    assert f"at most {MAX_FOLLOW_WINDOW}" in (cast("grpc.Call", ended).details() or "")


@pytest.fixture
def alice_follows(server: ServerProcess, hot: Connection) -> Iterator[tuple[UserWire, Connection]]:
    hot.execute(f"CREATE USER alice PASS '{PASSWORD}'; GRANT READ ON power.* TO alice;"
                "GRANT SUBSCRIBE ON hot TO alice")  # fmt: skip
    wire = UserWire(server.address, "alice", PASSWORD)
    yield wire, hot
    wire.close()


def test_a_revoke_ends_a_follow_with_no_permission(
    alice_follows: tuple[UserWire, Connection],
) -> None:
    wire, root = alice_follows
    write(root, "d1", [230], 0)
    stream, _, _, _ = follows(wire, "ga", window=4)
    ticket = answer(stream).ticket
    write(root, "d1", [231], 10)
    assert voltages(answer(stream)) == [231]  # standing now
    grant(stream, ticket)
    root.execute("REVOKE SUBSCRIBE ON hot FROM alice")
    write(root, "d1", [232], 20)  # not delivered: the follow is checked again first
    got = answer(stream)
    assert (got.ticket, got.open, got.WhichOneof("result")) == (ticket, False, "error")
    error = from_call_status(got.error)
    assert isinstance(error, NoPermission)
    assert "topic hot" in str(error)
    assert stream.close() == []


def test_a_commit_on_the_stream_is_stored_as_by_the_call_and_refused_alike(
    hot: Connection, wire: Wire
) -> None:
    write(hot, "d1", [230], 0)
    stream, sub, epoch, tickets = follows(wire, "g", window=4)
    first = answer(stream)
    vgroup, (_, _, end) = tickets[first.ticket], span(first)

    def commit(ticket: int, at_epoch: int, offset: int) -> pb.ConsumeResponse:
        item = pb.TopicVgroupOffset(topic="hot", vgroup=vgroup, offset=offset)
        request = pb.CommitRequest(consumer_id=sub.consumer_id, group_id="g", epoch=at_epoch,
                                   offsets=[item])  # fmt: skip
        stream.requests.put(pb.ConsumeRequest(ticket=ticket, commit=request))
        return answer(stream)

    stored = commit(100, epoch, end)
    assert (stored.ticket, stored.WhichOneof("result"), stored.open) == (100, "committed", False)
    assert wire.committed("g", "hot", vgroup) == end  # durable before the answer
    # refused as the call would be, on its ticket only: the stream goes on
    fenced = commit(101, epoch + 7, end)
    assert (fenced.ticket, type(from_call_status(fenced.error)).__name__) == (
        101, "ConsumerFenced",
    )  # fmt: skip
    beyond = commit(102, epoch, end + 1000)
    assert type(from_call_status(beyond.error)).__name__ == "OffsetOutOfRange"
    assert wire.committed("g", "hot", vgroup) == end
    write(hot, "d1", [231], 10)
    assert voltages(answer(stream)) == [231]  # the follow still runs
    assert stream.close() == []


def test_a_requests_own_token_is_checked_as_its_session(
    alice_follows: tuple[UserWire, Connection], wire: Wire
) -> None:
    """A stream may carry other sessions' requests (a client process's consumers):
    each is checked as the session its token names, and refused on its ticket only."""
    alice, _ = alice_follows
    sub = wire.subscribe("gr", ["hot"], auto_offset_reset=pb.OFFSET_RESET_EARLIEST)
    asg = wire.assignment(sub.consumer_id)
    root_poll = poll_request(sub.consumer_id, "gr", "hot", asg.assignments[0].vgroup,
                             asg.epoch, 1, {})  # fmt: skip
    alice_token = alice.md[0][1].partition(" ")[2]
    stream = Stream(wire)  # opened as root
    stream.requests.put(pb.ConsumeRequest(ticket=1, poll=root_poll, token="no-such-token"))
    refused = answer(stream)
    assert (refused.ticket, type(from_call_status(refused.error)).__name__) == (
        1, "AuthenticationFailed",
    )  # fmt: skip
    # alice may not poll as root's consumer, even on root's stream
    stream.requests.put(pb.ConsumeRequest(ticket=2, poll=root_poll, token=alice_token))
    other = answer(stream)
    assert (other.ticket, type(from_call_status(other.error)).__name__) == (2, "NoPermission")
    # the stream's own session still polls
    stream.send(3, root_poll)
    assert answer(stream).WhichOneof("result") == "message"
    assert stream.close() == []


def test_followers_of_two_vgroups_get_their_own_ddl_events_at_the_same_version(
    live_power: Connection, wire: Wire
) -> None:
    """Both vnodes of the server reach one version with other DDL events: each follower
    is sent its own vgroup's event. (A DDL event changes the catalog, which sends the
    standing followers back to ordinary polls: the framing kept for followers never saw
    these; tests/server/test_follow_frames.py covers its key.)"""
    live_power.execute("CREATE TOPIC ddl WITH META AS DATABASE power")
    sub = wire.subscribe("m", ["ddl"], auto_offset_reset=pb.OFFSET_RESET_LATEST)
    asg = wire.assignment(sub.consumer_id)
    vgroups = sorted(a.vgroup for a in asg.assignments)  # the database's order: hash slots
    assert len(vgroups) == 2
    stream = Stream(wire)
    for ticket, vgroup in enumerate(vgroups):  # ticket i follows the vgroup of slot i
        request = poll_request(sub.consumer_id, "m", "ddl", vgroup, asg.epoch, None,
                               {"max_wait_ms": 1})  # fmt: skip
        follow(stream, ticket + 1, request, window=MAX_FOLLOW_WINDOW)
    ends = {}
    for _ in vgroups:  # nothing yet: each first poll answers empty, where its WAL ends
        got = answer(stream)
        assert span(got)[0] == "empty"
        ends[got.ticket] = span(got)[2]
    names = {0: iter(n for n in _names() if _slot(n) == 0),
             1: iter(n for n in _names() if _slot(n) == 1)}  # fmt: skip
    created: dict[int, str] = {}

    def create(slot: int) -> None:
        created[slot + 1] = name = next(names[slot])
        live_power.execute(f"CREATE TABLE {name} USING meters TAGS ('x', 1)")
        got = answer(stream)
        kind, offset, end = span(got)
        assert (got.ticket, kind, offset) == (slot + 1, "meta", ends[slot + 1])
        assert f'"{name}"' in got.message.meta.event_json
        ends[got.ticket] = end
        grant(stream, got.ticket)

    for _ in range(MAX_EQUALIZING):  # the vgroup behind catches up with DDL events
        if ends[1] == ends[2]:
            break
        create(0 if ends[1] < ends[2] else 1)
    assert ends[1] == ends[2]
    create(0)
    create(1)  # at the same version as the event just sent on ticket 1
    assert ends[1] == ends[2]
    assert stream.close() == []


# Tables created at most to bring two vgroups' WALs to the same version.
MAX_EQUALIZING = 50


def _names() -> Iterator[str]:
    return (f"ddl{k}" for k in range(10_000))


def _slot(name: str) -> int:
    """The hash slot of table `name` of database power (VGROUPS 2): server/core/routing."""
    return table_hash("power", name) * 2 // HASH_SPACE
