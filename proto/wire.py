"""Consume answers framed from bytes already serialized.

Every follower of a subscription gets the same frame in a pass (ten bindings of one
device, a topic's consumers in several groups), and the answers ready together for a
client go out as one message. Built as protobuf objects, each answer copied its frame
in, the batch copied each answer again, and the stream serialized it all once more. So
a frame is serialized once, and an answer and a batch are put together from bytes: the
same bytes a protobuf library would write, in field order, parsed by any client as the
messages of sqltopic.proto. The field numbers are read from the descriptors, so a
change to the .proto cannot leave this behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

_VARINT, _LENGTH = 0, 2  # protobuf wire types


def _tag(message: type[Message], name: str) -> bytes:
    field = message.DESCRIPTOR.fields_by_name[name]
    kind = (
        _LENGTH
        if field.type in (field.TYPE_MESSAGE, field.TYPE_BYTES, field.TYPE_STRING)
        else _VARINT
    )
    return varint(field.number << 3 | kind)


def varint(n: int) -> bytes:
    """`n` (0 .. 2**64 - 1) as a protobuf varint."""
    if 0 <= n < _SMALL:  # tickets, epochs, a frame's length: most are small
        return _SMALL_VARINTS[n]
    if n < 0:
        raise ValueError(f"a varint here is never negative: {n}")
    return _encoded(n)


def _encoded(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Varints made once: every value of up to two bytes (a ticket, an epoch, a length of a
# frame of up to 16 KiB), looked up instead of built byte by byte for each answer.
_SMALL = 1 << 14
_SMALL_VARINTS = [_encoded(n) for n in range(_SMALL)]

_TICKET = _tag(pb.ConsumeResponse, "ticket")
_MESSAGE = _tag(pb.ConsumeResponse, "message")
_OPEN_TRUE = _tag(pb.ConsumeResponse, "open") + b"\x01"
_BATCH = _tag(pb.ConsumeResponse, "batch")
_EPOCH = _tag(pb.PollResponse, "epoch")
_DATA = _tag(pb.PollResponse, "data")
_BLOCKS = _tag(pb.PollResponse, "blocks")
_DATA_FIELDS = tuple(
    _tag(pb.DataMessage, name) for name in ("offset", "end_offset", "block_count", "row_count")
)
_PART_BLOCK = _tag(pb.BlockPart, "block")
_PART_TABLE = _tag(pb.BlockPart, "table_name")
_PART_ARROW = _tag(pb.BlockPart, "arrow_ipc")


def follow_answer(ticket: int, frame: bytes, epoch: int) -> bytes:
    """`ConsumeResponse(ticket, message=frame with its epoch set, open=True)`, where
    `frame` is a serialized PollResponse without an epoch."""
    return follow_answer_after(answer_head(ticket), frame, epoch)


def answer_head(ticket: int) -> bytes:
    """What a follow's every answer begins with (its ticket, the message's tag): made
    once per follow."""
    return _TICKET + varint(ticket) + _MESSAGE


def follow_answer_after(head: bytes, frame: bytes, epoch: int) -> bytes:
    """`follow_answer` with its ticket's `answer_head`: one copy of the frame."""
    if not epoch:
        return b"".join((head, varint(len(frame)), frame, _OPEN_TRUE))
    stamp = _EPOCH + varint(epoch)
    return b"".join((head, varint(len(frame) + len(stamp)), frame, stamp, _OPEN_TRUE))


def data_frame(
    offset: int, end_offset: int, row_count: int, parts: Sequence[tuple[str | None, bytes]]
) -> bytes:
    """`PollResponse(data=DataMessage(...), blocks=[BlockPart(block=i, table_name, arrow_ipc)
    for each part i])` serialized: a data message of one frame, each block one part (a
    table name None: not set)."""
    header = b"".join(
        tag + varint(value)
        for tag, value in zip(
            _DATA_FIELDS, (offset, end_offset, len(parts), row_count), strict=True
        )
        if value  # proto3 leaves zeros out
    )
    out = [_DATA, varint(len(header)), header]
    for block, (table_name, arrow_ipc) in enumerate(parts):
        head = _PART_BLOCK + varint(block) if block else b""
        if table_name is not None:
            name = table_name.encode()
            head += _PART_TABLE + varint(len(name)) + name
        if arrow_ipc:  # proto3 leaves empty bytes out
            head += _PART_ARROW + varint(len(arrow_ipc))
        out += (_BLOCKS, varint(len(head) + len(arrow_ipc)), head, arrow_ipc)
    return b"".join(out)


def batched(first: bytes, rest: Sequence[bytes]) -> bytes:
    """The serialized answer `first` with the serialized answers `rest` in its `batch`."""
    parts = [first]
    for answer in rest:
        parts += (_BATCH, varint(len(answer)), answer)
    return b"".join(parts)


# Bytes a batched answer adds to its own: the tag and the length (at most 10 bytes).
BATCH_ENTRY_OVERHEAD = len(_BATCH) + 10
