"""A Write call's frames: the target they name and the Arrow table they carry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pyarrow as pa

from sqltopic.errors import InvalidValueError
from sqltopic.proto.arrow_ipc import from_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb


@dataclass(frozen=True)
class Received:
    """What a Write call sent: the target, its database override and the Arrow chunks."""

    target: str
    database: str | None
    parts: list[bytes]

    def table(self) -> pa.Table:
        """The Arrow table the chunks hold."""
        try:
            return from_ipc(self.parts)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidValueError(
                f"Write: the payload is not an Arrow IPC stream: {exc}"
            ) from None


async def receive(frames: AsyncIterator[pb.WriteRequest]) -> Received:
    """The target, database override and Arrow chunks of a Write call's frames."""
    target = ""
    database: str | None = None
    parts: list[bytes] = []
    first = True
    async for frame in frames:
        if first:
            target = frame.target
            database = frame.database if frame.HasField("database") else None
            first = False
        if frame.arrow_ipc:
            parts.append(frame.arrow_ipc)
    if not target:
        raise InvalidValueError("Write: the first frame must name the target table")
    return Received(target, database, parts)
