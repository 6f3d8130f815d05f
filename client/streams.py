"""A consumer's `Vnode.Consume` streams: its polls of one vnode endpoint as tickets on
one open stream instead of one unary Fetch each.

A message on an open stream costs the server less than half a unary call, and a held
poll costs it nothing, so a consumer of many vgroups (or parameter bindings) keeps one
stream per endpoint. Each poll is sent under a ticket and its answer arrives tagged with
it: the poll's frame, or the error its Fetch would have raised. A broken stream fails
its open polls (the core polls them again, as after a failed Fetch) and the next poll
opens a new one; against a server without the method (UNIMPLEMENTED) the consumer goes
back to unary Fetches for good.

`ConsumeStream` serves the thread-based consumer (answers by callback on the stream's
reader thread), `AioConsumeStream` the asyncio one (answers as awaited futures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent import futures
from typing import Any, TypeVar

import grpc
from grpc import aio

from sqltopic.client.effects import Metadata
from sqltopic.client.readers import StreamThreads
from sqltopic.errors import Error, ServerUnavailable
from sqltopic.proto.consume import MAX_GRANTS, MAX_MORE_REQUESTS, MORE_HEADER
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status, unimplemented

Answer = pb.PollResponse | Exception
# Messages a follow may send ahead of the application (its credit; granted back in
# halves): a few keep a caught-up follower standing in the server's shared pass through
# a round trip, and each grant message on the stream stands for four messages.
FOLLOW_WINDOW = 8
# Tickets of commits sent on a stream start here, far above those of polls (which the
# consumer core numbers from 1), so that the two never meet on one stream.
COMMIT_TICKETS = 1 << 62
# a follow's answer, and whether its ticket stays open
Followed = Callable[[Answer, bool], None]
# (status code, details) of a failed stream -> the sqltopic error to report
Translate = Callable[[grpc.RpcError], Error]
S = TypeVar("S")


class Unstreamed(Exception):
    """The server has no Vnode.Consume (UNIMPLEMENTED): use unary Fetches."""


def answer_of(response: pb.ConsumeResponse) -> Answer:
    """A ticket's answer: the poll's frame, or the error its Fetch would have raised."""
    if response.WhichOneof("result") == "error":
        return from_call_status(response.error)
    return response.message


def commit_error(response: pb.ConsumeResponse) -> Exception | None:
    """A commit's answer: None once stored, else the error its call would have raised."""
    if response.WhichOneof("result") == "committed":
        return None
    if response.WhichOneof("result") == "error":
        return from_call_status(response.error)
    return ServerUnavailable("a commit on the consume stream was answered with a poll's answer")


def _merged_grants(
    first: pb.ConsumeRequest, queued: asyncio.Queue[pb.ConsumeRequest | None], more: bool
) -> list[pb.ConsumeRequest | None]:
    """`first` and the requests queued behind it, in order, with grants that follow one
    another as one request: a process's consumers grant often, and the server handles
    a message with a fixed cost whatever it carries. With `more` (the server takes
    it), the requests go as few messages, each carrying the next ones in its `more`
    (`MAX_MORE_REQUESTS` at most). A None (the end) comes last, as it was queued."""
    units: list[pb.ConsumeRequest] = [first]
    end = False
    while not queued.empty():
        item = queued.get_nowait()
        if item is None:
            end = True
            break
        last = units[-1]
        if (
            _grants_only(item) and _grants_only(last)
            and len(last.grants) + len(item.grants) <= MAX_GRANTS
        ):  # fmt: skip
            last.grants.extend(item.grants)
        else:
            units.append(item)
    out: list[pb.ConsumeRequest | None] = [*_carried(units)] if more else [*units]
    return [*out, None] if end else out


def _carried(units: list[pb.ConsumeRequest]) -> Iterator[pb.ConsumeRequest]:
    """`units` as messages, each carrying the next ones in its `more`: at most
    MAX_MORE_REQUESTS and MAX_GRANTS in all a message."""
    carrier, rest, grants = units[0], list[pb.ConsumeRequest](), len(units[0].grants)
    for unit in units[1:]:
        if len(rest) == MAX_MORE_REQUESTS or grants + len(unit.grants) > MAX_GRANTS:
            carrier.more.extend(rest)
            yield carrier
            carrier, rest, grants = unit, [], len(unit.grants)
        else:
            rest.append(unit)
            grants += len(unit.grants)
    carrier.more.extend(rest)
    yield carrier


