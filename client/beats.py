"""Heartbeats of a process's consumers, sent together (`Mnode.Heartbeats`).

A consumer's heartbeat is a unary call every `heartbeat.interval.ms`; a server pays
about the same for a call whatever it carries, so a process with hundreds of consumers
would keep the server busy with heartbeats alone. Consumers therefore beat at aligned
instants (multiples of their interval on the machine's monotonic clock, shifted by a
per-process phase), and the beats of one process's consumers of one server that meet
within `GATHER_S` go in one call. Each
beat carries its own session token and gets its own answer (or error), exactly what its
own `Heartbeat` would have got. A server without the method (UNIMPLEMENTED) is sent each
beat alone from then on.

`BeatPool` serves the thread-based consumer, `AioBeatPool` the asyncio one (one per event
loop); the rest is shared.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sqltopic.client.effects import Metadata
from sqltopic.client.state import phase_at
from sqltopic.errors import Error, ServerUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_call_status

Send = Callable[[pb.HeartbeatsRequest], pb.HeartbeatsResponse]
AioSend = Callable[[pb.HeartbeatsRequest], Awaitable[pb.HeartbeatsResponse]]
Outcome = pb.HeartbeatResponse | Error | None  # None: the server cannot batch

# Aligned beats of one process arrive within a few ms of each other (thread and task
# wake-ups); waiting this long gathers them, and delays a heartbeat by nothing that
# matters against a session timeout of seconds.
GATHER_S = 0.02
# Beats per call: far below the server's 10,000, so one call stays a small message.
MAX_BEATS_PER_CALL = 1_000
# A beat's answer comes with its call (which has the unary deadline); this bounds the
# wait of a beat whose call was made by another consumer.
ANSWER_WAIT_S = 60.0


class Unbatched(Exception):
    """The server has no Mnode.Heartbeats (UNIMPLEMENTED): beat alone."""


def aligned_delay(period_s: float, now: float | None = None) -> float:
    """Seconds until the next instant of this process's phase of `period_s` on the
    monotonic clock: a process's consumers with the same interval beat at the same
    instants, so their beats meet, and other processes' beats at other instants, so a
    server does not get every process's beats at once."""
    now = time.monotonic() if now is None else now
    return phase_at(now, period_s) - now


def token_of(metadata: Metadata) -> str:
    """The bearer token of a call's metadata ("" without one)."""
    for key, value in metadata:
        if key == "authorization" and value.startswith("Bearer "):
            return value[len("Bearer ") :]
    return ""


def request_of(beats: Sequence[tuple[pb.HeartbeatRequest, str]]) -> pb.HeartbeatsRequest:
    return pb.HeartbeatsRequest(
        beats=[pb.Beat(token=token, heartbeat=request) for request, token in beats]
    )


def outcomes(count: int, response: pb.HeartbeatsResponse) -> list[Outcome]:
    """Each beat's answer, or its error; a response of the wrong length fails them all."""
    if len(response.results) != count:
        err = ServerUnavailable(
            f"Heartbeats answered {len(response.results)} results for {count} beats"
        )
        return [err] * count
    return [_outcome(result) for result in response.results]


def _outcome(result: pb.BeatResult) -> pb.HeartbeatResponse | Error:
    if result.WhichOneof("result") == "error":
        return from_call_status(result.error)
    return result.heartbeat


def chunks(count: int) -> list[range]:
    return [
        range(i, min(i + MAX_BEATS_PER_CALL, count)) for i in range(0, count, MAX_BEATS_PER_CALL)
    ]


def failure(exc: Exception) -> Error:
    """What the beats of a round whose call failed answer: its sqltopic error, or (a
    channel closed under the call by its consumer) a transient one."""
    if isinstance(exc, Error):
        return exc
    return ServerUnavailable(f"heartbeat call failed: {type(exc).__name__}: {exc}")


def answer(outcome: Outcome) -> pb.HeartbeatResponse | None:
    """A beat's answer, or None (send it alone); raises the beat's error."""
    if isinstance(outcome, Error):
        raise outcome
    return outcome


class _Pool:
    """What both pools share: whether the server batches, what their calls carried."""

    def __init__(self) -> None:
        self.batched = True  # until the server answers UNIMPLEMENTED
        self.calls = self.sent = 0  # Heartbeats calls made, beats they carried

    def _outcomes_of(self, count: int, got: pb.HeartbeatsResponse | Exception) -> list[Outcome]:
        """Each beat's outcome from its call's response or failure."""
        if isinstance(got, Unbatched):
            self.batched = False
            return [None] * count
        if isinstance(got, Exception):
            return [failure(got)] * count
        return outcomes(count, got)


