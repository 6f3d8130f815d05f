"""A connection's `Sql.Writes` stream: its writes as messages on one open stream
instead of one `Sql.Write` call each.

A message on an open stream costs both sides a fraction of a call (a Write call cost
this machine's server ~420 µs and the client ~500 µs; a message ~110-150 µs each), and
the next writes may be sent before the answers come: `write_async` keeps up to
MAX_WRITES_IN_FLIGHT under way. The server applies them in the order sent and answers
each under its ticket (its rows, or the error its Write call would have raised). A
broken stream fails the writes it had under way with ServerUnavailable (each may or may
not have been written, as a call cut off would leave it) and the next write opens a new
stream; against a server without the method (UNIMPLEMENTED: nothing was written) the
connection goes back to Write calls for good.

`WriteStream` serves the thread-based Connection (answers on the stream's reader
thread), `AioWriteStream` the asyncio one.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from grpc import aio

from sqltopic.client.readers import StreamThreads
from sqltopic.errors import Error, ServerUnavailable
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status, unimplemented

# Writes a connection keeps under way at most: enough for the server to find the next
# one waiting when it answers one; each holds at most STREAM_WRITE_BYTES of the client's
# memory until answered.
MAX_WRITES_IN_FLIGHT = 16
# A write's Arrow bytes up to which it goes on the stream (one message, as one frame of
# a Write call); larger writes take a Write call, chunked, where a message costs little
# beside the bytes.
STREAM_WRITE_BYTES = MAX_CHUNK_BYTES
# (a failed stream's status) -> the sqltopic error it stands for
Translate = Callable[[grpc.RpcError], Error]


class Unstreamed(Exception):
    """The server has no Sql.Writes (UNIMPLEMENTED): nothing was written; use Write."""


class Retired(Exception):
    """The stream was finished (retired after a refusal) before this write was sent:
    nothing was written; send it on the dnode's next stream."""


# What `AioWriteStream.finish` queues after the last write: the end of the requests.
FINISH = pb.WritesRequest()


def request_of(ticket: int, target: str, database: str | None, ipc: bytes) -> pb.WritesRequest:
    request = pb.WritesRequest(ticket=ticket, target=target, arrow_ipc=ipc)
    if database is not None:
        request.database = database
    return request


def answer_of(response: pb.WritesResponse) -> int | Exception:
    """A write's rows, or the error its Write call would have raised."""
    if response.WhichOneof("result") == "error":
        return from_call_status(response.error)
    return int(response.written.rows)


def write_timed_out(timeout: float) -> ServerUnavailable:
    return ServerUnavailable(
        f"no answer to a write within {timeout:g} s: it may or may not have been written"
    )


class _Stream:
    """What both kinds of stream share: their state, and the error of the writes under
    way when the stream ends."""

    def __init__(self, translate: Translate) -> None:
        self._translate = translate
        self._tickets = itertools.count(1)
        self.broken = False
        self.unimplemented = False
        self.finished = False  # ended by `finish`: a write sent after goes on a new one

    def _ended(self, exc: BaseException | None) -> Exception:
        """The error of the writes under way when the stream ended with `exc` (None:
        ended without a status)."""
        if isinstance(exc, grpc.RpcError):
            if unimplemented(exc):
                self.unimplemented = True
                return Unstreamed()
            return _maybe_written(self._translate(exc))
        if isinstance(exc, asyncio.CancelledError):
            return ServerUnavailable("the write stream was closed before this write was answered")
        reason = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
        return ServerUnavailable(
            f"the write stream ended{reason} before this write was answered: it may or may "
            "not have been written"
        )

    def _closed(self) -> Exception:
        """The error of a write sent after the stream ended: nothing of it was sent."""
        if self.unimplemented:
            return Unstreamed()
        if self.finished:
            return Retired()
        return ServerUnavailable("the write stream ended; nothing was sent")


def _maybe_written(error: Error) -> Error:
    if type(error) is ServerUnavailable:
        return ServerUnavailable(f"{error}; the write may or may not have been written")
    return error