def grant_requests(tickets: list[int]) -> list[pb.ConsumeRequest]:
    """Grants to these follows as requests of MAX_GRANTS at most."""
    return [
        pb.ConsumeRequest(grants=tickets[at : at + MAX_GRANTS])
        for at in range(0, len(tickets), MAX_GRANTS)
    ]


def _grants_only(request: pb.ConsumeRequest) -> bool:
    return request.WhichOneof("action") is None and not request.token


def by_stream(tickets: Iterable[int], on: Mapping[int, tuple[S, int]]) -> dict[S, list[int]]:
    """The consumer's tickets of open follows as the tickets of the streams they are on
    (`on`: ticket -> its stream and the stream's ticket), by stream; ended ones dropped."""
    out: dict[S, list[int]] = {}
    for ticket in tickets:
        found = on.get(ticket)
        if found is not None:
            out.setdefault(found[0], []).append(found[1])
    return out


def commit_timed_out(timeout: float) -> ServerUnavailable:
    return ServerUnavailable(f"no answer to a commit within {timeout:g} s; commit again")


class _Stream:
    """What both kinds of stream share: their state, and the error that fails the polls
    open when the stream ends."""

    def __init__(self, metadata: Metadata, translate: Translate, shared: bool = False) -> None:
        self.metadata = metadata  # the session the stream was opened with
        # carries several consumers' requests, each with its own session's token
        self.shared = shared
        self._translate = translate
        self.broken = False
        self.unimplemented = False
        # the server answered a follow as one: it knows follows and commits on the
        # stream (a server before them would end the stream at a commit)
        self.follows = False

    def serves(self, metadata: Metadata) -> bool:
        """Whether a poll of this session goes on this stream (not broken, and opened
        with the same session: after a new login its polls would fail)."""
        return not self.broken and (self.shared or self.metadata == metadata)

    def takes_commits(self, metadata: Metadata) -> bool:
        """Whether a commit of this session goes on this stream: it serves the session
        and its server answered a follow (a server before follows would end the
        stream at a commit)."""
        return self.follows and self.serves(metadata)

    def _ended(self, exc: BaseException | None) -> Exception:
        """The error for the polls open when the stream ended with `exc` (None: it
        ended without a status)."""
        if isinstance(exc, grpc.RpcError):
            if unimplemented(exc):
                self.unimplemented = True
                return Unstreamed()
            return self._translate(exc)
        if isinstance(exc, asyncio.CancelledError):
            return ServerUnavailable("the consume stream was closed")
        if exc is not None:
            return ServerUnavailable(f"the consume stream failed: {type(exc).__name__}: {exc}")
        return ServerUnavailable("the consume stream ended; poll again")


