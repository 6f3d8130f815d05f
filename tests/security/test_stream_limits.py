"""Open streams and held polls are bounded per session and per user (the server's
--max-streams-per-session and --max-streams-per-user): one over a limit is refused at
once with LimitExceeded; a slot frees as soon as its call ends."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from sqltopic.client import connect
from sqltopic.errors import LimitExceeded
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status
from tests.live_server import POWER, ServerProcess
from tests.security.hostile import UserWire, refusal

# A held poll waits this long for writes that never come: longer than the test.
HOLD_MS = 60_000
DEADLINE_S = 30.0


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "data",
        extra=("--max-streams-per-session", "2", "--max-streams-per-user", "3"),
    )
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(POWER)
            conn.execute("CREATE TOPIC t1 AS STABLE power.meters")
        yield proc
    finally:
        proc.kill()


def poll_holding(wire: UserWire) -> grpc.Future[pb.PollResponse]:
    """A Fetch of an empty vgroup that waits for writes, by a consumer of its own group."""
    group = f"g{time.monotonic_ns()}"
    joined = wire.subscribe(group, ["t1"])
    assignment = wire.assignment(joined.consumer_id)
    part = assignment.assignments[0]
    request = pb.PollRequest(
        consumer_id=joined.consumer_id, group_id=group, topic="t1", vgroup=part.vgroup,
        epoch=assignment.epoch, position=part.end, max_wait_ms=HOLD_MS,
    )  # fmt: skip
    future: grpc.Future[pb.PollResponse] = wire.vnode.Fetch.future(
        request, metadata=wire.md, timeout=HOLD_MS
    )
    return future


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def test_held_polls_are_bounded_per_session_and_freed_when_they_end(
    limited: ServerProcess,
) -> None:
    with UserWire(limited.address) as wire:
        first, second = poll_holding(wire), poll_holding(wire)
        code, error, message = refusal(lambda: poll_holding(wire).result())
        assert (code, error) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LimitExceeded")
        assert "--max-streams-per-session is 2" in message
        # streams of the session are counted together: an Execute is refused too
        code, _, message = refusal(lambda: wire.execute("SHOW DATABASES"))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        first.cancel()

        def frees() -> bool:
            try:
                wire.execute("SELECT 1")
            except grpc.RpcError:
                return False
            return True

        wait_until(frees)  # the cancelled poll's slot came back
        assert not second.done()
        second.cancel()


def test_streams_are_bounded_per_user_over_its_sessions(limited: ServerProcess) -> None:
    with UserWire(limited.address) as one, UserWire(limited.address) as two:
        held = [poll_holding(one), poll_holding(one), poll_holding(two)]
        code, error, message = refusal(lambda: poll_holding(two).result())
        assert (code, error) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "LimitExceeded")
        assert "user root already has 3" in message
        with connect(limited.address) as conn:  # nothing else is affected: a unary call
            assert conn.execute("INSERT INTO power.d1 USING power.meters TAGS ('x', 1) "
                                "VALUES (NOW, 1.0, 1, 0.5)").affected_rows == 1  # fmt: skip
        for future in held:
            future.cancel()


def test_polls_on_a_consume_stream_take_slots_of_their_session(limited: ServerProcess) -> None:
    """The stream takes one slot and each poll waiting on it another: with two per
    session, the stream's second poll is refused (that poll only) and the first goes on."""
    with UserWire(limited.address) as wire:
        group = f"g{time.monotonic_ns()}"
        joined = wire.subscribe(group, ["t1"])
        assignment = wire.assignment(joined.consumer_id)
        requests: queue.Queue[pb.ConsumeRequest | None] = queue.Queue()
        answers = wire.vnode.Consume(iter(requests.get, None), metadata=wire.md)
        for ticket, part in enumerate(assignment.assignments[:2], start=1):
            poll = pb.PollRequest(
                consumer_id=joined.consumer_id, group_id=group, topic="t1",
                vgroup=part.vgroup, epoch=assignment.epoch, position=part.end,
                max_wait_ms=HOLD_MS,
            )  # fmt: skip
            requests.put(pb.ConsumeRequest(ticket=ticket, poll=poll))
        refused = next(answers)
        assert refused.ticket == 2
        err = from_call_status(refused.error)
        assert isinstance(err, LimitExceeded)
        assert "--max-streams-per-session is 2" in str(err)
        requests.put(pb.ConsumeRequest(ticket=1, cancel=True))
        requests.put(None)  # half-closed with nothing open: the stream ends
        assert list(answers) == []
