"""`Sql.Writes`: a producer's writes over one open stream, applied in the order sent and
answered under their tickets.

The stream is read ahead of the writes being applied (`Ahead`, bounded in writes and
bytes, so that gRPC's flow control holds back a producer that sends faster than the
server writes). The writes that were waiting together when the previous ones were done
are applied together: each is checked on its own (its framing, size and names here,
its values on decoding), and a run of consecutive ones to one target goes to the engine
as one group (`Engine.write_group`: one routing and one WAL append per vgroup for all of
them when every one passes, else one by one). This module owns the reading ahead and
the runs; applying a run is the service's.

Once a write of a stream is refused as VgroupUnavailable (its vgroup is not hosted here:
the client's routes are stale; or this dnode is catching up), every later write of the
stream is refused the same way, unwritten (`writes.Refused`): a client keeping writes under
way sends them all again, in order, on a new stream, so that no later write lands
before the refused one on a vgroup.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from sqltopic.errors import Error
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import call_status
from sqltopic.server.rpc.ingest import Received

# Writes a stream is read ahead of the one being applied, at most: those waiting go
# together as one group (group commit); past this the stream's flow control holds the
# producer back.
MAX_WRITES_AHEAD = 16
# Bytes of the requests read ahead, at most, every field counted (one larger request is
# read alone).
MAX_AHEAD_BYTES = 16 << 20

# Turns of the event loop a read of a request that arrived already takes, at most.
GATHER_TURNS = 2
# checked writes of a run, with their places among the writes taken together
Run = list[tuple[int, Received]]


class Ahead:
    """A Writes stream's requests, read ahead: `take` hands out every one waiting, until
    the client half-closes (then []), the stream fails (its error raises, after the
    requests before it) or the server stops (then [] at once: the writes not yet taken
    are not applied, and the client sees the stream end before their answers)."""

    def __init__(self, requests: AsyncIterator[pb.WritesRequest], stopping: asyncio.Event) -> None:
        self._waiting: deque[pb.WritesRequest] = deque()
        self._bytes = 0
        self._ended = False
        self._stopped = False
        self._error: BaseException | None = None
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._tasks = (
            asyncio.create_task(self._read(requests)),
            asyncio.create_task(self._stop(stopping)),
        )

    async def take(self) -> list[pb.WritesRequest]:
        while not self._waiting or self._stopped:
            if self._stopped or self._ended:
                if self._error is not None and not self._stopped:
                    raise self._error
                return []
            self._arrived.clear()
            await self._arrived.wait()
        await self._gather()
        taken = list(self._waiting)
        self._waiting.clear()
        self._bytes = 0
        self._room.set()
        return taken

    async def _gather(self) -> None:
        """Let the reader take in the requests that arrived already (each read is a few
        turns of the event loop), so that the writes sent together go together."""
        while len(self._waiting) < MAX_WRITES_AHEAD and not self._ended:
            seen = len(self._waiting)
            for _ in range(GATHER_TURNS):
                await asyncio.sleep(0)
            if len(self._waiting) == seen:
                return

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _read(self, requests: AsyncIterator[pb.WritesRequest]) -> None:
        try:
            async for request in requests:
                self._waiting.append(request)
                self._bytes += request.ByteSize()  # every field: a name may be large too
                self._arrived.set()
                if len(self._waiting) >= MAX_WRITES_AHEAD or self._bytes >= MAX_AHEAD_BYTES:
                    self._room.clear()
                    await self._room.wait()
        except Exception as exc:  # the stream ends with its status
            self._error = exc
        self._ended = True
        self._arrived.set()

    async def _stop(self, stopping: asyncio.Event) -> None:
        await stopping.wait()
        self._stopped = True
        self._arrived.set()


def runs(checked: Run) -> list[Run]:
    """Consecutive writes to one target (and database) as one run each, in order: a run
    is appended as one group."""
    out: list[Run] = []
    for place, sent in checked:
        last = out[-1][-1][1] if out else None
        if last is not None and (last.target, last.database) == (sent.target, sent.database):
            out[-1].append((place, sent))
        else:
            out.append([(place, sent)])
    return out


def answer(ticket: int, result: int | Error) -> pb.WritesResponse:
    """A write's answer: its rows, or the error its Write call would have failed with."""
    if isinstance(result, Error):
        return pb.WritesResponse(ticket=ticket, error=call_status(result))
    return pb.WritesResponse(ticket=ticket, written=pb.WriteResponse(rows=result))