class ConsumeStream(_Stream):
    """One Consume call of a thread-based consumer. `fetch` sends a poll; its answer
    goes to the poll's callback on the stream's reader thread."""

    def __init__(
        self,
        start: Callable[[Iterator[pb.ConsumeRequest], Metadata], Any],
        metadata: Metadata,
        translate: Translate,
    ) -> None:
        super().__init__(metadata, translate)
        self._requests: queue.Queue[pb.ConsumeRequest | None] = queue.Queue()
        self._lock = threading.Lock()
        self._open: dict[int, Callable[[Answer], None]] = {}
        self._follows: dict[int, Followed] = {}
        self._commits: dict[int, futures.Future[Exception | None]] = {}
        self._threads = StreamThreads()
        self._call = start(self._threads.requests(iter(self._requests.get, None)), metadata)
        self._threads.watch(self._call)
        self._threads.start_reader(self._read, "sqltopic-consume")

    def fetch(self, ticket: int, request: pb.PollRequest, done: Callable[[Answer], None]) -> None:
        with self._lock:
            if self.broken:
                failed = True
            else:
                failed = False
                self._open[ticket] = done
                self._requests.put(pb.ConsumeRequest(ticket=ticket, poll=request))
        if failed:
            done(ServerUnavailable("the consume stream ended; poll again"))

    def follow(self, ticket: int, request: pb.PollRequest, window: int, answered: Followed) -> None:
        """Send `request` as a follow: each answer goes to `answered` on the reader
        thread, the last with False (after which the ticket is free)."""
        with self._lock:
            if not self.broken:
                self._follows[ticket] = answered
                self._requests.put(pb.ConsumeRequest(ticket=ticket, poll=request, follow=window))
                return
        answered(ServerUnavailable("the consume stream ended; poll again"), False)

    def grant(self, tickets: list[int]) -> None:
        """One more message for each of these open follows."""
        with self._lock:
            if not self.broken:
                for request in grant_requests(tickets):
                    self._requests.put(request)

    def commit(self, ticket: int, request: pb.CommitRequest, timeout: float) -> None:
        """Store offsets as a Commit call would (its errors raise), waiting at most
        `timeout` seconds for the answer."""
        future: futures.Future[Exception | None] = futures.Future()
        with self._lock:
            if self.broken:
                raise ServerUnavailable("the consume stream ended; commit again")
            self._commits[ticket] = future
            self._requests.put(pb.ConsumeRequest(ticket=ticket, commit=request))
        try:
            error = future.result(timeout)
        except futures.TimeoutError:
            raise commit_timed_out(timeout) from None
        finally:
            with self._lock:
                self._commits.pop(ticket, None)
        if error is not None:
            raise error

    def cancel(self, ticket: int) -> None:
        with self._lock:
            found = self._open.pop(ticket, None) or self._follows.pop(ticket, None)
            if found is not None and not self.broken:
                self._requests.put(pb.ConsumeRequest(ticket=ticket, cancel=True))

    def close(self) -> None:
        """End the stream: its open polls fail (ServerUnavailable) on the reader thread."""
        self._requests.put(None)
        self._call.cancel()

    def reading(self) -> bool:
        """Whether the reader thread still runs."""
        return self._threads.reading()

    def join(self, deadline: float | None = None) -> None:
        """Wait for a closed stream's threads to end (`readers`), until `deadline`."""
        self._threads.join(deadline)

    def _read(self) -> None:
        ended: BaseException | None = None
        try:
            for response in self._call:
                with self._lock:
                    self.follows = self.follows or response.open
                    done = self._open.pop(response.ticket, None)
                    committed = self._commits.pop(response.ticket, None)
                    answered = None
                    if done is None:
                        answered = self._follows.get(response.ticket)
                        if answered is not None and not response.open:
                            del self._follows[response.ticket]
                if done is not None:
                    done(answer_of(response))
                elif committed is not None:
                    committed.set_result(commit_error(response))
                elif answered is not None:
                    answered(answer_of(response), response.open)
        except Exception as exc:  # every open poll answers, or its vgroup would stall
            ended = exc
        error = self._ended(ended)
        with self._lock:
            self.broken = True
            orphans, self._open = list(self._open.values()), {}
            followed, self._follows = list(self._follows.values()), {}
            commits, self._commits = list(self._commits.values()), {}
        self._requests.put(None)
        for done in orphans:
            done(error)
        for committed in commits:
            committed.set_result(error)
        for answered in followed:
            answered(error, False)


