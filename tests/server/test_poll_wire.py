"""server/dnode/poll_wire.py: `first_frame` (what a follower sends, put together from
bytes) is `frames_of`'s first frame serialized and its count of frames, for messages of
every kind and shape (table-driven), one frame or several."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from sqltopic.server.core.topic_reader import TopicBlock
from sqltopic.server.dnode import poll_wire
from sqltopic.server.dnode.poll import Message
from sqltopic.server.dnode.poll_wire import first_frame, frames_of


def _block(name: str | None, n: int, start: int = 0) -> TopicBlock:
    data = pa.table(
        {
            "ts": pa.array(range(start, start + n), pa.timestamp("ms")),
            "voltage": pa.array([i % 5 if i % 3 else None for i in range(n)], pa.int32()),
        }
    )
    return TopicBlock(name, data, 1, 2)


MESSAGES: dict[str, Callable[[], Message]] = {
    "one block": lambda: Message("data", 3, 7, [_block("d1", 100)]),
    "from the start": lambda: Message("data", 0, 1, [_block("d1", 1)]),
    "no table name": lambda: Message("data", 3, 7, [_block(None, 10)]),
    "several blocks": lambda: Message(
        "data", 10, 20, [_block("d1", 5), _block(None, 1), _block("d2", 0), _block("d3", 40, 9)]
    ),
    "a slice": lambda: Message(
        "data", 1, 2, [TopicBlock("d9", _block(None, 90).data.slice(7, 30), 1, 1)]
    ),
    "empty": lambda: Message("empty", 4, 9),
    "data lost": lambda: Message("data_lost", 1, 5),
}


@pytest.mark.parametrize("names", [True, False])
@pytest.mark.parametrize("name", list(MESSAGES))
def test_the_first_frame_is_frames_of_s_first(name: str, names: bool) -> None:
    message = MESSAGES[name]()
    frames = frames_of(message, names)
    assert first_frame(message, names) == (len(frames), frames[0].SerializeToString())


@pytest.mark.parametrize(
    ("sizes", "one_frame"),
    [((10,), True), ((10, 10), True), ((200,), False), ((10, 200), False), ((150,) * 3, False)],
)
def test_a_message_over_one_frame_is_frames_of_s(
    monkeypatch: pytest.MonkeyPatch, sizes: tuple[int, ...], one_frame: bool
) -> None:
    # a chunk of 2,000 bytes: blocks of 150 or 200 rows take more than one frame
    monkeypatch.setattr(poll_wire, "MAX_CHUNK_BYTES", 2_000)
    message = Message("data", 1, 9, [_block(f"d{i}", n) for i, n in enumerate(sizes)])
    made = frames_of(message, True)
    assert (len(made) == 1) == one_frame
    assert first_frame(message, True) == (len(made), made[0].SerializeToString())
