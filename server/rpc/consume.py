"""`Vnode.Consume`: many Fetches multiplexed over one bidirectional stream.

A consumer reading many vgroups of one vnode host keeps one stream open instead of one
unary call per held poll: on this machine a call costs the server ~0.7 ms of CPU and a
message on an open stream well under half that, and a poll held on the stream costs
nothing while it waits. Each `poll` request runs as the Fetch it stands for (the
service's own `fetch`, checked for its caller as a call would be), in a task of its own,
and its answer goes out tagged with its ticket as soon as it is ready. A poll with
`follow` stays open and is answered again after each message, within the credit its
client grants (server/dnode/follow.py). This module owns the tickets, the credits and
the stream's life; what a poll does is the service's.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from sqltopic.errors import Error, InvalidRequest, LimitExceeded
from sqltopic.proto.consume import MAX_GRANTS, MAX_MORE_REQUESTS
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import call_status
from sqltopic.proto.wire import BATCH_ENTRY_OVERHEAD, batched
from sqltopic.server.common.turns import in_turns
from sqltopic.server.dnode.backlog import Item, Outbox
from sqltopic.server.dnode.follow import MAX_FOLLOW_WINDOW, Credit, Put
from sqltopic.server.rpc.rpc import unexpected

# Open tickets per stream: far more vgroups than one consumer reads on one host (a
# consumer of 1,000 parameter bindings over 4 vgroups holds 4,000), and a bound on the
# tasks one stream can make the server keep.
# A stream may carry the consumers of a whole client process (each request with its
# own session's token): 250 consumers of 40 bindings over 4 vgroups hold 40,000. Each
# session's stream slots bound what one user holds (--max-streams-per-session).
MAX_TICKETS = 65_536
# Answers sent as one message at most (a batch): ready together, they cost one write.
MAX_BATCH_ANSWERS = 256
# Bytes of answers in one batch at most, far inside the clients' 256 MiB receive limit
# (a single answer of one frame is at most ~4 MiB).
MAX_BATCH_BYTES = 16 << 20

# an answer on the stream: a ConsumeResponse, or one serialized already
Answer = pb.ConsumeResponse | bytes
# (request, user) -> the Fetch's one frame, or its sqltopic error
Fetch = Callable[[pb.PollRequest, str], Awaitable[pb.PollResponse]]
# (a request's token, "" for the stream's) -> the session's token and user, checked
# again for each poll (AuthenticationFailed)
Caller = Callable[[str], tuple[str, str]]
# (token, user) -> a slot held while the poll is open (LimitExceeded when none is free)
Slot = Callable[[str, str], AbstractContextManager[None]]
# () -> the follow's user, checked again (AuthenticationFailed once its session ended)
User = Callable[[], str]
# (ticket, request, user, credit, put, user again) -> once the follow ended (errors raise)
Follow = Callable[[int, pb.PollRequest, str, Credit, Put, User], Awaitable[None]]
# (request, user) -> once the offsets are stored (its sqltopic error raises)
Commit = Callable[[pb.CommitRequest, str], Awaitable[None]]


@dataclass
class ConsumeStream:
    """One Consume call: read requests, run polls, yield their answers."""

    fetch: Fetch
    caller: Caller
    slot: Slot
    # set when the server stops: the stream takes no more polls and ends once its open
    # ones answered (their held polls answer at once then), so that a graceful stop does
    # not wait out its grace for streams the clients keep open
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # runs follows; without it a follow is answered once, as a poll (open false)
    follow: Follow | None = None
    # stores commits; without it a commit is refused (InvalidRequest, its ticket only)
    commit: Commit | None = None
    # the answers to send, serialized (as they are counted in its backlog), and what
    # ends the stream
    _answers: Outbox = field(default_factory=Outbox)
    _open: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    _credits: dict[int, Credit] = field(default_factory=dict)  # open follows' tickets
    _batching: bool = False  # the client takes answers batched

    async def run(self, requests: AsyncIterator[pb.ConsumeRequest]) -> AsyncIterator[bytes]:
        """The answers, serialized (server/rpc/rpc.py sends bytes as they are), one by
        one or batched."""
        reader = asyncio.create_task(self._read(requests))
        stop = asyncio.create_task(self._stop())
        reading = True
        held: list[Item] = []  # taken, not handled
        try:
            while reading or self._open or not self._answers.empty() or held:
                item = held.pop() if held else await self._answers.get()
                if item is None:  # half-closed, or the server stops: finish the open ones
                    reading = False
                    reader.cancel()
                    for ticket in list(self._credits):  # no grant can come: follows end
                        self._withdraw(ticket)
                elif isinstance(item, BaseException):
                    raise item
                elif self._batching:
                    batch, after = self._batch(item)
                    held += after
                    yield batch
                else:
                    yield item
        finally:
            reader.cancel()
            stop.cancel()
            for task in list(self._open.values()):
                task.cancel()

    @property
    def drained(self) -> bool:
        """Whether every answer queued was sent and the stream waits for more (its
        client took the last batch: benchmarks wait for it)."""
        return self._answers.awaited

    def _batch(self, first: bytes) -> tuple[bytes, list[Item]]:
        """`first` with the answers ready behind it in its batch; what ended the batch
        (the next item, not an answer or over the bounds), to be handled next, if any."""
        rest: list[bytes] = []
        size = len(first)
        while not self._answers.empty() and len(rest) < MAX_BATCH_ANSWERS:
            item = self._answers.get_nowait()
            if not isinstance(item, bytes):
                return batched(first, rest), [item]
            size += len(item) + BATCH_ENTRY_OVERHEAD
            if size > MAX_BATCH_BYTES:
                return batched(first, rest), [item]
            rest.append(item)
        return batched(first, rest), []

    async def _stop(self) -> None:
        await self.stopping.wait()
        self._answers.put(None)

    async def _read(self, requests: AsyncIterator[pb.ConsumeRequest]) -> None:
        try:
            async for request in requests:
                self._check_whole(request)
                # a process's consumers commit in one message: started in turns
                async for one in in_turns((request, *request.more)):
                    if self._answers.backlog.full:  # a client not reading: read no more
                        await self._answers.backlog.room(self.stopping)
                    self._take_one(one)
        except Exception as exc:  # the stream ends with its status
            self._answers.put(exc)
            return
        self._answers.put(None)

    def _put(self, answer: Answer) -> None:
        """Queue an answer to send, serialized and counted in the backlog."""
        self._answers.put(answer if isinstance(answer, bytes) else answer.SerializeToString())

    def _check_whole(self, request: pb.ConsumeRequest) -> None:
        """A message, its first request and those it carries in `more`, checked whole
        before any of it starts (they start in order): a refusal ends the stream with
        nothing of the message done."""
        if len(request.more) > MAX_MORE_REQUESTS:
            raise InvalidRequest(
                f"Consume: a request carries {len(request.more)} requests in `more`; at "
                f"most {MAX_MORE_REQUESTS}: send the rest in further messages"
            )
        grants = len(request.grants) + sum(len(carried.grants) for carried in request.more)
        if grants > MAX_GRANTS:
            raise InvalidRequest(
                f"Consume: a message grants {grants} messages; at most {MAX_GRANTS}: send "
                "the rest in further messages"
            )
        opened: set[int] = set()  # tickets the message opens, and those it cancels
        cancelled: set[int] = set()
        for one in (request, *request.more):
            if one is not request and one.more:
                raise InvalidRequest(
                    f"Consume: the request of ticket {one.ticket} in `more` carries "
                    "`more` of its own; put every request in the first one's `more`"
                )
            ticket, action = one.ticket, one.WhichOneof("action")
            if action is None:
                if not (one.grants or one.batch or one.more):
                    raise InvalidRequest(
                        f"Consume: the request of ticket {ticket} has no action: set "
                        "`poll`, `commit` or `cancel`"
                    )
                continue
            if action == "cancel":
                opened.discard(ticket)
                cancelled.add(ticket)
                continue
            if ticket in opened or (ticket in self._open and ticket not in cancelled):
                raise InvalidRequest(
                    f"Consume: ticket {ticket} is open already: use a new ticket for each "
                    "poll until its answer arrives"
                )
            if one.follow > MAX_FOLLOW_WINDOW:
                raise InvalidRequest(
                    f"Consume: ticket {ticket} asks to follow with a window of {one.follow} "
                    f"messages; at most {MAX_FOLLOW_WINDOW}"
                )
            opened.add(ticket)

    def _take_one(self, request: pb.ConsumeRequest) -> None:
        """Start a request checked by `_check_whole`."""
        ticket, action = request.ticket, request.WhichOneof("action")
        self._batching = self._batching or request.batch
        if request.grants:  # counted in C: a message may grant a hundred thousand
            for granted, n in Counter(request.grants).items():
                credit = self._credits.get(granted)
                if credit is not None:  # else ended meanwhile: the grant crossed its end
                    credit.grant(n)
        if action is None:
            return
        if action == "cancel":
            self._withdraw(ticket)
            return
        if len(self._open) >= MAX_TICKETS:
            err = LimitExceeded(
                f"Consume: {MAX_TICKETS} polls are open on this stream already: wait for "
                "answers, or open another stream"
            )
            self._put(pb.ConsumeResponse(ticket=ticket, error=call_status(err)))
            return
        token = request.token
        work: Callable[[], Awaitable[pb.ConsumeResponse | None]]
        if action == "commit":
            work = functools.partial(self._commit, ticket, request.commit, token)
        elif request.follow and self.follow is not None:
            work = functools.partial(self._follow, ticket, request.poll, request.follow, token)
        else:
            work = functools.partial(self._poll, ticket, request.poll, token)
        self._open[ticket] = asyncio.create_task(self._answer(ticket, work))

    async def _answer(
        self, ticket: int, work: Callable[[], Awaitable[pb.ConsumeResponse | None]]
    ) -> None:
        """Run a ticket's work; its answer, or its error as the answer, goes out (a
        follow sends its own until its last), and the ticket is free again."""
        try:
            answer = await work()
        except asyncio.CancelledError:
            raise
        except Error as err:
            answer = pb.ConsumeResponse(ticket=ticket, error=call_status(err))
        except Exception as exc:
            answer = pb.ConsumeResponse(ticket=ticket, error=call_status(unexpected(exc)))
        finally:
            self._close(ticket)
        if answer is not None:
            self._put(answer)

    async def _poll(self, ticket: int, request: pb.PollRequest, token: str) -> pb.ConsumeResponse:
        session, user = self.caller(token)
        with self.slot(session, user):
            return pb.ConsumeResponse(ticket=ticket, message=await self.fetch(request, user))

    async def _commit(
        self, ticket: int, request: pb.CommitRequest, token: str
    ) -> pb.ConsumeResponse:
        if self.commit is None:
            raise InvalidRequest("Consume: this stream takes no commits; call Commit")
        await self.commit(request, self.caller(token)[1])
        return pb.ConsumeResponse(ticket=ticket, committed=pb.CommitResponse())

    async def _follow(
        self, ticket: int, request: pb.PollRequest, window: int, token: str
    ) -> pb.ConsumeResponse | None:
        credit = self._credits[ticket] = Credit(window, self._answers.backlog)
        session, user = self.caller(token)
        mine = asyncio.current_task()

        def put(answer: Answer) -> None:
            # a pass may deliver between a cancel and the task's end: drop it, as the
            # cancel promised (and a later follow may take the ticket again)
            if self._open.get(ticket) is mine:
                self._put(answer)

        with self.slot(session, user):
            assert self.follow is not None
            await self.follow(ticket, request, user, credit, put, lambda: self.caller(token)[1])
        return None  # it sent its answers itself

    def _withdraw(self, ticket: int) -> None:
        """End an open poll or follow without an answer."""
        task = self._open.pop(ticket, None)
        self._credits.pop(ticket, None)
        if task is not None:
            task.cancel()

    def _close(self, ticket: int) -> None:
        """Forget the ticket of the poll or follow ending in this task (a new one may
        reuse it once its last answer is out)."""
        task = self._open.get(ticket)
        if task is asyncio.current_task():
            del self._open[ticket]
            self._credits.pop(ticket, None)