class WriteStream(_Stream):
    """One Writes call of a thread-based Connection: `submit` sends a write and returns
    the future of its rows, set on the stream's reader thread."""

    def __init__(
        self, start: Callable[[Iterator[pb.WritesRequest]], Any], translate: Translate
    ) -> None:
        super().__init__(translate)
        self._requests: queue.Queue[pb.WritesRequest | None] = queue.Queue()
        self._lock = threading.Lock()
        self._open: dict[int, futures.Future[int]] = {}
        self._room = threading.BoundedSemaphore(MAX_WRITES_IN_FLIGHT)
        self._opened = threading.Event()  # the server's headers came, or the call ended
        self._threads = StreamThreads()
        self._call = start(self._threads.requests(self._sent()))
        self._threads.watch(self._call)
        self._threads.start_reader(self._read, "sqltopic-writes")

    def _sent(self) -> Iterator[pb.WritesRequest]:
        """The requests, once the server took the call (its headers): a server without
        the method ends it first, before any write went out."""
        self._opened.wait()
        yield from iter(self._requests.get, None)

    def submit(self, target: str, database: str | None, ipc: bytes) -> futures.Future[int]:
        """Send a write (waiting while MAX_WRITES_IN_FLIGHT are under way)."""
        self._room.acquire()
        future: futures.Future[int] = futures.Future()
        future.add_done_callback(lambda _: self._room.release())
        with self._lock:
            if not self.broken:
                ticket = next(self._tickets)
                self._open[ticket] = future
                self._requests.put(request_of(ticket, target, database, ipc))
                return future
        future.set_exception(self._closed())
        return future

    def reading(self) -> bool:
        """Whether the reader thread still runs."""
        return self._threads.reading()

    def finish(self) -> None:
        """No more writes: the stream ends once the server answered those under way
        (their futures are set as before); a write submitted after fails unsent."""
        with self._lock:
            self.broken = self.finished = True
        self._requests.put(None)

    def close(self) -> None:
        """End the stream: writes under way fail (ServerUnavailable) on the reader thread,
        whose threads have ended when this returns (`readers`)."""
        self._requests.put(None)
        self._call.cancel()
        self._threads.join()

    def _read(self) -> None:
        ended: BaseException | None = None
        try:
            self._call.initial_metadata()
            self._opened.set()
            for response in self._call:
                with self._lock:
                    future = self._open.pop(response.ticket, None)
                if future is not None:
                    _settle(future, answer_of(response))
        except Exception as exc:  # every write under way answers
            ended = exc
        self._opened.set()
        error = self._ended(ended)
        with self._lock:
            self.broken = True
            orphans, self._open = list(self._open.values()), {}
        self._requests.put(None)
        for future in orphans:
            _settle(future, error)


def _settle(future: futures.Future[int] | asyncio.Future[int], answer: int | Exception) -> None:
    if future.done():
        return
    if isinstance(answer, Exception):
        future.set_exception(answer)
    else:
        future.set_result(answer)


class AioWriteStream(_Stream):
    """One Writes call of an asyncio Connection: `write` awaits its write's answer."""

    def __init__(
        self, call: aio.StreamStreamCall[pb.WritesRequest, pb.WritesResponse],
        translate: Translate,
    ) -> None:  # fmt: skip
        super().__init__(translate)
        self._call = call
        self._open: dict[int, asyncio.Future[int]] = {}
        self._room = asyncio.Semaphore(MAX_WRITES_IN_FLIGHT)
        self._writes: asyncio.Queue[pb.WritesRequest | None] = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._write())]

    async def write(self, target: str, database: str | None, ipc: bytes, timeout: float) -> int:
        """The rows of a write sent on the stream (its errors raise; Unstreamed when the
        server has no Writes)."""
        async with self._room:
            if self.broken:
                raise self._closed()
            ticket = next(self._tickets)
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._open[ticket] = future
            self._writes.put_nowait(request_of(ticket, target, database, ipc))
            try:
                return await asyncio.wait_for(future, timeout)
            except TimeoutError:
                raise write_timed_out(timeout) from None
            finally:
                self._open.pop(ticket, None)

    def finish(self) -> None:
        """No more writes: the stream ends once the server answered those under way
        (their awaits get their answers as before); a later write fails unsent."""
        self.broken = self.finished = True
        self._writes.put_nowait(FINISH)

    def close(self) -> None:
        self.broken = True
        self._call.cancel()
        for task in self._tasks:
            task.cancel()

    async def _write(self) -> None:
        try:
            # once the server took the call (its headers): a server without the method
            # ends it first, and a write racing that end fails the call as INTERNAL
            await self._call.initial_metadata()
            while (request := await self._writes.get()) is not None:
                if request is FINISH:
                    await self._call.done_writing()
                    return
                await self._call.write(request)
        except (grpc.RpcError, aio.UsageError):  # the stream ended: the reader reports it
            return

    async def _read(self) -> None:
        ended: BaseException | None = None
        try:
            async for response in self._call:
                future = self._open.pop(response.ticket, None)
                if future is not None:
                    _settle(future, answer_of(response))
        except (Exception, asyncio.CancelledError) as exc:  # every write under way answers
            ended = exc
        error = self._ended(ended)
        self.broken = True
        self._writes.put_nowait(None)
        orphans, self._open = list(self._open.values()), {}
        for future in orphans:
            _settle(future, error)
