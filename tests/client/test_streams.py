"""The consumer's Consume streams (client/streams.py): answers by ticket, a broken
stream failing every open poll, a server without the method; and against a real server,
one stream per endpoint carrying every vgroup's polls."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from sqltopic import aio
from sqltopic.client import Connection, streams
from sqltopic.client.consumer import Consumer
from sqltopic.errors import Error, NoPermission, ServerUnavailable
from sqltopic.proto.consume import MAX_MORE_REQUESTS
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import call_status
from tests.client.support import DEADLINE_S, SELECT, config, drain, drain_async, later_rows, rows_of
from tests.live_server import ServerProcess

# How long the test's handling of a Fetch's end takes: long enough that a close() that
# did not wait for it would return first.
HANDLING_S = 0.5


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class Call:
    """A Consume call of our own making: answers what the test puts in, then fails
    with `end` (or ends)."""

    def __init__(self, requests: Iterator[pb.ConsumeRequest]) -> None:
        self.requests = requests
        self.answers: queue.Queue[pb.ConsumeResponse | grpc.RpcError | None] = queue.Queue()
        self.cancelled = False

    def __iter__(self) -> Iterator[pb.ConsumeResponse]:
        while (item := self.answers.get(timeout=DEADLINE_S)) is not None:
            if isinstance(item, grpc.RpcError):
                raise item
            yield item

    def cancel(self) -> None:
        self.cancelled = True
        self.answers.put(Failed(grpc.StatusCode.CANCELLED))

    def add_done_callback(self, callback: Any) -> None:
        """Done callbacks are not what these tests look at: the call counts as done."""
        callback(self)


def translate(exc: grpc.RpcError) -> Error:
    return ServerUnavailable(f"failed: {exc.code()}")


def open_stream() -> tuple[streams.ConsumeStream, list[Call]]:
    calls: list[Call] = []

    def start(requests: Iterator[pb.ConsumeRequest], metadata: object) -> Call:
        calls.append(Call(requests))
        return calls[-1]

    return streams.ConsumeStream(start, (), translate), calls


class Answers:
    def __init__(self) -> None:
        self.got: dict[int, Any] = {}
        self.done = threading.Event()
        self.wanted = 0

    def to(self, ticket: int) -> Any:
        def done(answer: Any) -> None:
            self.got[ticket] = answer
            if len(self.got) >= self.wanted:
                self.done.set()

        return done


def test_answers_go_to_their_tickets_and_a_broken_stream_fails_the_rest() -> None:
    stream, (call,) = open_stream()
    answers = Answers()
    answers.wanted = 3
    for ticket in (1, 2, 3):
        stream.fetch(ticket, pb.PollRequest(vgroup=ticket), answers.to(ticket))
    sent = [next(call.requests) for _ in range(3)]
    assert [(r.ticket, r.poll.vgroup) for r in sent] == [(1, 1), (2, 2), (3, 3)]
    call.answers.put(pb.ConsumeResponse(ticket=2, message=pb.PollResponse(epoch=7)))
    refused = call_status(NoPermission("not yours"))
    call.answers.put(pb.ConsumeResponse(ticket=1, error=refused))
    call.answers.put(Failed(grpc.StatusCode.UNAVAILABLE))
    assert answers.done.wait(DEADLINE_S)
    assert answers.got[2] == pb.PollResponse(epoch=7)
    assert isinstance(answers.got[1], NoPermission)
    assert isinstance(answers.got[3], ServerUnavailable)  # open when the stream broke
    assert stream.broken
    late: list[Any] = []
    stream.fetch(4, pb.PollRequest(), late.append)  # a broken stream takes no more
    assert isinstance(late[0], ServerUnavailable)


def test_a_cancelled_ticket_is_withdrawn_and_never_answered() -> None:
    stream, (call,) = open_stream()
    answers = Answers()
    answers.wanted = 1
    stream.fetch(1, pb.PollRequest(), answers.to(1))
    stream.fetch(2, pb.PollRequest(), answers.to(2))
    stream.cancel(1)
    sent = [next(call.requests) for _ in range(3)]
    assert [(r.ticket, r.WhichOneof("action")) for r in sent] == [
        (1, "poll"), (2, "poll"), (1, "cancel"),
    ]  # fmt: skip
    call.answers.put(pb.ConsumeResponse(ticket=1, message=pb.PollResponse(epoch=1)))
    call.answers.put(pb.ConsumeResponse(ticket=2, message=pb.PollResponse(epoch=2)))
    assert answers.done.wait(DEADLINE_S)
    assert answers.got == {2: pb.PollResponse(epoch=2)}


def test_a_server_without_consume_is_reported_as_unstreamed() -> None:
    stream, (call,) = open_stream()
    answers = Answers()
    answers.wanted = 1
    stream.fetch(1, pb.PollRequest(), answers.to(1))
    call.answers.put(Failed(grpc.StatusCode.UNIMPLEMENTED))
    assert answers.done.wait(DEADLINE_S)
    assert isinstance(answers.got[1], streams.Unstreamed)
    assert stream.unimplemented


def test_a_follows_answers_reach_it_until_its_last_and_a_broken_stream_ends_it() -> None:
    stream, (call,) = open_stream()
    got: list[tuple[Any, bool]] = []
    ended = threading.Event()

    def answered(answer: Any, still_open: bool) -> None:
        got.append((answer, still_open))
        if not still_open:
            ended.set()

    stream.follow(5, pb.PollRequest(vgroup=2), 4, answered)
    sent = next(call.requests)
    assert (sent.ticket, sent.follow, sent.poll.vgroup) == (5, 4, 2)
    known_before = stream.follows
    for epoch in (1, 2):
        call.answers.put(
            pb.ConsumeResponse(ticket=5, message=pb.PollResponse(epoch=epoch), open=True)
        )
    stream.grant([5, 5])
    assert next(call.requests).grants == [5, 5]
    call.answers.put(pb.ConsumeResponse(ticket=5, message=pb.PollResponse(epoch=3)))  # last
    assert ended.wait(DEADLINE_S)
    assert [(a.epoch, o) for a, o in got] == [(1, True), (2, True), (3, False)]
    # the server knows follows (and commits on the stream) once it answered one
    assert (known_before, stream.follows) == (False, True)
    # a follow open when the stream breaks gets the error as its last answer
    ended.clear()
    stream.follow(6, pb.PollRequest(), 4, answered)
    call.answers.put(Failed(grpc.StatusCode.UNAVAILABLE))
    assert ended.wait(DEADLINE_S)
    assert isinstance(got[-1][0], ServerUnavailable)
    assert got[-1][1] is False


def test_a_commit_on_the_stream_returns_once_stored_or_raises_the_calls_error() -> None:
    stream, (call,) = open_stream()
    results: queue.Queue[Exception | None] = queue.Queue()

    def commit(ticket: int) -> None:
        try:
            stream.commit(ticket, pb.CommitRequest(group_id="g"), DEADLINE_S)
            results.put(None)
        except Exception as exc:
            results.put(exc)

    threading.Thread(target=commit, args=(streams.COMMIT_TICKETS,), daemon=True).start()
    sent = next(call.requests)
    assert (sent.ticket, sent.commit.group_id) == (streams.COMMIT_TICKETS, "g")
    call.answers.put(pb.ConsumeResponse(ticket=sent.ticket, committed=pb.CommitResponse()))
    assert results.get(timeout=DEADLINE_S) is None
    threading.Thread(target=commit, args=(streams.COMMIT_TICKETS + 1,), daemon=True).start()
    sent = next(call.requests)
    refused = call_status(NoPermission("not yours"))
    call.answers.put(pb.ConsumeResponse(ticket=sent.ticket, error=refused))
    assert isinstance(results.get(timeout=DEADLINE_S), NoPermission)
    threading.Thread(target=commit, args=(streams.COMMIT_TICKETS + 2,), daemon=True).start()
    next(call.requests)
    call.answers.put(Failed(grpc.StatusCode.UNAVAILABLE))  # broken: the commit fails
    assert isinstance(results.get(timeout=DEADLINE_S), ServerUnavailable)


def test_grants_queued_together_go_as_one_request_in_order_with_the_rest() -> None:
    queued: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()
    poll = pb.ConsumeRequest(ticket=9, poll=pb.PollRequest(vgroup=1))
    for item in (pb.ConsumeRequest(grants=[2]), pb.ConsumeRequest(grants=[3, 3]), poll,
                 pb.ConsumeRequest(grants=[4]), None, pb.ConsumeRequest(grants=[5])):  # fmt: skip
        queued.put_nowait(item)
    out = streams._merged_grants(pb.ConsumeRequest(grants=[1]), queued, more=False)
    assert out == [
        pb.ConsumeRequest(grants=[1, 2, 3, 3]),
        poll,
        pb.ConsumeRequest(grants=[4]),
        None,
    ]
    assert queued.qsize() == 1  # what comes after the end stays unread


def test_requests_queued_together_ride_in_more_once_the_server_takes_it() -> None:
    queued: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()
    commit = pb.ConsumeRequest(ticket=7, commit=pb.CommitRequest(group_id="g"), token="t2")
    poll = pb.ConsumeRequest(ticket=9, poll=pb.PollRequest(vgroup=1))
    for item in (pb.ConsumeRequest(grants=[2]), commit, poll, pb.ConsumeRequest(grants=[4]),
                 pb.ConsumeRequest(grants=[5]), None, pb.ConsumeRequest(grants=[6])):  # fmt: skip
        queued.put_nowait(item)
    out = streams._merged_grants(pb.ConsumeRequest(grants=[1]), queued, more=True)
    carrier = pb.ConsumeRequest(grants=[1, 2])
    carrier.more.extend([commit, poll, pb.ConsumeRequest(grants=[4, 5])])
    assert out == [carrier, None]
    assert queued.qsize() == 1


def test_a_message_carries_at_most_the_bound_of_more() -> None:
    queued: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()
    total = 2 * (MAX_MORE_REQUESTS + 1) + 3
    polls = [pb.ConsumeRequest(ticket=t, poll=pb.PollRequest(vgroup=1)) for t in range(total)]
    for item in polls[1:]:
        queued.put_nowait(item)
    out = streams._merged_grants(polls[0], queued, more=True)
    assert [len(r.more) for r in out if r is not None] == [MAX_MORE_REQUESTS] * 2 + [2]
    sent = [t for r in out if r is not None for t in (r.ticket, *(m.ticket for m in r.more))]
    assert sent == list(range(total))  # every request once, in the order queued


# --- against a real server -------------------------------------------------------------


def test_a_consumer_polls_every_vgroup_on_one_stream(
    power: Connection, server: ServerProcess
) -> None:
    with Consumer(config(server.address, "g1")) as consumer:
        consumer.subscribe(["overvoltage"])
        delivered = drain(consumer)
        assert len(consumer.assignment()) > 1
        assert list(consumer._streams) == [server.address]  # one stream, every vgroup
        assert consumer._streaming
        opened = list(consumer._streams.values())
        assert all(stream.reading() for stream in opened)
    assert rows_of(delivered) == Counter(power.execute(SELECT).rows)
    # closed: no reader is left inside gRPC to be stopped at exit (client/readers.py)
    assert not any(stream.reading() for stream in opened)


def test_a_consumer_on_unary_fetches_returns_from_close_once_their_ends_are_handled(
    power: Connection, server: ServerProcess
) -> None:
    """Against a server without Consume, polls are unary Fetches; close() cancels those
    in flight and returns once gRPC's channel thread has handled their ends (their done
    callbacks ran), so that no thread of gRPC holds a call's lock at exit."""
    consumer = Consumer(config(server.address, "g-unary"))
    consumer._streaming = False  # what an UNIMPLEMENTED Consume makes of it
    consumer.subscribe(["overvoltage"])
    delivered = drain(consumer)
    assert rows_of(delivered) == Counter(power.execute(SELECT).rows)
    assert not consumer._streams  # no stream was opened
    consumer.poll(0.1)  # held polls in flight again
    in_flight = [call for call in consumer._calls.values() if call is not None]
    assert in_flight
    ended: list[object] = []
    fetched = consumer._fetched

    def noting(stub: Any, fetch: Any, call: Any) -> None:
        fetched(stub, fetch, call)
        time.sleep(HANDLING_S)  # a slow end: close() must still wait for it
        ended.append(call)

    consumer._fetched = noting  # type: ignore[method-assign]
    consumer.close()
    assert all(any(call is e for e in ended) for call in in_flight)


