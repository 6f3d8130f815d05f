"""The core's look-ups by time without a server (tests/client/test_core.py's scripted
vnode answers them): answers go to their parts in order, seek_to_time moves every
assigned vgroup and drops what was fetched, bad times are refused before any call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sqltopic.client.message import TopicPartition
from sqltopic.errors import ConfigError, Error
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.client.test_core import BEGIN, END, FakeServer, make


def at(time_ms: int) -> int:
    """The scripted vnode's version at a time: BEGIN + one version a second, END after."""
    return min(BEGIN + time_ms // 1000, END)


class TimedServer(FakeServer):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: list[list[tuple[str, int, int]]] = []
        self.answer_short = False

    def OffsetsForTimes(self, request: pb.OffsetsForTimesRequest) -> pb.OffsetsForTimesResponse:
        self.asked.append([(v.topic, v.vgroup, v.time_ms) for v in request.vgroups])
        found = [
            pb.VgroupTimeOffset(
                topic=v.topic, vgroup=v.vgroup, offset=at(v.time_ms), begin=BEGIN, end=END
            )
            for v in request.vgroups
        ]
        return pb.OffsetsForTimesResponse(offsets=found[:-1] if self.answer_short else found)


def timed(vgroups: list[int]) -> tuple[Any, TimedServer]:
    core, plain = make(vgroups)
    server = TimedServer(core, vgroups)
    server.epoch = plain.epoch
    return core, server


def test_answers_go_to_their_parts_in_request_order() -> None:
    core, server = timed([1, 2])
    asked = [TopicPartition("t", 2, 3_000), TopicPartition("t", 1, 0), TopicPartition("t", 2, 0)]
    found = server.run(core.offsets_for_times(asked))
    assert [(p.vgroup, p.offset, p.begin, p.end) for p in found] == [
        (2, BEGIN + 3, BEGIN, END), (1, BEGIN, BEGIN, END), (2, BEGIN, BEGIN, END),
    ]  # fmt: skip
    assert server.asked == [[("t", 2, 3_000), ("t", 1, 0), ("t", 2, 0)]]
    assert [p.offset for p in asked] == [3_000, 0, 0]  # copies: the parts are unchanged


def test_seek_to_time_moves_every_assigned_vgroup() -> None:
    core, server = timed([1, 2])
    assert server.run(core.poll(0)) is not None  # fetched from the start
    when = datetime(1970, 1, 1, 0, 0, 7, tzinfo=UTC)  # 7,000 ms
    found = server.run(core.seek_to_time(when))
    assert sorted((p.vgroup, p.offset) for p in found) == [(1, BEGIN + 7), (2, BEGIN + 7)]
    parts = core.position([TopicPartition("t", 1), TopicPartition("t", 2)])
    assert [p.offset for p in parts] == [BEGIN + 7, BEGIN + 7]
    # (a poll with time to wait: the answers fetched before the seek come first)
    offsets = {server.run(core.poll(1.0)).offset for _ in range(2)}
    assert offsets == {BEGIN + 7}  # nothing fetched before the seek is handed out


@pytest.mark.parametrize(
    ("time", "words"),
    [
        (-1, "is -1, before the epoch"),
        (None, "is None; give milliseconds since the epoch"),
        (1.5, "is 1.5; give milliseconds since the epoch"),
        (True, "is True; give milliseconds since the epoch"),
    ],
)
def test_bad_times_are_refused_before_any_call(time: object, words: str) -> None:
    core, server = timed([1])
    with pytest.raises(ConfigError, match=words):
        server.run(core.offsets_for_times([TopicPartition("t", 1, time)]))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=words):
        server.run(core.seek_to_time(time))
    with pytest.raises(ConfigError, match="timeout 0 is not a number of seconds > 0"):
        server.run(core.offsets_for_times([TopicPartition("t", 1, 0)], timeout=0))
    assert server.asked == []


def test_an_answer_missing_look_ups_is_an_error() -> None:
    core, server = timed([1, 2])
    server.answer_short = True
    with pytest.raises(Error, match="answered 1 look-ups of 2"):
        server.run(core.offsets_for_times([TopicPartition("t", 1, 0), TopicPartition("t", 2, 0)]))
