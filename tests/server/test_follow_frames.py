"""Framing for followers (server/dnode/follow.py `_Frames`): a message is framed once
for every follower it goes to, and never answers with another message's frame."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core.topic_reader import TopicBlock, TopicMeta
from sqltopic.server.dnode import follow, poll_wire
from sqltopic.server.dnode.follow import _Frames
from sqltopic.server.dnode.poll import Message


def _message(offset: int) -> Message:
    rows = pa.table({"v": pa.array([1, 2, 3], pa.int32())})
    return Message("data", offset, offset + 1, [TopicBlock("d1", rows, offset, offset)])


def test_followers_of_one_message_frame_it_once_and_an_equal_one_is_not_framed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    framed: list[Message] = []
    real = poll_wire.first_frame

    def counted(message: Message, names: bool) -> tuple[int, bytes]:
        framed.append(message)
        return real(message, names)

    monkeypatch.setattr(follow, "first_frame", counted)
    frames = _Frames()
    message = _message(1)
    first = frames.of(message, True)
    assert frames.of(message, True) == first  # the same object: by identity
    same = Message("data", 1, 2, list(message.blocks))  # another object, the same blocks
    assert frames.of(same, True) == first
    assert framed == [message]
    assert frames.of(message, False) != first  # without table names: framed apart
    other = _message(1)  # equal rows in other blocks: framed for itself
    assert frames.of(other, True) == first
    assert framed == [message, message, other]


def test_meta_messages_at_the_same_versions_keep_their_own_events() -> None:
    # two vnodes of one service reach version 7 with different DDL events
    frames = _Frames()
    created = {"type": "create", "tableType": "normal", "tableName": "d0"}
    dropped = {"type": "drop", "tableType": "normal", "tableName": "d9"}
    events = []
    for event in (created, dropped, created):
        count, frame = frames.of(Message("meta", 7, 8, meta=TopicMeta(7, event)), True)
        assert count == 1
        events.append(pb.PollResponse.FromString(frame).meta.event_json)
    assert ['"d0"' in events[0], '"d9"' in events[1], '"d0"' in events[2]] == [True] * 3