def test_an_asyncio_consumer_polls_every_vgroup_on_one_stream(
    power: Connection, server: ServerProcess
) -> None:
    async def run() -> None:
        async with aio.Consumer(config(server.address, "g2")) as consumer:
            await consumer.subscribe(["overvoltage"])
            delivered = await drain_async(consumer)
            assert len(await consumer.assignment()) > 1
            assert list(consumer._streams) == [server.address]
            assert rows_of(delivered) == Counter(power.execute(SELECT).rows)

    asyncio.run(run())


def test_both_consumers_follow_and_commit_on_their_stream(
    power: Connection, server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the server answered a follow as one, commits go on the stream: the
    committed offsets are what a Commit call stores."""
    commits: list[int] = []
    sync_commit, aio_commit = streams.ConsumeStream.commit, streams.AioConsumeStream.commit

    def counted(self: streams.ConsumeStream, ticket: int, request: Any, timeout: float) -> None:
        commits.append(ticket)
        sync_commit(self, ticket, request, timeout)

    async def counted_aio(
        self: streams.AioConsumeStream, ticket: int, request: Any, timeout: float, token: str = ""
    ) -> None:
        commits.append(ticket)
        await aio_commit(self, ticket, request, timeout, token)

    monkeypatch.setattr(streams.ConsumeStream, "commit", counted)
    monkeypatch.setattr(streams.AioConsumeStream, "commit", counted_aio)
    with Consumer(config(server.address, "g1")) as consumer:
        consumer.subscribe(["overvoltage"])
        delivered = drain(consumer)
        assert consumer._streams[server.address].follows
        consumer.commit()
        positions = {
            (p.topic, p.vgroup): p.offset for p in consumer.position(consumer.assignment())
        }
        stored = consumer.committed(consumer.assignment())
        assert {(p.topic, p.vgroup): p.offset for p in stored} == positions
    assert rows_of(delivered) == Counter(power.execute(SELECT).rows)
    assert len(commits) >= 1

    async def run() -> None:
        async with aio.Consumer(config(server.address, "g2")) as consumer:
            await consumer.subscribe(["overvoltage"])
            await drain_async(consumer)
            assert consumer._streams[server.address].follows
            await consumer.commit()
            parts = await consumer.assignment()
            positions = {(p.topic, p.vgroup): p.offset for p in consumer.position(parts)}
            stored = await consumer.committed(parts)
            assert {(p.topic, p.vgroup): p.offset for p in stored} == positions

    before = len(commits)
    asyncio.run(run())
    assert len(commits) > before


def test_asyncio_consumers_of_one_user_share_one_stream_and_each_gets_its_rows(
    power: Connection, server: ServerProcess
) -> None:
    """A process's consumers of one server and user share one Consume stream (each
    request under its own session): each still gets exactly its rows, one closing
    leaves the others reading, and the last one closes the stream."""
    power.execute(later_rows(10_000, 3))  # more rows than the example's, for everyone
    expected = Counter(power.execute(SELECT).rows)

    async def run() -> None:
        first = aio.Consumer(config(server.address, "s1"))
        second = aio.Consumer(config(server.address, "s2"))
        third = aio.Consumer(config(server.address, "s3", **{"enable.auto.commit": "true"}))
        consumers = [first, second, third]
        for consumer in consumers:
            await consumer.subscribe(["overvoltage"])
        for consumer in consumers:
            assert rows_of(await drain_async(consumer)) == expected
        streams_used = {id(c._streams[server.address]) for c in consumers}
        assert len(streams_used) == 1  # one stream for the three of them
        shared = first._streams[server.address]
        assert shared.shared
        await first.close()
        assert not shared.broken  # the others still use it
        power.execute(later_rows(20_000, 2, voltage=240))
        for consumer in (second, third):
            got = await drain_async(consumer)
            assert sum(m.row_count for m in got) == 2
        await third.commit()  # on the shared stream, as third's own session
        parts = await third.assignment()
        stored = {(p.topic, p.vgroup): p.offset for p in await third.committed(parts)}
        assert stored == {(p.topic, p.vgroup): p.offset for p in third.position(parts)}
        await second.close()
        await third.close()
        assert shared.broken  # the last one closed it

    asyncio.run(run())


def test_a_message_carries_at_most_max_grants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "MAX_GRANTS", 5)
    assert streams.grant_requests(list(range(12))) == [
        pb.ConsumeRequest(grants=[0, 1, 2, 3, 4]),
        pb.ConsumeRequest(grants=[5, 6, 7, 8, 9]),
        pb.ConsumeRequest(grants=[10, 11]),
    ]
    poll = pb.ConsumeRequest(ticket=9, poll=pb.PollRequest(vgroup=1))
    queued_grants = ([2, 3], [4, 5], None, [6, 7, 8, 9], [10])
    for more in (False, True):
        queued: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()
        for grants in queued_grants:
            queued.put_nowait(poll if grants is None else pb.ConsumeRequest(grants=grants))
        out = streams._merged_grants(pb.ConsumeRequest(grants=[1]), queued, more=more)
        for message in out:
            assert message is not None
            assert len(message.grants) + sum(len(r.grants) for r in message.more) <= 5
        sent = [r for m in out if m is not None for r in (m, *m.more)]
        assert [t for r in sent for t in r.grants] == list(range(1, 11))  # all, in order
        assert [r.ticket for r in sent if r.WhichOneof("action")] == [9]
