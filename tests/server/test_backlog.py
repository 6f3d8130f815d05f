"""The answers a Consume stream holds for its client, bounded (server/dnode/backlog.py):
a client that reads no answers stops its stream reading requests, and its follows
sending; what is sent or taken makes room again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pyarrow as pa
import pytest

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core.topic_reader import TopicBlock
from sqltopic.server.dnode import backlog
from sqltopic.server.dnode.backlog import Backlog, Outbox
from sqltopic.server.dnode.follow import Credit, _Follower, _Frames
from sqltopic.server.dnode.poll import Message
from sqltopic.server.rpc.consume import ConsumeStream
from tests.server.test_consume_stream import as_user, free, poll

# Turns of the event loop a test lets the stream run (a bound, not a timing): far more
# than it needs to read every request offered, when nothing holds it back.
TURNS = 5_000
OFFERED = 2_000  # polls a client sends without reading answers
DEADLINE_S = 10.0  # waits for what a test made happen (a bound, not a timing)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backlog, "MAX_BACKLOG_ANSWERS", 8)
    monkeypatch.setattr(backlog, "MAX_BACKLOG_BYTES", 1 << 20)


def _full(held: Backlog) -> bool:
    return held.full  # read anew each time (mypy would narrow the property)


def test_the_backlog_is_full_at_either_bound_and_room_comes_back(small: None) -> None:
    async def run() -> None:
        held = Backlog()
        for _ in range(7):
            held.add(10)
        assert not _full(held)
        held.add(10)
        assert _full(held)  # 8 answers
        waiting = asyncio.create_task(held.room(asyncio.Event()))
        await asyncio.sleep(0)
        assert not waiting.done()
        held.remove(10)
        await asyncio.wait_for(waiting, DEADLINE_S)
        held.add(1 << 20)
        assert _full(held)  # the bytes
        stopping = asyncio.Event()
        stopped = asyncio.create_task(held.room(stopping))
        await asyncio.sleep(0)
        stopping.set()  # a server that stops waits for no room
        await asyncio.wait_for(stopped, DEADLINE_S)

    asyncio.run(run())


def test_an_outbox_gives_its_items_in_order_counting_answers_in_its_backlog(
    small: None,
) -> None:
    async def run() -> None:
        box = Outbox()
        waiting = asyncio.create_task(box.get())
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing to send yet: the sender waits
        box.put(b"abc")
        assert await asyncio.wait_for(waiting, DEADLINE_S) == b"abc"
        assert (box.backlog.answers, box.backlog.bytes) == (0, 0)
        error = ValueError("the stream ends")
        for item in (b"1", b"22", error, b"333", None):
            box.put(item)
        assert (box.backlog.answers, box.backlog.bytes) == (3, 6)  # answers only
        got = [box.get_nowait() for _ in range(5)]
        assert got == [b"1", b"22", error, b"333", None]
        assert (box.backlog.answers, box.backlog.bytes) == (0, 0)
        assert box.empty()
        with pytest.raises(IndexError):
            box.get_nowait()
        for _ in range(8):
            box.put(b"x")
        assert _full(box.backlog)  # its bound is the backlog's
        box.get_nowait()
        assert not _full(box.backlog)

    asyncio.run(run())


async def _offered() -> AsyncIterator[pb.ConsumeRequest]:
    for ticket in range(1, OFFERED + 1):
        yield poll(ticket, 1)
        await asyncio.sleep(0)


@pytest.mark.parametrize("frame_bytes", [0, 200_000])
def test_a_client_that_reads_no_answers_stops_its_stream_taking_polls(
    small: None, frame_bytes: int
) -> None:
    fetched: list[int] = []

    async def fetch(request: pb.PollRequest, user: str) -> pb.PollResponse:
        fetched.append(request.vgroup)
        data = pb.PollResponse(epoch=1)
        data.blocks.add(arrow_ipc=b"\x01" * frame_bytes)
        return data

    async def run() -> ConsumeStream:
        stream = ConsumeStream(fetch, as_user("a"), free)
        answers = stream.run(_offered())
        await answers.__anext__()  # the client reads one answer, then none
        for _ in range(TURNS):
            await asyncio.sleep(0)
        await answers.aclose()  # type: ignore[attr-defined]  # an async generator
        return stream

    asyncio.run(run())
    # 8 answers or 1 MiB held: the stream stopped reading (the answer read, and a
    # poll or two started before the bound was reached)
    bound = 8 if frame_bytes == 0 else (1 << 20) // frame_bytes + 1
    assert bound <= len(fetched) <= bound + 4


def _message(offset: int) -> Message:
    rows = pa.table({"v": pa.array([1, 2, 3], pa.int32())})
    return Message("data", offset, offset + 1, [TopicBlock("d1", rows, offset, offset)])


def _blocked(credit: Credit) -> bool:
    return credit.blocked  # read anew each time (mypy would narrow the property)


def test_a_follower_sends_nothing_while_its_stream_s_backlog_is_full(small: None) -> None:
    async def run() -> None:
        held = Backlog()
        sent: list[bytes | pb.ConsumeResponse] = []

        def put(answer: bytes | pb.ConsumeResponse) -> None:
            sent.append(answer)
            held.add(1)

        request = pb.PollRequest(topic="t", vgroup=1, consumer_id=5, epoch=1, position=1)
        credit = Credit(64, held)
        follower = _Follower(1, request, credit, put, lambda _: 1, _Frames())
        for k in range(7):
            assert follower.deliver(_message(k + 1)) == "stay"
        assert follower.deliver(_message(8)) == "leave"  # the 8th fills the backlog
        assert _blocked(credit)
        assert follower.deliver(_message(9)) == "skip"  # nothing sent: an ordinary poll
        assert len(sent) == 8
        assert follower.position == 9
        held.remove(1)
        assert not _blocked(credit)
        assert follower.deliver(_message(9)) == "leave"
        assert follower.position == 10

    asyncio.run(run())
