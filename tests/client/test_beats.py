"""The process's heartbeat pools (client/beats.py): aligned beats, gathered into one
Mnode.Heartbeats call, each answered with its own result; and against a real server,
consumers of one process (threads and asyncio) beating together."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sqltopic import aio
from sqltopic.client import Connection, beats
from sqltopic.client.consumer import Consumer
from sqltopic.client.effects import Metadata
from sqltopic.client.state import PROCESS_PHASE_STEP
from sqltopic.errors import AuthenticationFailed, Error, ServerUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import call_status
from tests.client.support import DEADLINE_S, config
from tests.live_server import ServerProcess

# Consumers of the end-to-end tests beat at the shortest interval allowed.
BEAT_MS = 1_000
BEATS = 12


def metadata(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


class Server:
    """What a server would answer a Heartbeats call: beat `i` of consumer `i` gets epoch
    `i`; a token "bad" fails its beat."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.lock = threading.Lock()

    def answer(self, request: pb.HeartbeatsRequest) -> pb.HeartbeatsResponse:
        with self.lock:
            self.calls.append([b.heartbeat.consumer_id for b in request.beats])
        results = []
        for beat in request.beats:
            if beat.token == "bad":
                err = AuthenticationFailed("unknown or expired token")
                results.append(pb.BeatResult(error=call_status(err)))
            else:
                response = pb.HeartbeatResponse(epoch=beat.heartbeat.consumer_id)
                results.append(pb.BeatResult(heartbeat=response))
        return pb.HeartbeatsResponse(results=results)


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """`work(i)` on `count` threads started together; each one's value or exception."""
    results: list[Any] = [None] * count
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    return results


def test_aligned_delay_lands_on_the_process_phase_of_the_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.getpid", lambda: 1000)  # phase: 0.0339887 of the period
    phase = (1000 * PROCESS_PHASE_STEP) % 1.0
    assert beats.aligned_delay(3.0, now=7.5) == pytest.approx(1.5 + 3.0 * phase)
    assert beats.aligned_delay(3.0, now=9.0 + 3.0 * phase) == pytest.approx(3.0)
    for now in (0.1, 5.0, 1234.567):
        delay = beats.aligned_delay(2.0, now=now)
        assert 0.0 < delay <= 2.0
        assert (now + delay) % 2.0 == pytest.approx(2.0 * phase, abs=1e-9)
    monkeypatch.setattr("os.getpid", lambda: 1001)  # another process: other instants
    assert (7.5 + beats.aligned_delay(3.0, now=7.5)) % 3.0 == pytest.approx(
        3.0 * ((1001 * PROCESS_PHASE_STEP) % 1.0)
    )


def test_token_of_reads_the_bearer_token() -> None:
    assert beats.token_of(metadata("abc")) == "abc"
    assert beats.token_of((("x", "y"),)) == ""


def test_beats_that_meet_go_in_one_call_and_each_gets_its_own_answer() -> None:
    server, pool = Server(), beats.BeatPool()

    def beat(i: int) -> Any:
        token = "bad" if i == 3 else f"t{i}"
        return pool.beat(pb.HeartbeatRequest(consumer_id=i), metadata(token), server.answer)

    answers = in_threads(BEATS, beat)
    assert sum(len(call) for call in server.calls) == BEATS
    assert len(server.calls) < BEATS  # gathered: fewer calls than beats
    assert (pool.calls, pool.sent) == (len(server.calls), BEATS)
    for i, answer in enumerate(answers):
        if i == 3:
            assert isinstance(answer, AuthenticationFailed)
        else:
            assert answer == pb.HeartbeatResponse(epoch=i)


def test_a_failed_call_fails_each_beat_of_it() -> None:
    pool = beats.BeatPool()

    def send(request: pb.HeartbeatsRequest) -> pb.HeartbeatsResponse:
        raise ValueError("Cannot invoke RPC on closed channel!")

    answers = in_threads(4, lambda i: pool.beat(pb.HeartbeatRequest(), metadata("t"), send))
    assert all(isinstance(a, ServerUnavailable) for a in answers)
    assert "closed channel" in str(answers[0])
    assert pool.batched


def test_a_server_without_the_method_makes_every_beat_go_alone() -> None:
    pool = beats.BeatPool()

    def send(request: pb.HeartbeatsRequest) -> pb.HeartbeatsResponse:
        raise beats.Unbatched

    assert pool.beat(pb.HeartbeatRequest(), metadata("t"), send) is None
    assert not pool.batched


