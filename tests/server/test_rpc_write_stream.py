"""server/rpc/write_stream.py in process: how a Writes stream is read ahead (`Ahead`:
what waits goes together, within its bounds; the end, a failure and a stop), and which
writes make one run (`runs`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest

from sqltopic.errors import InvalidRequest, NotFoundError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status
from sqltopic.server.rpc.ingest import Received
from sqltopic.server.rpc.write_stream import (
    MAX_AHEAD_BYTES,
    MAX_WRITES_AHEAD,
    Ahead,
    answer,
    runs,
)

T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]  # an Awaitable, a coroutine


async def requests(
    count: int, size: int = 1, fail: Exception | None = None, hold: asyncio.Event | None = None
) -> AsyncIterator[pb.WritesRequest]:
    """`count` requests of `size` Arrow bytes, then `fail` raised, or the stream held
    open until `hold` is set."""
    for ticket in range(1, count + 1):
        yield pb.WritesRequest(ticket=ticket, target="t", arrow_ipc=b"x" * size)
    if fail is not None:
        raise fail
    if hold is not None:
        await hold.wait()


def tickets(taken: list[pb.WritesRequest]) -> list[int]:
    return [r.ticket for r in taken]


def test_requests_waiting_together_are_taken_together_then_the_end() -> None:
    async def scenario() -> list[list[int]]:
        ahead = Ahead(requests(5), asyncio.Event())
        got = [tickets(await ahead.take()), tickets(await ahead.take())]
        ahead.close()
        return got

    assert run(scenario) == [[1, 2, 3, 4, 5], []]


def test_no_more_than_the_bound_is_read_ahead() -> None:
    async def scenario() -> list[int]:
        ahead = Ahead(requests(3 * MAX_WRITES_AHEAD), asyncio.Event())
        sizes = []
        while taken := await ahead.take():
            sizes.append(len(taken))
        ahead.close()
        return sizes

    sizes = run(scenario)
    assert sum(sizes) == 3 * MAX_WRITES_AHEAD
    assert max(sizes) <= MAX_WRITES_AHEAD


def test_a_large_write_is_read_alone() -> None:
    async def scenario() -> list[list[int]]:
        ahead = Ahead(requests(3, size=MAX_AHEAD_BYTES), asyncio.Event())
        got = [tickets(await ahead.take()) for _ in range(4)]
        ahead.close()
        return got

    assert run(scenario) == [[1], [2], [3], []]


def test_every_field_of_a_request_counts_toward_the_bytes_read_ahead() -> None:
    # a name as large as the bound holds as much as Arrow bytes would (it is refused
    # only once taken: the read-ahead must not hold sixteen of them first)
    async def named(count: int) -> AsyncIterator[pb.WritesRequest]:
        for ticket in range(1, count + 1):
            yield pb.WritesRequest(ticket=ticket, target="t" * MAX_AHEAD_BYTES)

    async def scenario() -> list[list[int]]:
        ahead = Ahead(named(3), asyncio.Event())
        got = [tickets(await ahead.take()) for _ in range(4)]
        ahead.close()
        return got

    assert run(scenario) == [[1], [2], [3], []]


def test_a_failed_stream_raises_after_the_requests_before_it() -> None:
    async def scenario() -> list[int]:
        ahead = Ahead(requests(2, fail=InvalidRequest("bad bytes")), asyncio.Event())
        first = tickets(await ahead.take())
        with pytest.raises(InvalidRequest, match="bad bytes"):
            await ahead.take()
        ahead.close()
        return first

    assert run(scenario) == [1, 2]


def test_a_stop_ends_the_stream_before_the_writes_not_taken() -> None:
    async def scenario() -> list[int]:
        stopping, hold = asyncio.Event(), asyncio.Event()
        ahead = Ahead(requests(2, hold=hold), stopping)
        stopping.set()
        got = tickets(await ahead.take())  # held open, but the server stops: nothing taken
        ahead.close()
        return got

    assert run(scenario) == []


def _sent(target: str, database: str | None = None) -> Received:
    return Received(target, database, bytearray(), 0)


@pytest.mark.parametrize(
    ("writes", "expected"),
    [
        ([], []),
        ([("a", None)], [[0]]),
        ([("a", None), ("a", None), ("a", None)], [[0, 1, 2]]),
        ([("a", None), ("b", None), ("a", None)], [[0], [1], [2]]),
        ([("a", None), ("a", "db1"), ("a", "db1"), ("a", None)], [[0], [1, 2], [3]]),
    ],
)
def test_consecutive_writes_to_one_target_make_one_run(
    writes: list[tuple[str, str | None]], expected: list[list[int]]
) -> None:
    checked = [(place, _sent(target, db)) for place, (target, db) in enumerate(writes)]
    assert [[place for place, _ in r] for r in runs(checked)] == expected


def test_runs_keep_the_places_of_the_writes_taken() -> None:
    checked = [(0, _sent("a")), (2, _sent("a")), (3, _sent("b"))]  # place 1 was refused
    assert [[place for place, _ in r] for r in runs(checked)] == [[0, 2], [3]]


def test_an_answer_carries_its_rows_or_its_error() -> None:
    written = answer(7, 12)
    assert (written.ticket, written.WhichOneof("result"), written.written.rows) == (
        7,
        "written",
        12,
    )
    refused = answer(8, NotFoundError("no table t"))
    assert refused.WhichOneof("result") == "error"
    assert isinstance(from_call_status(refused.error), NotFoundError)
