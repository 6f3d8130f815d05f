"""Building a Message from the frames of one Vnode.Poll answer (docs/protocol.md,
PollResponse), and what Message, Block and TopicPartition offer the application."""

from __future__ import annotations

import json
from datetime import datetime

import pyarrow as pa
import pytest

from sqltopic.client.effects import Fetch, failed, fetched
from sqltopic.client.message import Block, Empty, Message, TopicPartition, message_from_frames
from sqltopic.errors import Error
from sqltopic.proto.arrow_ipc import chunks, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

WHERE = ("overvoltage", "power", 3)


def _meters(first: int, count: int) -> pa.Table:
    return pa.table({
        "ts": pa.array(range(first, first + count), pa.timestamp("ms")),
        "voltage": pa.array(range(200 + first, 200 + first + count), pa.int32()),
    })  # fmt: skip


def _parts(block: int, table: pa.Table, name: str | None, size: int) -> list[pb.BlockPart]:
    """A block's IPC stream cut every `size` bytes; the name on the first part only."""
    parts = [pb.BlockPart(block=block, arrow_ipc=c) for c in chunks(to_ipc(table), size)]
    if name is not None:
        parts[0].table_name = name
    return parts


def _data_frames(tables: list[tuple[str | None, pa.Table]], size: int) -> list[pb.PollResponse]:
    """A data message whose block parts are spread one per frame (the first frame has
    the head and the first part)."""
    parts = [p for i, (name, t) in enumerate(tables) for p in _parts(i, t, name, size)]
    rows = sum(t.num_rows for _, t in tables)
    head = pb.DataMessage(offset=10, end_offset=17, block_count=len(tables), row_count=rows)
    first = pb.PollResponse(data=head, blocks=parts[:1])
    return [first, *(pb.PollResponse(blocks=[p]) for p in parts[1:])]


def test_a_data_message_joins_each_blocks_chunks_across_frames() -> None:
    d1, d2 = _meters(0, 50), _meters(100, 3)
    frames = _data_frames([("d1001", d1), ("d1002", d2)], size=97)
    assert len(frames) > 4  # the blocks really are cut into many pieces
    message = message_from_frames(*WHERE, frames)
    assert isinstance(message, Message)
    assert (message.topic, message.database, message.vgroup) == WHERE
    assert (message.kind, message.offset, message.end_offset) == ("data", 10, 17)
    assert [(b.table_name, b.data) for b in message.blocks] == [("d1001", d1), ("d1002", d2)]
    assert message.row_count == 53
    assert len(message) == 2
    assert list(message) == message.blocks
    assert message.meta is None


def test_rows_come_as_tuples_in_block_order() -> None:
    message = message_from_frames(
        *WHERE, _data_frames([("a", _meters(0, 2)), (None, _meters(5, 1))], 4096)
    )
    assert isinstance(message, Message)
    expected = [
        (datetime(1970, 1, 1), 200),
        (datetime(1970, 1, 1, 0, 0, 0, 1000), 201),
        (datetime(1970, 1, 1, 0, 0, 0, 5000), 205),
    ]
    assert message.rows() == expected
    assert [list(block) for block in message] == [expected[:2], expected[2:]]
    assert message.blocks[1].table_name is None  # a query topic's rows of several tables
    assert message.to_arrow().equals(pa.concat_tables([_meters(0, 2), _meters(5, 1)]))


def test_to_arrow_refuses_blocks_of_different_schemas() -> None:
    other = pa.table({"ts": pa.array([1], pa.timestamp("ms")), "c": pa.array(["x"])})
    message = message_from_frames(
        *WHERE, _data_frames([("d1", _meters(0, 1)), ("n1", other)], 4096)
    )
    assert isinstance(message, Message)
    with pytest.raises(Error, match=r"block 'n1' has columns \['ts', 'c'\], block 'd1'"):
        message.to_arrow()
    assert len(message.rows()) == 2  # rows() still works


