"""Vnode.Consume: the ticket rules of server/rpc/consume.py (in-process, a fetch of our
own), then the stream against a real server: each poll answered as its own Fetch,
held polls pushed, cancels, and every refusal."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

import grpc
import pyarrow as pa
import pytest

from sqltopic.client import Connection
from sqltopic.errors import (
    ConsumerFenced,
    InvalidRequest,
    LimitExceeded,
    NoPermission,
    OffsetOutOfRange,
)
from sqltopic.proto.consume import MORE_HEADER
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status
from sqltopic.server.common.turns import PER_TURN
from sqltopic.server.dnode.follow import Credit, Put
from sqltopic.server.rpc import consume
from sqltopic.server.rpc.consume import ConsumeStream
from tests.server.support import count_turns
from tests.server.wire import CALL_TIMEOUT_S, Wire, poll_request, rows, status

TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters WHERE voltage > 220"
# A poll held on the stream: longer than any test waits, so an answer is a push.
HOLD_MS = 600_000


# --- the ticket rules, in process ---------------------------------------------------------


class Polls:
    """A fetch whose polls answer when the test releases them (by vgroup)."""

    def __init__(self) -> None:
        self.gates: dict[int, asyncio.Event] = {}
        self.users: list[str] = []

    async def fetch(self, request: pb.PollRequest, user: str) -> pb.PollResponse:
        self.users.append(user)
        if request.vgroup < 0:
            raise NoPermission(f"vgroup {request.vgroup}")
        await self.gates.setdefault(request.vgroup, asyncio.Event()).wait()
        return pb.PollResponse(epoch=request.vgroup)


@contextmanager
def free(token: str, user: str) -> Iterator[None]:
    yield


def as_user(user: str) -> Callable[[str], tuple[str, str]]:
    """A caller: every poll runs as `user`, under its request's token or the stream's."""
    return lambda token: (token or "stream", user)


def poll(ticket: int, vgroup: int) -> pb.ConsumeRequest:
    return pb.ConsumeRequest(ticket=ticket, poll=pb.PollRequest(vgroup=vgroup))


async def feed(items: list[pb.ConsumeRequest | asyncio.Event]) -> AsyncIterator[pb.ConsumeRequest]:
    """The requests in order; an Event in the list waits until it is set."""
    for item in items:
        if isinstance(item, asyncio.Event):
            await item.wait()
        else:
            yield item


async def responses(
    answers: AsyncIterator[pb.ConsumeResponse | bytes],
) -> AsyncIterator[pb.ConsumeResponse]:
    """The stream's answers as messages (a batch, and a follower's answer from the
    shared pass, come serialized already: sqltopic/proto/wire.py)."""
    async for answer in answers:
        yield pb.ConsumeResponse.FromString(answer) if isinstance(answer, bytes) else answer


def answers(
    stream: ConsumeStream, requests: AsyncIterator[pb.ConsumeRequest]
) -> list[tuple[int, object]]:
    async def run() -> list[tuple[int, object]]:
        got: list[tuple[int, object]] = []
        async for answer in responses(stream.run(requests)):
            kind = answer.WhichOneof("result")
            value = answer.message.epoch if kind == "message" else from_call_status(answer.error)
            got.append((answer.ticket, value))
        return got

    return asyncio.run(run())


def test_answers_come_as_polls_finish_and_cancelled_ones_never() -> None:
    polls = Polls()

    async def run() -> list[tuple[int, object]]:
        later = asyncio.Event()
        stream = ConsumeStream(polls.fetch, as_user("alice"), free)
        requests = feed([
            poll(1, 10), poll(2, 20), poll(3, 30), pb.ConsumeRequest(ticket=3, cancel=True),
            pb.ConsumeRequest(ticket=99, cancel=True),  # unknown: ignored
            later,
        ])  # fmt: skip
        got: list[tuple[int, object]] = []
        async for answer in responses(stream.run(requests)):
            got.append((answer.ticket, answer.message.epoch))
            if len(got) == 1:
                polls.gates[10].set()
                later.set()  # the client half-closes with ticket 1 still open
        return got

    async def release_20_first() -> list[tuple[int, object]]:
        task = asyncio.create_task(run())
        while 20 not in polls.gates:
            await asyncio.sleep(0)
        polls.gates[20].set()
        return await task

    assert asyncio.run(release_20_first()) == [(2, 20), (1, 10)]
    assert set(polls.users) == {"alice"}  # the caller, checked for each poll


def test_a_failed_poll_fails_only_its_ticket() -> None:
    polls = Polls()
    polls.gates[1] = asyncio.Event()
    polls.gates[1].set()
    stream = ConsumeStream(polls.fetch, as_user("alice"), free)
    got = answers(stream, feed([poll(1, -1), poll(2, 1)]))
    assert [t for t, _ in got] == [1, 2]
    assert isinstance(got[0][1], NoPermission)
    assert got[1] == (2, 1)


def test_a_reused_open_ticket_or_an_empty_request_ends_the_stream() -> None:
    polls = Polls()
    stream = ConsumeStream(polls.fetch, as_user("alice"), free)
    with pytest.raises(Exception, match="ticket 1 is open already"):
        answers(stream, feed([poll(1, 5), poll(1, 6)]))
    with pytest.raises(Exception, match="ticket 7 has no action"):
        answers(
            ConsumeStream(polls.fetch, as_user("a"), free),
            feed([pb.ConsumeRequest(ticket=7)]),
        )


def test_polls_beyond_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consume, "MAX_TICKETS", 2)
    polls = Polls()
    for vgroup in (1, 2, 3):
        polls.gates[vgroup] = asyncio.Event()

    async def run() -> list[tuple[int, object]]:
        release = asyncio.Event()
        stream = ConsumeStream(polls.fetch, as_user("a"), free)
        got: list[tuple[int, object]] = []
        async for answer in responses(
            stream.run(feed([poll(1, 1), poll(2, 2), poll(3, 3), release]))
        ):
            err = answer.error if answer.WhichOneof("result") == "error" else None
            got.append((answer.ticket, from_call_status(err) if err else answer.message.epoch))
            for gate in polls.gates.values():
                gate.set()
            release.set()
        return got

    got = asyncio.run(run())
    assert got[0][0] == 3
    assert isinstance(got[0][1], LimitExceeded)
    assert "2 polls are open on this stream" in str(got[0][1])
    assert sorted(got[1:]) == [(1, 1), (2, 2)]


def test_a_stopping_server_ends_the_stream_once_its_open_polls_answered() -> None:
    polls = Polls()

    async def scenario() -> list[tuple[int, int]]:
        stopping = asyncio.Event()
        never = asyncio.Event()  # the client keeps its side open
        stream = ConsumeStream(polls.fetch, as_user("a"), free, stopping)
        got: list[tuple[int, int]] = []

        async def consume() -> None:
            async for answer in responses(stream.run(feed([poll(1, 1), never]))):
                got.append((answer.ticket, answer.message.epoch))

        task = asyncio.create_task(consume())
        while 1 not in polls.gates:
            await asyncio.sleep(0)
        stopping.set()  # the server stops: its held poll answers, then the stream ends
        polls.gates[1].set()
        await asyncio.wait_for(task, CALL_TIMEOUT_S)
        return got

    assert asyncio.run(scenario()) == [(1, 1)]


class Follows:
    """A follow function of our own: answers each grant with one more message (its
    epoch counts them), until cancelled."""

    def __init__(self) -> None:
        self.credits: dict[int, Credit] = {}

    async def run(
        self, ticket: int, request: pb.PollRequest, user: str, credit: Credit, put: Put,
        caller: Callable[[], str],
    ) -> None:  # fmt: skip
        self.credits[ticket] = credit
        sent = 0
        never = asyncio.Event()
        while True:
            await credit.wait(never)
            sent += 1
            credit.spend()
            put(pb.ConsumeResponse(ticket=ticket, message=pb.PollResponse(epoch=sent), open=True))


def follow(ticket: int, window: int) -> pb.ConsumeRequest:
    return pb.ConsumeRequest(ticket=ticket, poll=pb.PollRequest(vgroup=1), follow=window)


def test_a_follow_sends_within_its_credit_and_ends_quietly_when_cancelled() -> None:
    follows = Follows()

    async def run() -> list[tuple[int, int, bool]]:
        more, done = asyncio.Event(), asyncio.Event()
        stream = ConsumeStream(Polls().fetch, as_user("a"), free, follow=follows.run)
        requests = feed([
            follow(1, 2), more, pb.ConsumeRequest(grants=[1, 1, 1, 9]),  # 9: unknown
            done, pb.ConsumeRequest(ticket=1, cancel=True), follow(2, 1),
        ])  # fmt: skip
        got: list[tuple[int, int, bool]] = []
        async for answer in responses(stream.run(requests)):
            got.append((answer.ticket, answer.message.epoch, answer.open))
            if len(got) == 2:  # the window is spent: nothing more until the grants
                more.set()
            if len(got) == 4:  # the credit never exceeds the window: 2 more, not 3
                done.set()
        return got

    # the client half-closed with follow 2 open: it ends without an answer after its
    # first, and cancelled follow 1 is forgotten (no error at the end)
    got = asyncio.run(run())
    assert got == [(1, 1, True), (1, 2, True), (1, 3, True), (1, 4, True), (2, 1, True)]
    assert follows.credits[1].left == 0


def test_a_delivery_between_a_cancel_and_the_follows_end_is_dropped() -> None:
    puts: dict[int, Put] = {}

    async def standing(
        ticket: int, request: pb.PollRequest, user: str, credit: Credit, put: Put,
        caller: Callable[[], str],
    ) -> None:  # fmt: skip
        puts[ticket] = put  # as a follower standing in the shared pass
        await asyncio.Event().wait()

    def message(ticket: int, epoch: int) -> pb.ConsumeResponse:
        return pb.ConsumeResponse(ticket=ticket, message=pb.PollResponse(epoch=epoch), open=True)

    async def requests() -> AsyncIterator[pb.ConsumeRequest]:
        yield follow(1, 4)
        yield follow(2, 4)
        while len(puts) < 2:
            await asyncio.sleep(0)
        puts[1](message(1, 1))
        yield pb.ConsumeRequest(ticket=1, cancel=True)
        # the cancel is taken, the follow's task not ended yet: a pass delivers now
        puts[1](message(1, 2))
        puts[2](message(2, 1))

    async def run() -> list[tuple[int, int]]:
        stream = ConsumeStream(Polls().fetch, as_user("a"), free, follow=standing)
        return [(a.ticket, a.message.epoch) async for a in responses(stream.run(requests()))]

    assert asyncio.run(run()) == [(1, 1), (2, 1)]


def test_without_a_follow_function_a_follow_is_answered_once() -> None:
    polls = Polls()
    polls.gates[1] = asyncio.Event()
    polls.gates[1].set()
    stream = ConsumeStream(polls.fetch, as_user("a"), free)
    got = answers(stream, feed([follow(1, 4)]))
    assert got == [(1, 1)]


def test_a_commit_without_a_commit_function_is_refused_on_its_ticket() -> None:
    polls = Polls()
    polls.gates[1] = asyncio.Event()
    polls.gates[1].set()
    stream = ConsumeStream(polls.fetch, as_user("a"), free)
    commit = pb.ConsumeRequest(ticket=3, commit=pb.CommitRequest(group_id="g"))
    got = answers(stream, feed([commit, poll(4, 1)]))
    assert sorted(t for t, _ in got) == [3, 4]
    refused = dict(got)[3]
    assert isinstance(refused, InvalidRequest)
    assert "takes no commits" in str(refused)


def test_answers_ready_together_go_as_one_batch_to_a_client_that_takes_them() -> None:
    polls = Polls()
    sessions: list[tuple[str, str]] = []

    @contextmanager
    def slot(token: str, user: str) -> Iterator[None]:
        sessions.append((token, user))
        yield

    def caller(token: str) -> tuple[str, str]:
        return (token, "bob") if token else ("stream", "alice")

    async def run() -> list[list[tuple[int, int]]]:
        stream = ConsumeStream(polls.fetch, caller, slot)
        released = asyncio.Event()
        first = pb.ConsumeRequest(ticket=1, poll=pb.PollRequest(vgroup=1), batch=True)
        theirs = pb.ConsumeRequest(ticket=2, poll=pb.PollRequest(vgroup=2), token="tb")
        got: list[list[tuple[int, int]]] = []

        async def release() -> None:
            while len(polls.gates) < 3:
                await asyncio.sleep(0)
            for gate in polls.gates.values():  # all three ready at once
                gate.set()
            released.set()

        task = asyncio.create_task(release())
        async for answer in responses(stream.run(feed([first, theirs, poll(3, 3), released]))):
            got.append([(a.ticket, a.message.epoch) for a in (answer, *answer.batch)])
        await task
        return got

    got = asyncio.run(run())
    assert [sorted(batch) for batch in got] == [[(1, 1), (2, 2), (3, 3)]]  # one message
    # each poll ran as its request's session, or the stream's
    assert sorted(sessions) == [("stream", "alice"), ("stream", "alice"), ("tb", "bob")]
    assert sorted(polls.users) == ["alice", "alice", "bob"]


def test_requests_carried_in_more_are_taken_in_order_each_on_its_own_ticket() -> None:
    polls = Polls()
    for vgroup in (1, 2, 3):
        polls.gates[vgroup] = asyncio.Event()
        polls.gates[vgroup].set()
    committed: list[tuple[str, str]] = []

    async def commit(request: pb.CommitRequest, user: str) -> None:
        committed.append((request.group_id, user))

    def caller(token: str) -> tuple[str, str]:
        return (token, "bob") if token else ("stream", "alice")

    stream = ConsumeStream(polls.fetch, caller, free, commit=commit)
    carrier = poll(1, 1)
    carrier.more.extend([
        pb.ConsumeRequest(ticket=2, commit=pb.CommitRequest(group_id="g1"), token="tb"),
        poll(3, 2), pb.ConsumeRequest(ticket=4, commit=pb.CommitRequest(group_id="g2")),
        poll(5, 3),
    ])  # fmt: skip
    got = answers(stream, feed([carrier]))
    assert sorted(t for t, _ in got) == [1, 2, 3, 4, 5]
    assert {t: v for t, v in got if t in (1, 3, 5)} == {1: 1, 3: 2, 5: 3}
    assert committed == [("g1", "bob"), ("g2", "alice")]  # in order, each as its session
    assert sorted(polls.users) == ["alice", "alice", "alice"]


def test_many_carried_requests_start_over_several_turns_of_the_loop() -> None:
    """A message carrying a process's commits starts PER_TURN of them per turn of the
    event loop (the loop's other work goes on between), each answered on its ticket."""
    count = 3 * PER_TURN + 7
    turn = [0]
    started: list[tuple[str, int]] = []

    async def commit(request: pb.CommitRequest, user: str) -> None:
        started.append((request.group_id, turn[0]))

    async def run() -> list[int]:
        ticker = asyncio.create_task(count_turns(turn))
        stream = ConsumeStream(Polls().fetch, as_user("u"), free, commit=commit)
        carrier = pb.ConsumeRequest(ticket=0, commit=pb.CommitRequest(group_id="g0"))
        carrier.more.extend(
            pb.ConsumeRequest(ticket=n, commit=pb.CommitRequest(group_id=f"g{n}"))
            for n in range(1, count)
        )
        try:
            return [a.ticket async for a in responses(stream.run(feed([carrier])))]
        finally:
            ticker.cancel()

    tickets = asyncio.run(run())
    assert sorted(tickets) == list(range(count))
    assert [group for group, _ in started] == [f"g{n}" for n in range(count)]  # in order
    per_turn = Counter(at for _, at in started)
    assert len(per_turn) >= 4
    assert max(per_turn.values()) <= PER_TURN


def test_a_carried_more_or_too_many_carried_requests_end_the_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    polls = Polls()
    nested = poll(1, 1)
    inner = poll(2, 1)
    inner.more.append(poll(3, 1))
    nested.more.append(inner)
    with pytest.raises(InvalidRequest, match="ticket 2 in `more` carries `more` of its own"):
        answers(ConsumeStream(polls.fetch, as_user("a"), free), feed([nested]))
    monkeypatch.setattr(consume, "MAX_MORE_REQUESTS", 2)
    many = poll(1, 1)
    many.more.extend([poll(2, 1), poll(3, 1), poll(4, 1)])
    with pytest.raises(InvalidRequest, match="carries 3 requests in `more`; at most 2"):
        answers(ConsumeStream(polls.fetch, as_user("a"), free), feed([many]))
    assert polls.users == []  # refused before any of them ran


def _commit(ticket: int, *carried: pb.ConsumeRequest) -> pb.ConsumeRequest:
    request = pb.ConsumeRequest(ticket=ticket, commit=pb.CommitRequest(group_id="g"))
    request.more.extend(carried)
    return request


# a commit carrying a refused request, and the refusal: nothing of the message runs
REFUSED_MESSAGES: dict[str, tuple[Callable[[], pb.ConsumeRequest], str]] = {
    "a window too large": (
        lambda: _commit(1, pb.ConsumeRequest(ticket=2, poll=pb.PollRequest(), follow=65)),
        "ticket 2 asks to follow with a window of 65 messages; at most 64",
    ),
    "a ticket twice": (lambda: _commit(1, poll(2, 1), poll(2, 1)), "ticket 2 is open already"),
    "the commit's ticket again": (lambda: _commit(1, poll(1, 1)), "ticket 1 is open already"),
    "no action": (
        lambda: _commit(1, pb.ConsumeRequest(ticket=3)),
        "the request of ticket 3 has no action",
    ),
    "too many grants": (
        lambda: _commit(1, pb.ConsumeRequest(grants=[7] * 3), pb.ConsumeRequest(grants=[8] * 3)),
        "a message grants 6 messages; at most 5",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED_MESSAGES))
def test_a_message_is_checked_whole_before_any_of_it_runs(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setattr(consume, "MAX_GRANTS", 5)
    make, refusal = REFUSED_MESSAGES[name]
    polls, committed = Polls(), list[str]()

    async def commit(request: pb.CommitRequest, user: str) -> None:
        committed.append(request.group_id)

    stream = ConsumeStream(polls.fetch, as_user("a"), free, commit=commit)
    with pytest.raises(InvalidRequest, match=refusal):
        answers(stream, feed([make()]))
    assert committed == []  # nothing of it ran
    assert polls.users == []


def test_a_ticket_cancelled_earlier_in_a_message_may_be_opened_again() -> None:
    polls = Polls()

    async def run() -> list[tuple[int, int]]:
        stream = ConsumeStream(polls.fetch, as_user("a"), free)
        again = pb.ConsumeRequest(ticket=1, cancel=True)
        again.more.append(poll(1, 20))
        requests = feed([poll(1, 10), again])
        got: list[tuple[int, int]] = []
        first: asyncio.Task[pb.ConsumeResponse] = asyncio.ensure_future(
            anext(responses(stream.run(requests)))
        )
        while 20 not in polls.gates:
            await asyncio.sleep(0)
        polls.gates[20].set()
        answer = await first
        got.append((answer.ticket, answer.message.epoch))
        return got

    assert asyncio.run(run()) == [(1, 20)]  # the second poll's answer, the first withdrawn


# --- against a real server ----------------------------------------------------------------


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    return live_power


def write(conn: Connection, table: str, voltages: list[int], first_ms: int) -> None:
    n = len(voltages)
    conn.write("power.meters", pa.table({
        "tbname": [table] * n, "location": ["x"] * n, "groupid": pa.array([1] * n, pa.int32()),
        "ts": pa.array(range(first_ms, first_ms + n), pa.timestamp("ms")),
        "current": pa.array([1.0] * n, pa.float32()), "voltage": pa.array(voltages, pa.int32()),
        "phase": pa.array([0.5] * n, pa.float32()),
    }))  # fmt: skip


class Stream:
    """A Consume call fed from a queue; its answers collected by a thread."""

    def __init__(self, wire: Wire, metadata: tuple[tuple[str, str], ...] | None = None) -> None:
        self.requests: queue.Queue[pb.ConsumeRequest | None] = queue.Queue()
        self.answers: queue.Queue[pb.ConsumeResponse | grpc.RpcError | None] = queue.Queue()
        self.call = wire.vnode.Consume(iter(self.requests.get, None), metadata=metadata or wire.md)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for answer in self.call:
                self.answers.put(answer)
        except grpc.RpcError as exc:
            self.answers.put(exc)
        self.answers.put(None)

    def send(self, ticket: int, request: pb.PollRequest | None = None) -> None:
        if request is None:
            self.requests.put(pb.ConsumeRequest(ticket=ticket, cancel=True))
        else:
            self.requests.put(pb.ConsumeRequest(ticket=ticket, poll=request))

    def next(self) -> pb.ConsumeResponse | grpc.RpcError | None:
        return self.answers.get(timeout=CALL_TIMEOUT_S)

    def close(self) -> list[pb.ConsumeResponse | grpc.RpcError]:
        """Half-close; every answer still to come."""
        self.requests.put(None)
        rest = []
        while (answer := self.next()) is not None:
            rest.append(answer)
        return rest


def test_each_poll_is_answered_as_its_fetch_and_held_ones_are_pushed(
    hot: Connection, wire: Wire
) -> None:
    write(hot, "d1", [230, 210, 231], 0)
    write(hot, "d2", [240], 0)
    sub = wire.subscribe("g", ["hot"], auto_offset_reset=pb.OFFSET_RESET_EARLIEST)
    asg = wire.assignment(sub.consumer_id)
    vgroups = sorted(a.vgroup for a in asg.assignments)
    stream = Stream(wire)
    requests = {
        v: poll_request(sub.consumer_id, "g", "hot", v, asg.epoch, None,
                        {"auto_offset_reset": pb.OFFSET_RESET_EARLIEST})
        for v in vgroups
    }  # fmt: skip
    for ticket, vgroup in enumerate(vgroups, start=1):
        stream.send(ticket, requests[vgroup])
    got = {}
    for _ in vgroups:
        answer = stream.next()
        assert isinstance(answer, pb.ConsumeResponse)
        got[vgroups[answer.ticket - 1]] = answer.message
    # the same polls as Fetches answer the same messages
    for vgroup, request in requests.items():
        assert wire.vnode.Fetch(request, metadata=wire.md, timeout=CALL_TIMEOUT_S) == got[vgroup]
    assert sorted(int(str(r["voltage"])) for m in got.values() for r in rows([m])) == [
        230,
        231,
        240,
    ]
    # caught up: held polls on every vgroup, then a row arrives for one of them
    for ticket, vgroup in enumerate(vgroups, start=10):
        kind = got[vgroup].WhichOneof("message")
        assert kind is not None
        request = pb.PollRequest()
        request.CopyFrom(requests[vgroup])
        request.position = getattr(got[vgroup], kind).end_offset
        request.max_wait_ms = HOLD_MS
        stream.send(ticket, request)
    write(hot, "d1", [250], 10)
    pushed = stream.next()
    assert isinstance(pushed, pb.ConsumeResponse)
    assert [r["voltage"] for r in rows([pushed.message])] == [250]
    # the others stay held until cancelled: half-closing then ends the stream at once
    for ticket in range(10, 10 + len(vgroups)):
        if ticket != pushed.ticket:
            stream.send(ticket)
    assert stream.close() == []


def test_a_fenced_poll_fails_alone_and_a_bad_request_ends_the_stream(
    hot: Connection, wire: Wire
) -> None:
    sub = wire.subscribe("g", ["hot"], auto_offset_reset=pb.OFFSET_RESET_EARLIEST)
    asg = wire.assignment(sub.consumer_id)
    vgroup = asg.assignments[0].vgroup
    stream = Stream(wire)
    fenced = poll_request(sub.consumer_id, "g", "hot", vgroup, asg.epoch + 5, None, {})
    good = poll_request(sub.consumer_id, "g", "hot", vgroup, asg.epoch, None, {})
    stream.send(1, fenced)
    first = stream.next()
    assert isinstance(first, pb.ConsumeResponse)
    assert first.ticket == 1
    assert isinstance(from_call_status(first.error), ConsumerFenced)
    stream.send(2, good)
    second = stream.next()
    assert isinstance(second, pb.ConsumeResponse)
    assert second.ticket == 2
    assert second.WhichOneof("result") == "message"
    # a request without an action ends the stream with INVALID_ARGUMENT
    stream.requests.put(pb.ConsumeRequest(ticket=3))
    ended = stream.next()
    assert isinstance(ended, grpc.RpcError)
    code, trailers = status(ended)
    assert (code, trailers["sqltopic-error"]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "InvalidRequest",
    )


def test_a_stream_without_a_valid_token_is_refused(hot: Connection, wire: Wire) -> None:
    stream = Stream(wire, metadata=(("authorization", "Bearer nope"),))
    stream.send(1, poll_request(1, "g", "hot", 1, 1, None, {}))
    ended = stream.next()
    assert isinstance(ended, grpc.RpcError)
    assert status(ended)[0] == grpc.StatusCode.UNAUTHENTICATED


def test_the_server_announces_more_and_stores_carried_commits_each_on_its_ticket(
    hot: Connection, wire: Wire
) -> None:
    write(hot, "d1", [230], 0)
    sub = wire.subscribe("g", ["hot"], auto_offset_reset=pb.OFFSET_RESET_EARLIEST)
    asg = wire.assignment(sub.consumer_id)
    vgroups = sorted(a.vgroup for a in asg.assignments)
    stream = Stream(wire)

    def commit(ticket: int, vgroup: int, offset: int) -> pb.ConsumeRequest:
        item = pb.TopicVgroupOffset(topic="hot", vgroup=vgroup, offset=offset)
        request = pb.CommitRequest(
            consumer_id=sub.consumer_id, group_id="g", epoch=asg.epoch, offsets=[item]
        )
        return pb.ConsumeRequest(ticket=ticket, commit=request)

    carrier = commit(1, vgroups[0], 1)
    carrier.more.extend([commit(2, vgroups[1], 1), commit(3, vgroups[0], 10**9)])
    stream.requests.put(carrier)
    got = {}
    for _ in range(3):
        answer = stream.next()
        assert isinstance(answer, pb.ConsumeResponse)
        got[answer.ticket] = answer
    assert dict(stream.call.initial_metadata()).get(MORE_HEADER) == "1"
    assert [got[t].WhichOneof("result") for t in (1, 2)] == ["committed", "committed"]
    assert isinstance(from_call_status(got[3].error), OffsetOutOfRange)  # its ticket only
    assert [wire.committed("g", "hot", v) for v in vgroups[:2]] == [1, 1]
    assert stream.close() == []
