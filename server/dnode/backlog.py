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


async def either(event: asyncio.Event, other: asyncio.Event) -> None:
    """Until `event` or `other` is set."""
    first = asyncio.ensure_future(event.wait())
    second = asyncio.ensure_future(other.wait())
    try:
        await asyncio.wait((first, second), return_when=asyncio.FIRST_COMPLETED)
    finally:
        first.cancel()
        second.cancel()
