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

from google.protobuf.descriptor import FieldDescriptor

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

_VARINT, _LENGTH = 0, 2  # protobuf wire types


def _tag(message: type[pb.ConsumeResponse] | type[pb.PollResponse], name: str) -> bytes:
    field: FieldDescriptor = message.DESCRIPTOR.fields_by_name[name]
    kind = _LENGTH if field.type in (field.TYPE_MESSAGE, field.TYPE_BYTES) else _VARINT
    return varint(field.number << 3 | kind)


def varint(n: int) -> bytes:
    """`n` (0 .. 2**64 - 1) as a protobuf varint."""
    if n < 0:
        raise ValueError(f"a varint here is never negative: {n}")
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_TICKET = _tag(pb.ConsumeResponse, "ticket")
_MESSAGE = _tag(pb.ConsumeResponse, "message")
_OPEN_TRUE = _tag(pb.ConsumeResponse, "open") + b"\x01"
_BATCH = _tag(pb.ConsumeResponse, "batch")
_EPOCH = _tag(pb.PollResponse, "epoch")


def follow_answer(ticket: int, frame: bytes, epoch: int) -> bytes:
    """`ConsumeResponse(ticket, message=frame with its epoch set, open=True)`, where
    `frame` is a serialized PollResponse without an epoch."""
    stamped = frame + _EPOCH + varint(epoch) if epoch else frame
    return b"".join((_TICKET, varint(ticket), _MESSAGE, varint(len(stamped)), stamped, _OPEN_TRUE))


def batched(first: bytes, rest: Sequence[bytes]) -> bytes:
    """The serialized answer `first` with the serialized answers `rest` in its `batch`."""
    parts = [first]
    for answer in rest:
        parts += (_BATCH, varint(len(answer)), answer)
    return b"".join(parts)


# Bytes a batched answer adds to its own: the tag and the length (at most 10 bytes).
BATCH_ENTRY_OVERHEAD = len(_BATCH) + 10
