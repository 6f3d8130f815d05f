"""The Poll and Fetch wire: a PollRequest's limits and wait, a message as PollResponse
frames (each under the frame limit)."""

from __future__ import annotations

from typing import Any

from grpc import aio

from sqltopic.errors import ConfigError
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, chunks, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.wire import data_frame
from sqltopic.server.common.meta_json import event_json
from sqltopic.server.dnode.poll import DEFAULT_MAX_BYTES, DEFAULT_MIN_ROWS, Message, PollLimits

# A poll's wait is cut this much short of the call's deadline, so that the answer (an
# empty message) still arrives before the client gives up on the call.
DEADLINE_MARGIN_S = 0.05
# Longest wait a poll may ask for (an hour): a bound on forgotten calls.
MAX_WAIT_MS = 3_600_000
# Bytes a BlockPart adds to its frame besides its chunk and table name (field tags,
# lengths, the block index), rounded up: keeps a frame of many small parts under 4 MiB.
PART_OVERHEAD = 32


def limits_of(request: pb.PollRequest) -> PollLimits:
    for name in ("max_rows", "max_bytes", "min_rows", "max_wait_ms"):
        if getattr(request, name) < 0:
            raise ConfigError(f"{name}: {getattr(request, name)} is negative")
    return PollLimits(
        min_rows=request.min_rows or DEFAULT_MIN_ROWS,
        max_rows=request.max_rows,
        max_bytes=request.max_bytes or DEFAULT_MAX_BYTES,
    )


def wait_s(request: pb.PollRequest, context: aio.ServicerContext[Any, Any] | None) -> float:
    """How long the poll may wait for writes: max_wait_ms, within the call's deadline
    (a poll on a Consume stream has none of its own)."""
    wait = min(request.max_wait_ms, MAX_WAIT_MS) / 1000
    remaining = None if context is None else context.time_remaining()
    if remaining is not None:
        wait = min(wait, remaining - DEADLINE_MARGIN_S)
    return max(wait, 0.0)


def with_names(request: pb.PollRequest) -> bool:
    return request.with_table_name if request.HasField("with_table_name") else True


def first_frame(message: Message, with_names: bool) -> tuple[int, bytes]:
    """How many frames `frames_of` makes of `message`, and the first one serialized: a
    data message that fits one frame (what a follower sends) put together from bytes,
    without building its protobuf objects and copying each block twice more."""
    if message.kind == "data":
        parts: list[tuple[str | None, bytes]] = []
        budget = MAX_CHUNK_BYTES
        for block in message.blocks:
            stream = to_ipc(block.data)
            name = block.table_name if with_names else None
            cost = len(stream) + len(name or "") + PART_OVERHEAD
            if cost > budget:
                break  # more than one frame
            budget -= cost
            parts.append((name, stream))
        else:
            return 1, data_frame(message.offset, message.end_offset, message.rows, parts)
    frames = frames_of(message, with_names)
    return len(frames), frames[0].SerializeToString()


def frames_of(message: Message, with_names: bool) -> list[pb.PollResponse]:
    """The message as frames, each under the frame limit."""
    offsets = {"offset": message.offset, "end_offset": message.end_offset}
    if message.kind == "empty":
        return [pb.PollResponse(empty=pb.EmptyMessage(**offsets))]
    if message.kind == "data_lost":
        return [pb.PollResponse(data_lost=pb.DataLostMessage(**offsets))]
    if message.kind == "meta":
        assert message.meta is not None
        event = event_json(message.meta.event)
        meta = pb.MetaMessage(**offsets, version=message.meta.version, event_json=event)
        return [pb.PollResponse(meta=meta)]
    data = pb.DataMessage(
        offset=message.offset, end_offset=message.end_offset,
        block_count=len(message.blocks), row_count=message.rows,
    )  # fmt: skip
    frames = [pb.PollResponse(data=data)]
    budget = MAX_CHUNK_BYTES
    for index, block in enumerate(message.blocks):
        for n, chunk in enumerate(chunks(to_ipc(block.data), MAX_CHUNK_BYTES)):
            part = pb.BlockPart(block=index, arrow_ipc=chunk)
            if n == 0 and with_names and block.table_name is not None:
                part.table_name = block.table_name
            cost = len(chunk) + len(part.table_name) + PART_OVERHEAD
            if cost > budget:
                frames.append(pb.PollResponse())
                budget = MAX_CHUNK_BYTES
            frames[-1].blocks.append(part)
            budget -= cost
    return frames