def test_a_meta_message_carries_the_event_as_a_dict() -> None:
    event = {"type": "create", "tableType": "child", "db": "power", "tableName": "d1001"}
    head = pb.MetaMessage(offset=4, end_offset=6, version=5, event_json=json.dumps(event))
    message = message_from_frames(*WHERE, [pb.PollResponse(meta=head)])
    assert isinstance(message, Message)
    assert (message.kind, message.offset, message.end_offset) == ("meta", 4, 6)
    assert message.meta == event
    assert message.blocks == []
    assert message.rows() == []
    assert message.to_arrow().num_rows == 0


def test_data_lost_and_empty_answers() -> None:
    lost = pb.PollResponse(data_lost=pb.DataLostMessage(offset=1, end_offset=900))
    message = message_from_frames(*WHERE, [lost])
    assert isinstance(message, Message)
    assert (message.kind, message.offset, message.end_offset, message.blocks) == (
        "data_lost", 1, 900, [],
    )  # fmt: skip
    empty = pb.PollResponse(empty=pb.EmptyMessage(offset=7, end_offset=9))
    assert message_from_frames(*WHERE, [empty]) == Empty(7, 9)


def test_malformed_answers_are_errors_naming_the_vgroup() -> None:
    with pytest.raises(Error, match="poll of topic overvoltage vgroup 3: the answer carries no"):
        message_from_frames(*WHERE, [])
    with pytest.raises(Error, match="carries no message"):
        message_from_frames(*WHERE, [pb.PollResponse()])
    frames = _data_frames([("d1", _meters(0, 1))], 4096)
    frames[0].data.block_count = 2
    with pytest.raises(Error, match="announces 2 blocks but carries 1"):
        message_from_frames(*WHERE, frames)


def test_block_and_topic_partition() -> None:
    block = Block("d1", _meters(0, 2))
    assert len(block) == 2
    assert block.rows() == list(block)
    part = TopicPartition("t", 2)
    assert (part.offset, part.begin, part.end) == (None, None, None)
    part.offset = 5  # set on what assignment() returned, then seek(part)
    assert part == TopicPartition("t", 2, 5)


def test_a_poll_that_fails_or_cannot_be_read_still_answers_with_an_error() -> None:
    """Every background poll answers (else its vgroup would stall), as a sqltopic.Error."""
    fetch = Fetch(7, *WHERE, "", pb.PollRequest(), (), 1.0)
    done = fetched(fetch, [pb.PollResponse(data=pb.DataMessage(block_count=0))])
    assert done.ticket == 7
    assert isinstance(done.result, Message)
    broken = pb.PollResponse(data=pb.DataMessage(block_count=1), blocks=[pb.BlockPart()])
    broken.blocks[0].arrow_ipc = b"not arrow"
    done = fetched(fetch, [broken])
    assert isinstance(done.result, Error)
    assert str(done.result).startswith("poll of topic overvoltage vgroup 3 failed: Arrow")
    done = failed(fetch, OSError("boom"))
    assert isinstance(done.result, Error)
    assert str(done.result) == "poll of topic overvoltage vgroup 3 failed: OSError: boom"


def test_ids_in_a_meta_event_are_ints_again() -> None:
    """The server sends `uid` and `colId` as strings (exact in every JSON parser); the
    Python client gives them back as ints, at any depth. Other strings stay strings."""
    wire = {
        "type": "create", "tableType": "normal", "uid": "4611686018427387905",
        "columns": [{"name": "ts", "type": "TIMESTAMP", "colId": "9007199254740993"}],
        "tags": [{"name": "big", "value": "9223372036854775807"}],
    }  # fmt: skip
    head = pb.MetaMessage(offset=1, end_offset=2, version=1, event_json=json.dumps(wire))
    message = message_from_frames(*WHERE, [pb.PollResponse(meta=head)])
    assert isinstance(message, Message)
    assert message.meta is not None
    assert message.meta["uid"] == 4611686018427387905
    assert message.meta["columns"][0]["colId"] == 9007199254740993
    assert message.meta["tags"][0]["value"] == "9223372036854775807"
