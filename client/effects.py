"""The contract between the consumer's sans-IO core (core.py) and its two front
ends (consumer.py on grpc threads, aio.py on grpc.aio): the effects a flow yields, what
each one answers, and `Stepper`, which walks a flow one effect at a time.

A *flow* is a generator: it yields an effect, the front end performs it with its own
I/O and sends back the answer, or throws in the `sqltopic.Error` it raised. So every
protocol decision lives once, in the core, and a front end is only a few lines of I/O.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, TypeVar

from sqltopic.client.message import Empty, Message, TopicPartition, message_from_frames
from sqltopic.errors import Error
from sqltopic.proto.arrow_ipc import MESSAGE_OPTIONS
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

T = TypeVar("T")
Service = Literal["session", "mnode", "vnode"]
Metadata = tuple[tuple[str, str], ...]
# Unary calls to the mnode and vnodes answer at once; a dead server still fails them.
RPC_TIMEOUT_S = 30.0
# gRPC backs off reconnecting up to 2 minutes by default; a consumer whose server
# restarts should be back within seconds of it.
MAX_RECONNECT_BACKOFF_MS = 2_000
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    *MESSAGE_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
]
# A cluster's dnode that restarted serves again about a second after its process starts:
# its consumers retry every half second at most, so they receive within the 3 s
# of the restart (a 2 s backoff measured 2.75-3.46 s; docs/performance.md). A few
# reconnect attempts a second to a dead dnode cost nothing.
MAX_DNODE_RECONNECT_BACKOFF_MS = 500
DNODE_CHANNEL_OPTIONS: list[tuple[str, int]] = [
    *CHANNEL_OPTIONS[:-1],
    ("grpc.max_reconnect_backoff_ms", MAX_DNODE_RECONNECT_BACKOFF_MS),
]


def channel_options(endpoint: str) -> list[tuple[str, int]]:
    """The options of a consumer's channel to `endpoint` ("": its server or mnode)."""
    return DNODE_CHANNEL_OPTIONS if endpoint else CHANNEL_OPTIONS


@dataclass(frozen=True)
class Rpc:
    """Call `service.method(request)` at `endpoint` ("" = the configured server); answers
    the response, or raises the sqltopic.Error the call failed with."""

    service: Service
    method: str
    request: Any
    endpoint: str = ""
    metadata: Metadata = ()
    timeout: float = RPC_TIMEOUT_S


@dataclass(frozen=True)
class Fetch:
    """Start `Vnode.Poll(request)` in the background and answer None at once; its
    `Fetched` comes out of a later `Wait`."""

    ticket: int
    topic: str
    database: str
    vgroup: int
    endpoint: str
    request: pb.PollRequest
    metadata: Metadata
    timeout: float
    # > 0: a follow on the endpoint's Consume stream with this window (its answers keep
    # coming as `Fetched` with `open` set until the last); 0: one poll
    follow: int = 0


@dataclass(frozen=True)
class Grant:
    """Let each of these open follows send one more message (one was handed out)."""

    tickets: tuple[int, ...]


@dataclass(frozen=True)
class Cancel:
    """Abandon the background polls with these tickets (their results must not arrive)."""

    tickets: tuple[int, ...]


@dataclass(frozen=True)
class Wait:
    """Answer the next `Fetched`, or None after `seconds` (None: no limit) or a `Wake`."""

    seconds: float | None


@dataclass(frozen=True)
class Sleep:
    """Pause `seconds`, then answer None."""

    seconds: float


@dataclass(frozen=True)
class Wake:
    """Make a pending `Wait` answer None now (the heartbeat changed what a poll must do)."""


@dataclass(frozen=True)
class Spawn:
    """Run `flow` on its own and answer None at once: the flow that yields it goes on
    without waiting for it (a poll does not wait for its periodic auto-commit)."""

    flow: Flow[None]


RebalanceKind = Literal["assign", "revoke", "lost"]


@dataclass(frozen=True)
class Notify:
    """Tell the application that vgroups were assigned, are being revoked (still held:
    it may commit them) or were lost (already gone). The front end calls the matching
    `subscribe(on_assign=, on_revoke=, on_lost=)` callback, if any, and answers None, or
    the exception the callback raised (the core raises it once its state is whole)."""

    kind: RebalanceKind
    parts: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class Fetched:
    """What a background poll brought: a message, an empty answer, or its error."""

    ticket: int
    result: Message | Empty | Error
    # the consumer's epoch at the mnode, as the vnode saw it when answering (0: unknown)
    epoch: int = 0
    # a follow's answer after which its ticket stays open (more answers will come)
    open: bool = False


Effect = Rpc | Fetch | Grant | Cancel | Wait | Sleep | Wake | Notify | Spawn
Flow = Generator[Effect, Any, T]


class Stepper(Generic[T]):
    """Walks a flow: `next()` is the effect to perform (None once the flow returned its
    `value`); `answer()` or `fail()` gives the outcome of the effect just performed."""

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self._answer: Any = None
        self._error: Error | None = None
        self.value: T

    def next(self) -> Effect | None:
        answer, error = self._answer, self._error
        self._answer = self._error = None
        try:
            if error is not None:
                return self._flow.throw(error)
            return self._flow.send(answer)
        except StopIteration as stop:
            self.value = stop.value
            return None

    def answer(self, value: Any) -> None:
        self._answer = value

    def fail(self, error: Error) -> None:
        self._error = error


def fetched(fetch: Fetch, frames: list[pb.PollResponse]) -> Fetched:
    """The Fetched of a poll whose answer arrived as `frames`."""
    try:
        message = message_from_frames(fetch.topic, fetch.database, fetch.vgroup, frames)
    except Exception as exc:  # a malformed answer fails this poll, not the consumer
        return failed(fetch, exc)
    return Fetched(fetch.ticket, message, frames[0].epoch if frames else 0)


def followed(fetch: Fetch, answer: pb.PollResponse | Exception, still_open: bool) -> Fetched:
    """The Fetched of one answer of a follow (`still_open`: more will come)."""
    if isinstance(answer, Exception):
        return failed(fetch, answer)
    done = fetched(fetch, [answer])
    return replace(done, open=still_open and not isinstance(done.result, Error))


def failed(fetch: Fetch, exc: BaseException) -> Fetched:
    """The Fetched of a poll that raised `exc`."""
    if not isinstance(exc, Error):
        where = f"poll of topic {fetch.topic} vgroup {fetch.vgroup}"
        exc = Error(f"{where} failed: {type(exc).__name__}: {exc}")
    return Fetched(fetch.ticket, exc)
