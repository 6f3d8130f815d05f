"""The answers one Consume stream holds for its client and has not sent yet, bounded.

A client that stops reading its stream (or reads slower than its polls answer) must not
make the server keep answers without end: gRPC's flow control stops the sending, but
polls and follows would go on answering into the stream's queue. So the queue counts
its answers and their bytes; while it is over either bound the stream reads no more
requests (the client's sends then wait on flow control in turn), follows send nothing
(a follower leaves the shared pass and waits), and a follow polls again only once there
is room. Polls already open when the bound is reached answer into it: at most one
answer each beyond it.
"""

from __future__ import annotations

import asyncio
from collections import deque

# Answers queued for a client at most: far more than a pass delivers to one client
# process at once (a few dozen), so a client that keeps up never waits on it.
MAX_BACKLOG_ANSWERS = 4_096
# Bytes of answers queued for a client at most: four of the largest batches
# (server/rpc/consume.py MAX_BATCH_BYTES).
MAX_BACKLOG_BYTES = 64 << 20


class Backlog:
    """Answers queued on one stream and their bytes, against the bounds. Event loop
    only."""

    def __init__(self) -> None:
        self.answers = 0
        self.bytes = 0
        self._max_answers = MAX_BACKLOG_ANSWERS
        self._max_bytes = MAX_BACKLOG_BYTES
        self._room = asyncio.Event()
        self._room.set()

    @property
    def full(self) -> bool:
        return self.answers >= self._max_answers or self.bytes >= self._max_bytes

    def add(self, size: int) -> None:
        """An answer of `size` bytes queued."""
        self.answers += 1
        self.bytes += size
        if self.full:
            self._room.clear()

    def remove(self, size: int) -> None:
        """An answer of `size` bytes taken from the queue to be sent."""
        self.answers -= 1
        self.bytes -= size
        if not self.full:
            self._room.set()

    async def room(self, stopping: asyncio.Event) -> None:
        """Until the backlog is under its bounds (or `stopping` is set: the server stops)."""
        while self.full and not stopping.is_set():
            await either(self._room, stopping)


# An item of a stream's outbox: a serialized answer, the error that ends the stream, or
# None (no more requests, or the server stops: finish the open polls)
Item = bytes | BaseException | None


class Outbox:
    """The items one stream has to send, in order, its answers counted in its backlog;
    the task sending them waits here. (A deque and one future, not an asyncio.Queue: a
    pass puts an answer per follower, and the queue's bookkeeping cost more than the
    put.) Event loop only."""

    def __init__(self) -> None:
        self.backlog = Backlog()
        self._items: deque[Item] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Item) -> None:
        if isinstance(item, bytes):
            self.backlog.add(len(item))
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    @property
    def awaited(self) -> bool:
        """Whether it is empty and its sender waits for an item."""
        return not self._items and self._waiter is not None

    async def get(self) -> Item:
        """The next item, once there is one."""
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.get_nowait()

    def get_nowait(self) -> Item:
        """The next item (IndexError when there is none): an answer leaves the backlog."""
        item = self._items.popleft()
        if isinstance(item, bytes):
            self.backlog.remove(len(item))
        return item


async def either(event: asyncio.Event, other: asyncio.Event) -> None:
    """Until `event` or `other` is set."""
    first = asyncio.ensure_future(event.wait())
    second = asyncio.ensure_future(other.wait())
    try:
        await asyncio.wait((first, second), return_when=asyncio.FIRST_COMPLETED)
    finally:
        first.cancel()
        second.cancel()