def test_an_answer_of_the_wrong_length_fails_the_beats() -> None:
    answers = beats.outcomes(2, pb.HeartbeatsResponse(results=[pb.BeatResult()]))
    assert all(isinstance(a, ServerUnavailable) for a in answers)


def test_the_asyncio_pool_gathers_as_well() -> None:
    server = Server()

    async def run() -> tuple[list[Any], beats.AioBeatPool]:
        pool = beats.AioBeatPool()

        async def send(request: pb.HeartbeatsRequest) -> pb.HeartbeatsResponse:
            return server.answer(request)

        async def beat(i: int) -> Any:
            token = "bad" if i == 0 else "t"
            request = pb.HeartbeatRequest(consumer_id=i)
            try:
                return await pool.beat(request, metadata(token), send)
            except Error as err:
                return err

        return list(await asyncio.gather(*(beat(i) for i in range(BEATS)))), pool

    answers, pool = asyncio.run(run())
    assert server.calls == [list(range(BEATS))]
    assert (pool.calls, pool.sent) == (1, BEATS)
    assert isinstance(answers[0], AuthenticationFailed)
    assert answers[1:] == [pb.HeartbeatResponse(epoch=i) for i in range(1, BEATS)]


# --- against a real server -------------------------------------------------------------


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def members(conn: Connection) -> set[str]:
    return {r["consumer_id"] for r in conn.query("SHOW CONSUMERS").to_pylist()}


def test_consumers_of_one_process_beat_together(power: Connection, server: ServerProcess) -> None:
    settings = {"heartbeat.interval.ms": BEAT_MS, "session.timeout.ms": 6_000}
    consumers = [Consumer(config(server.address, f"g{i}", **settings)) for i in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe(["overvoltage"])
        pool = beats.pool_for(server.address)
        # beats that met shared a call (waited for: a loaded machine may split a round)
        wait_until(lambda: pool.sent - pool.calls >= len(consumers), "beats sharing calls")
        # they are alive members, and still consume
        ids = {str(c._core.consumer_id) for c in consumers}
        assert ids <= members(power)
        assert all(c.poll(DEADLINE_S) is not None for c in consumers)
    finally:
        for consumer in consumers:
            consumer.close()
    assert members(power) == set()


def test_asyncio_consumers_of_one_loop_beat_together(
    power: Connection, server: ServerProcess
) -> None:
    settings = {"heartbeat.interval.ms": BEAT_MS, "session.timeout.ms": 6_000}

    async def run() -> None:
        consumers = [aio.Consumer(config(server.address, f"a{i}", **settings)) for i in range(3)]
        try:
            for consumer in consumers:
                await consumer.subscribe(["overvoltage"])
            pool = beats.aio_pool_for(server.address)
            deadline = time.monotonic() + DEADLINE_S
            while pool.sent - pool.calls < len(consumers):
                assert time.monotonic() < deadline, "timed out waiting for shared calls"
                await asyncio.sleep(0.05)
            ids = {str(c._core.consumer_id) for c in consumers}
            assert ids <= members(power)
            for consumer in consumers:
                assert await consumer.poll(DEADLINE_S) is not None
        finally:
            for consumer in consumers:
                await consumer.close()

    asyncio.run(run())
    assert members(power) == set()


def test_a_heartbeat_cut_short_by_close_is_not_a_warning(
    power: Connection, server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """close() stops the heartbeat thread first; a beat already out fails on the closed
    consumer's channels, and that is the close, not a failure to report (the CLI's
    `consume` printed it on Ctrl-C)."""
    power.execute("CREATE TOPIC quiet AS SELECT * FROM power.meters")
    consumer = Consumer(config(server.address, "quiet", heartbeat_interval_ms=BEAT_MS))
    try:
        consumer.subscribe(["quiet"])
        cut = threading.Event()
        run = consumer._run

        def closing(effect: Any) -> Any:
            if threading.current_thread().name == "sqltopic-heartbeat":
                consumer._stop.set()  # close() began while this beat was out
                cut.set()
                raise Error("this consumer is closed; create a new one")
            return run(effect)

        consumer._run = closing  # type: ignore[method-assign, assignment]
        with caplog.at_level(logging.WARNING):
            assert cut.wait(DEADLINE_S)
            beating = consumer._heartbeat
            assert beating is not None
            beating.join(DEADLINE_S)
        assert not beating.is_alive()
        assert "heartbeat failed" not in caplog.text
    finally:
        consumer._run = run  # type: ignore[method-assign]
        consumer.close()