# --- threads ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Beat:
    request: pb.HeartbeatRequest
    token: str
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome = None


class BeatPool(_Pool):
    """The beats of one process's thread-based consumers of one server. The first beat
    of a round waits `GATHER_S`, then sends what gathered (with its consumer's `send`);
    the others wait for their answers."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._gathering: list[_Beat] | None = None

    def beat(
        self, request: pb.HeartbeatRequest, metadata: Metadata, send: Send
    ) -> pb.HeartbeatResponse | None:
        """The beat's answer (None: send it alone); raises its error."""
        mine = _Beat(request, token_of(metadata))
        with self._lock:
            lead = self._gathering is None
            gathering = self._gathering = [] if lead else self._gathering
            assert gathering is not None
            gathering.append(mine)
        if lead:
            time.sleep(GATHER_S)
            with self._lock:
                batch, self._gathering = gathering, None
            self._settle(batch, send)
        if not mine.done.wait(ANSWER_WAIT_S):
            raise ServerUnavailable(f"heartbeat: no answer within {ANSWER_WAIT_S:g} s")
        return answer(mine.outcome)

    def _settle(self, batch: list[_Beat], send: Send) -> None:
        for part in chunks(len(batch)):
            beats = [batch[i] for i in part]
            self.calls, self.sent = self.calls + 1, self.sent + len(beats)
            try:
                got: pb.HeartbeatsResponse | Exception = send(
                    request_of([(b.request, b.token) for b in beats])
                )
            except Exception as exc:  # every beat of the round answers
                got = exc
            for beat, outcome in zip(beats, self._outcomes_of(len(beats), got), strict=True):
                beat.outcome = outcome
                beat.done.set()


_POOLS: weakref.WeakValueDictionary[str, BeatPool] = weakref.WeakValueDictionary()
_POOLS_LOCK = threading.Lock()


def pool_for(address: str) -> BeatPool:
    """This process's pool for the server at `address` (kept alive by its consumers)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(address)
        if pool is None:
            pool = _POOLS[address] = BeatPool()
        return pool


# --- asyncio ---------------------------------------------------------------------------


@dataclass(eq=False)
class _AioBeat:
    request: pb.HeartbeatRequest
    token: str
    future: asyncio.Future[Outcome]


class AioBeatPool(_Pool):
    """BeatPool for the consumers of one event loop. The round's call runs in a task of
    its own, so a consumer closed meanwhile (its task cancelled) leaves the others their
    answers."""

    def __init__(self) -> None:
        super().__init__()
        self._gathering: list[_AioBeat] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def beat(
        self, request: pb.HeartbeatRequest, metadata: Metadata, send: AioSend
    ) -> pb.HeartbeatResponse | None:
        loop = asyncio.get_running_loop()
        mine = _AioBeat(request, token_of(metadata), loop.create_future())
        if self._gathering is None:
            self._gathering = []
            task = loop.create_task(self._round(send))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._gathering.append(mine)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(mine.future), ANSWER_WAIT_S)
        except TimeoutError:
            raise ServerUnavailable(f"heartbeat: no answer within {ANSWER_WAIT_S:g} s") from None
        return answer(outcome)

    async def _round(self, send: AioSend) -> None:
        await asyncio.sleep(GATHER_S)
        batch, self._gathering = self._gathering or [], None
        for part in chunks(len(batch)):
            beats = [batch[i] for i in part]
            self.calls, self.sent = self.calls + 1, self.sent + len(beats)
            try:
                got: pb.HeartbeatsResponse | Exception = await send(
                    request_of([(b.request, b.token) for b in beats])
                )
            except Exception as exc:  # every beat of the round answers
                got = exc
            for beat, outcome in zip(beats, self._outcomes_of(len(beats), got), strict=True):
                if not beat.future.done():
                    beat.future.set_result(outcome)


_AIO_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AioBeatPool]] = (
    weakref.WeakKeyDictionary()
)


def aio_pool_for(address: str) -> AioBeatPool:
    """The running loop's pool for the server at `address`."""
    pools = _AIO_POOLS.setdefault(asyncio.get_running_loop(), {})
    pool = pools.get(address)
    if pool is None:
        pool = pools[address] = AioBeatPool()
    return pool