class AioConsumeStream(_Stream):
    """One Consume call of asyncio consumers (one, or a process's: client/stream_pool.py):
    `fetch` awaits its ticket's answer; a cancelled `fetch` withdraws its poll. Each
    request may carry the token of the session it runs as. Answers come batched (the
    first request asks for it): each is handled as its own."""

    def __init__(
        self,
        call: aio.StreamStreamCall[pb.ConsumeRequest, pb.ConsumeResponse],
        metadata: Metadata,
        translate: Translate,
        shared: bool = False,
    ) -> None:
        super().__init__(metadata, translate, shared)
        self._call = call
        self._tickets = itertools.count(1)
        self._asked_batch = False
        self._open: dict[int, asyncio.Future[Answer]] = {}
        self._follows: dict[int, Followed] = {}
        self._commits: dict[int, asyncio.Future[Exception | None]] = {}
        self._writes: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()
        self._more = False  # the server takes requests in `more` (its headers said so)
        self._tasks = [
            asyncio.create_task(self._read()), asyncio.create_task(self._write()),
            asyncio.create_task(self._headers()),
        ]  # fmt: skip

    def ticket(self) -> int:
        """A ticket no request on this stream has (its consumers share the numbers)."""
        return next(self._tickets)

    @property
    def open_tickets(self) -> int:
        return len(self._open) + len(self._follows) + len(self._commits)

    async def fetch(self, ticket: int, request: pb.PollRequest, token: str = "") -> pb.PollResponse:
        if self.broken:
            raise ServerUnavailable("the consume stream ended; poll again")
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._open[ticket] = future
        self._writes.put_nowait(pb.ConsumeRequest(ticket=ticket, poll=request, token=token))
        try:
            answer = await future
        except asyncio.CancelledError:
            if self._open.pop(ticket, None) is not None and not self.broken:
                self._writes.put_nowait(pb.ConsumeRequest(ticket=ticket, cancel=True))
            raise
        if isinstance(answer, Exception):
            raise answer
        return answer

    def follow(
        self, ticket: int, request: pb.PollRequest, window: int, answered: Followed,
        token: str = "",
    ) -> None:  # fmt: skip
        """Send `request` as a follow: each answer goes to `answered`, the last with
        False (after which the ticket is free)."""
        if self.broken:
            answered(ServerUnavailable("the consume stream ended; poll again"), False)
            return
        self._follows[ticket] = answered
        self._writes.put_nowait(
            pb.ConsumeRequest(ticket=ticket, poll=request, follow=window, token=token)
        )

    def grant(self, tickets: list[int]) -> None:
        """One more message for each of these open follows."""
        if not self.broken:
            for request in grant_requests(tickets):
                self._writes.put_nowait(request)

    async def commit(
        self, ticket: int, request: pb.CommitRequest, timeout: float, token: str = ""
    ) -> None:
        """Store offsets as a Commit call would (its errors raise), waiting at most
        `timeout` seconds for the answer."""
        if self.broken:
            raise ServerUnavailable("the consume stream ended; commit again")
        future: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self._commits[ticket] = future
        self._writes.put_nowait(pb.ConsumeRequest(ticket=ticket, commit=request, token=token))
        try:
            error = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise commit_timed_out(timeout) from None
        finally:
            self._commits.pop(ticket, None)
        if error is not None:
            raise error

    def unfollow(self, ticket: int) -> None:
        """End a follow: no more answers reach its callback."""
        if self._follows.pop(ticket, None) is not None and not self.broken:
            self._writes.put_nowait(pb.ConsumeRequest(ticket=ticket, cancel=True))

    def close(self) -> None:
        self.broken = True
        self._call.cancel()
        for task in self._tasks:
            task.cancel()

    async def _headers(self) -> None:
        """Learn from the stream's headers whether the server takes `more` (until then,
        and with an older server, each request goes alone)."""
        with contextlib.suppress(grpc.RpcError, aio.UsageError, asyncio.CancelledError):
            headers = await self._call.initial_metadata()
            self._more = any(key == MORE_HEADER for key, _ in headers or ())

    async def _write(self) -> None:
        try:
            while (first := await self._writes.get()) is not None:
                for request in _merged_grants(first, self._writes, self._more):
                    if request is None:
                        return
                    if not self._asked_batch:
                        request.batch = self._asked_batch = True
                    await self._call.write(request)
        except (grpc.RpcError, aio.UsageError):  # the stream ended: the reader reports it
            return

    async def _read(self) -> None:
        ended: BaseException | None = None
        try:
            async for batch in self._call:
                for response in (batch, *batch.batch):
                    self._answer(response)
        except (Exception, asyncio.CancelledError) as exc:  # every open poll answers
            ended = exc
        self._end(ended)

    def _answer(self, response: pb.ConsumeResponse) -> None:
        """One answer to whoever waits for its ticket."""
        self.follows = self.follows or response.open
        future = self._open.pop(response.ticket, None)
        if future is not None:
            if not future.done():
                future.set_result(answer_of(response))
        elif response.ticket in self._commits:
            committed = self._commits.pop(response.ticket)
            if not committed.done():
                committed.set_result(commit_error(response))
        elif response.ticket in self._follows:
            answered = self._follows[response.ticket]
            if not response.open:
                del self._follows[response.ticket]
            answered(answer_of(response), response.open)

    def _end(self, ended: BaseException | None) -> None:
        """The stream ended (`ended`: how): everything open on it fails."""
        error = self._ended(ended)
        self.broken = True
        self._writes.put_nowait(None)
        orphans, self._open = list(self._open.values()), {}
        followed, self._follows = list(self._follows.values()), {}
        commits, self._commits = list(self._commits.values()), {}
        for future in orphans:
            if not future.done():
                future.set_result(error)
        for answered in followed:
            answered(error, False)
        for committed in commits:
            if not committed.done():
                committed.set_result(error)
