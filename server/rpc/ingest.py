"""A Write call's frames, or one write of a Writes stream: the target they name and the
Arrow table they carry, checked as they arrive.

Each frame's Arrow bytes join the call's IPC stream at once: the framing of every
message that became complete is checked there (`ipc_check`), and the call is refused
as soon as its bytes pass the server's `--max-write-bytes`, so the server never holds
more than that for one call. The values are decoded and validated in full
(`arrow_check`) on a worker thread before the write reads any of them; a refused call
writes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pyarrow as pa

from sqltopic.errors import InvalidValueError, TooLarge, excerpt
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core import arrow_check
from sqltopic.server.rpc.ipc_check import IpcFraming

# `db.table`: a database name (64) and a table name (192) with the dot.
MAX_TARGET_CHARS = 64 + 1 + 192
MAX_DATABASE_CHARS = 64


@dataclass(frozen=True)
class Received:
    """What a Write call sent: the target, its database override and the IPC stream."""

    target: str
    database: str | None
    stream: bytearray
    max_bytes: int  # what the rows may take once decoded (--max-write-bytes)

    def table(self) -> pa.Table:
        """The Arrow table the stream holds, fully validated (a worker thread's job)."""
        if not self.stream:
            raise InvalidValueError(
                f"Write to {excerpt(self.target)}: no Arrow bytes; send the rows as an Arrow "
                "IPC stream (its schema, then its record batches); nothing was written"
            )
        return arrow_check.decode(self.stream, self.max_bytes)


async def receive(frames: AsyncIterator[pb.WriteRequest], max_bytes: int) -> Received:
    """The target, database override and Arrow stream of a Write call's frames; TooLarge
    as soon as the Arrow bytes pass `max_bytes`, InvalidValueError at the first frame
    that breaks the IPC framing."""
    target = ""
    database: str | None = None
    framing = IpcFraming()
    received = 0
    first = True
    async for frame in frames:
        if first:
            target, database = _names(frame)
            first = False
        received += len(frame.arrow_ipc)
        if received > max_bytes:
            raise TooLarge(
                f"Write: more than {max_bytes} bytes of Arrow in one call (the server's "
                "--max-write-bytes): send the rows in several writes; nothing was written"
            )
        framing.feed(frame.arrow_ipc)
    if not target:
        raise InvalidValueError("Write: the first frame must name the target table")
    return Received(target, database, framing.finish(), max_bytes)


def one(request: pb.WritesRequest, max_bytes: int) -> Received:
    """The target, database override and Arrow stream of one write of a Writes stream,
    checked as a Write call's frames are (its framing, its size, its names)."""
    if len(request.arrow_ipc) > max_bytes:
        raise TooLarge(
            f"Writes: write {request.ticket} holds {len(request.arrow_ipc)} bytes of Arrow, "
            f"over the server's --max-write-bytes ({max_bytes}): send its rows in several "
            "writes; nothing of it was written"
        )
    if not request.target:
        raise InvalidValueError(f"Writes: write {request.ticket} names no target table")
    target, database = _names(request)
    framing = IpcFraming()
    framing.feed(request.arrow_ipc)
    return Received(target, database, framing.finish(), max_bytes)


def _names(frame: pb.WriteRequest | pb.WritesRequest) -> tuple[str, str | None]:
    database = frame.database if frame.HasField("database") else None
    _check_name("target", frame.target, MAX_TARGET_CHARS)
    if database is not None:
        _check_name("database", database, MAX_DATABASE_CHARS)
    return frame.target, database


def _check_name(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise InvalidValueError(
            f"Write: {field} {excerpt(value)} is {len(value)} characters long; names are at "
            f"most {limit}"
        )
    if any(ord(c) < 0x20 for c in value):
        raise InvalidValueError(f"Write: {field} {excerpt(value)} holds control characters")
