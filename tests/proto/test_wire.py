"""sqltopic/proto/wire.py: answers framed from serialized bytes parse as exactly the
messages a protobuf library builds (table-driven)."""

from __future__ import annotations

import pytest

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.wire import (
    answer_head,
    batched,
    data_frame,
    follow_answer,
    follow_answer_after,
    varint,
)


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16_383, b"\xff\x7f"),  # the last one made in advance
        (16_384, b"\x80\x80\x01"),  # the first one built
        (2**63, b"\x80" * 9 + b"\x01"),
        (2**64 - 1, b"\xff" * 9 + b"\x01"),
    ],
)
def test_varints_are_protobufs(n: int, encoded: bytes) -> None:
    assert varint(n) == encoded
    if n:  # what protobuf writes for a uint64 field (after its one-byte tag)
        assert pb.ConsumeResponse(ticket=n).SerializeToString()[1:] == encoded


def test_a_negative_varint_is_refused() -> None:
    with pytest.raises(ValueError, match="never negative: -1"):
        varint(-1)


FRAMES = {
    "data": pb.PollResponse(
        data=pb.DataMessage(offset=5, end_offset=9, block_count=2, row_count=300),
        blocks=[
            pb.BlockPart(block=0, table_name="d1", arrow_ipc=b"\x01" * 3000),
            pb.BlockPart(block=1, arrow_ipc=b"\xff" * 200),
        ],
    ),
    "empty": pb.PollResponse(empty=pb.EmptyMessage(offset=7, end_offset=7)),
    "meta": pb.PollResponse(meta=pb.MetaMessage(offset=3, end_offset=4, event_json="{}")),
}


def _built(ticket: int, frame: pb.PollResponse, epoch: int) -> pb.ConsumeResponse:
    answer = pb.ConsumeResponse(ticket=ticket, open=True)
    answer.message.CopyFrom(frame)
    answer.message.epoch = epoch
    return answer


@pytest.mark.parametrize("kind", sorted(FRAMES))
@pytest.mark.parametrize(("ticket", "epoch"), [(0, 0), (1, 1), (300, 0), (2**40, 2**33)])
def test_a_follow_answer_is_the_message_built(kind: str, ticket: int, epoch: int) -> None:
    frame = FRAMES[kind]
    got = pb.ConsumeResponse.FromString(follow_answer(ticket, frame.SerializeToString(), epoch))
    assert got == _built(ticket, frame, epoch)


@pytest.mark.parametrize("kind", sorted(FRAMES))
@pytest.mark.parametrize(("ticket", "epoch"), [(0, 0), (7, 0), (7, 3), (2**40, 2**33)])
def test_a_follow_answer_after_its_head_is_the_same_bytes(
    kind: str, ticket: int, epoch: int
) -> None:
    frame = FRAMES[kind].SerializeToString()
    assert follow_answer_after(answer_head(ticket), frame, epoch) == follow_answer(
        ticket, frame, epoch
    )
    got = pb.ConsumeResponse.FromString(follow_answer_after(answer_head(ticket), frame, epoch))
    assert got == _built(ticket, FRAMES[kind], epoch)


@pytest.mark.parametrize("behind", [0, 1, 3])
def test_a_batch_is_its_first_answer_with_the_rest_in_order(behind: int) -> None:
    answers = [_built(t, FRAMES["data"], t) for t in range(1, behind + 2)]
    answers.append(pb.ConsumeResponse(ticket=99, error=pb.CallStatus(code=7, message="no")))
    first, *rest = answers
    got = pb.ConsumeResponse.FromString(
        batched(first.SerializeToString(), [a.SerializeToString() for a in rest])
    )
    expected = pb.ConsumeResponse()
    expected.CopyFrom(first)
    expected.batch.extend(rest)
    assert got == expected
    assert [a.ticket for a in got.batch] == [a.ticket for a in rest]


# (offset, end_offset, row_count, parts): zeros that proto3 leaves out, names set, empty
# and unset, large values and parts
DATA_FRAMES: dict[str, tuple[int, int, int, list[tuple[str | None, bytes]]]] = {
    "one part": (5, 9, 300, [("d1", b"\x01" * 3000)]),
    "zeros": (0, 0, 0, [(None, b"")]),
    "no parts": (1, 2, 0, []),
    "an empty name is set": (3, 4, 1, [("", b"\x02")]),
    "names and not": (2**40, 2**40 + 7, 2**33, [("\u00fc" * 200, b"\x03" * 70_000), (None, b"x")]),
    "many parts": (1, 300, 1_000, [(f"d{i}", bytes([i]) * i) for i in range(130)]),
}


@pytest.mark.parametrize("name", sorted(DATA_FRAMES))
def test_a_data_frame_is_the_bytes_protobuf_writes(name: str) -> None:
    offset, end, rows, parts = DATA_FRAMES[name]
    built = pb.PollResponse(
        data=pb.DataMessage(offset=offset, end_offset=end, block_count=len(parts), row_count=rows)
    )
    for i, (table_name, arrow_ipc) in enumerate(parts):
        part = built.blocks.add(block=i, arrow_ipc=arrow_ipc)
        if table_name is not None:
            part.table_name = table_name
    framed = data_frame(offset, end, rows, parts)
    assert framed == built.SerializeToString()
    assert pb.PollResponse.FromString(framed) == built
