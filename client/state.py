"""The consumer's state without I/O: the assigned vgroups (`Held`), the session and
membership fields, and the helpers every flow uses (calls with relogin, retries while a
vnode catches up, requests). Flows build on it in layers: offsets.py (commit,
committed, seek), group.py (membership, heartbeat, assignment) and
core.py (polling), which `Consumer` and `aio.Consumer` drive.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from sqltopic.client.config import ConsumerConfig, offsets_group_of
from sqltopic.client.connection import CLIENT_NAME
from sqltopic.client.effects import (
    RPC_TIMEOUT_S,
    Cancel,
    Flow,
    Metadata,
    Rpc,
    Service,
    Sleep,
)
from sqltopic.client.message import Empty, Message
from sqltopic.errors import (
    AuthenticationFailed,
    ConfigError,
    Error,
    RebalanceInProgress,
    ServerUnavailable,
    WalClosedError,
)
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

log = logging.getLogger("sqltopic.consumer")

Key = tuple[str, int]  # (topic, vgroup)
X = TypeVar("X")
R = TypeVar("R")
# Where in a periodic interval (auto-commits, heartbeats) a process acts, as a fraction
# of it per process id: the golden ratio's fraction spreads consecutive ids evenly.
PROCESS_PHASE_STEP = 0.6180339887
# A process's consumers auto-commit in this many cohorts spread evenly over the interval,
# each new consumer joining the next: a cohort's commits still go as one message on
# their shared stream and share the server's transactions, while the commits and answers
# a process handles at one instant are a fifth of its consumers' (with 250 at once, that
# process's messages arrived 50-120 ms late, the others' 15-30: docs/performance.md §9.20).
AUTO_COMMIT_COHORTS = 5
# The cohort of the next consumer made in this process.
_commit_cohorts = itertools.count()
# A vnode that has not yet learnt the newest assignment catches up within moments.
REBALANCE_RETRY_S = 0.2
# Tries of a call that keeps answering RebalanceInProgress before its error is raised.
REBALANCE_ATTEMPTS = 10
# While the mnode rebalances, ask for the assignment this often rather than wait for the
# next heartbeat: a hand-over completes in ~0.1 s, and the calls stop once READY.
ASSIGNMENT_RECHECK_S = 0.2
# Errors that pass: a vnode catching up, a server restarting or out of reach.
TRANSIENT: tuple[type[Error], ...] = (RebalanceInProgress, ServerUnavailable, WalClosedError)
RESETS = {
    "earliest": pb.OFFSET_RESET_EARLIEST,
    "latest": pb.OFFSET_RESET_LATEST,
    "none": pb.OFFSET_RESET_NONE,
}
ACQUIRE_MODES = {
    None: pb.SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED,
    "batch_optimized": pb.SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED,
    "record_limit": pb.SHARE_ACQUIRE_MODE_RECORD_LIMIT,
}


@dataclass
class RowIds:
    """Rows of one vgroup to settle (shared groups), as the requests name them: parts
    of versions and indexes, each two sequences of one length. A part is often a
    message's ids as the answer carried them: they go into the request as they are,
    never read into Python ints (what a tuple per row cost)."""

    parts: list[tuple[Sequence[int], Sequence[int]]] = field(default_factory=list)

    def add(self, versions: Sequence[int], indexes: Sequence[int]) -> None:
        if len(versions):
            self.parts.append((versions, indexes))

    def extend(self, other: RowIds) -> None:
        self.parts += other.parts

    def __len__(self) -> int:
        return sum(len(versions) for versions, _ in self.parts)

    def into(self, versions: Any, indexes: Any) -> None:
        """Append the rows to a request's two repeated fields."""
        for v, i in self.parts:
            if hasattr(v, "MergeFrom"):  # a repeated field of an answer: copied whole
                versions.MergeFrom(v)
                indexes.MergeFrom(i)
            else:
                versions.extend(v)
                indexes.extend(i)

    def lists(self) -> tuple[list[int], list[int]]:
        versions: list[int] = []
        indexes: list[int] = []
        for v, i in self.parts:
            versions += v
            indexes += i
        return versions, indexes


@dataclass
class Held:
    """One assigned vgroup: where it is served, the position, and its one poll."""

    topic: str
    database: str
    vgroup: int
    endpoint: str
    position: int | None = None
    rows: int = 0  # rows handed to the application since the vgroup was assigned
    ticket: int | None = None  # the poll in flight
    ready: Message | None = None  # fetched, not yet handed out
    # a follow's answers that arrived behind `ready` (empties and messages, in order)
    more: deque[Message | Empty] = field(default_factory=deque)
    following: bool = False  # `ticket` is a follow: it stays open across answers
    # its last follow met a message over one frame: the next poll is a single one
    # (the front end reads that message with a streamed Poll)
    no_follow: bool = False
    retry_at: float = 0.0  # no poll before this (after RebalanceInProgress/ConsumerFenced)
    fenced: bool = False  # a vnode refused us here: if it moves on, it is lost, not revoked


def phase_at(now: float, period: float, cohort: int = 0, cohorts: int = 1) -> float:
    """The first instant after `now` at this process's phase of `period` seconds (on the
    clock `now` is read from): what a process's consumers do periodically, they do at
    the same instants, and other processes at others. With `cohorts`, the period is cut
    into that many equal parts, the process's phase falls within each, and `cohort`
    says which part's."""
    phase = ((os.getpid() * PROCESS_PHASE_STEP) % 1.0 + cohort) / cohorts * period
    return now + period - (now - phase) % period


class CoreState:
    """One consumer's state, and the helpers of its flows (see consumer_effects)."""

    def __init__(self, config: ConsumerConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.clock = clock
        self.token = ""
        # the sessions on a cluster's dnodes, by endpoint: each node keeps its own
        # (docs/protocol.md, "Routing on a cluster")
        self.tokens: dict[str, str] = {}
        self.consumer_id = 0
        # the group polled and committed as: the server's answer to Subscribe (a
        # broadcast consumer's own lane, `group:client`)
        self.offsets_group = offsets_group_of(config)
        self.epoch = 0  # of the assignment in `held`; 0 = none yet
        self.status: int = pb.CONSUMER_STATUS_UNSPECIFIED
        self.topics: list[str] = []
        self.held: dict[Key, Held] = {}
        self.heartbeat_s = config.heartbeat_interval_ms / 1000
        self.need_login = self.need_refresh = self.need_rejoin = False
        self.topic_errors: dict[str, Error] = {}
        self.polled = False
        # the progress the mnode took with our last heartbeat, when it takes changes
        # only: the next one lists only what differs (None: it lists every vgroup)
        self.reported: dict[Key, tuple[int | None, int]] | None = None
        self.closed = False
        self.paused: set[Key] = set()  # not fetched until resumed (positions kept)
        self.announced: set[Key] = set()  # told to the application by an "assign" Notify
        self.in_callback = False  # a rebalance callback runs (from within a flow)
        self.callback_error: Exception | None = None  # what a callback raised, to re-raise
        # shared groups: messages handed out with rows not acknowledged yet (acks.py)
        self.unsettled: dict[int, Any] = {}
        # and rows accepted that the vgroup's next poll carries (implicit acknowledgement)
        self.pending_acks: dict[Key, RowIds] = {}
        # and those a poll in flight carries, by ticket: its answer means the vnode
        # applied them; without one (cancelled, closing) they are sent again
        self.acks_in_flight: dict[int, tuple[Key, RowIds]] = {}
        self._tickets = itertools.count(1)
        self._in_flight: dict[int, Key] = {}
        # the follow window the front end offers (0: it polls once per message), and
        # the grants owed to follows for messages handed out, by ticket
        self.follow_window = 0
        self.grants: dict[int, int] = {}
        self._committed: dict[Key, int] = {}  # last stored by us (auto-commit skips these)
        self.auto_committing = False  # a periodic auto-commit runs in the background
        self._turn = 0  # round-robin start among ready vgroups
        self._commit_cohort = next(_commit_cohorts) % AUTO_COMMIT_COHORTS
        self._commit_at = self.next_commit_at()
        self._recheck_at = 0.0
        self._membership_at = 0.0  # no mnode calls from poll before this (server away)

    def next_commit_at(self) -> float:
        """When the next periodic auto-commit is due: the next instant of this process's
        phase of the interval on the clock (the machine's monotonic clock), moved on by
        the consumer's cohort (AUTO_COMMIT_COHORTS). The auto-commits of a cohort then
        come together, as one message on their shared stream, and the server stores
        them in one group (commits spread over the interval cost it a message and a
        transaction per vnode each: docs/performance.md §9.10); processes keep apart,
        so a server does not get every process's commits at the same instant."""
        now, period = self.clock(), self.config.auto_commit_interval_ms / 1000
        if period <= 0:
            return now
        return phase_at(now, period, self._commit_cohort, AUTO_COMMIT_COHORTS)

    @property
    def metadata(self) -> Metadata:
        return (("authorization", f"Bearer {self.token}"),)

    def metadata_at(self, endpoint: str) -> Metadata:
        """The call metadata for `endpoint` ("": the server subscribed to); empty
        before `login_at` it."""
        if not endpoint:
            return self.metadata
        token = self.tokens.get(endpoint)
        return (("authorization", f"Bearer {token}"),) if token else ()

    def login(self) -> Flow[None]:
        """A new session; its token goes with every later call."""
        answer: pb.LoginResponse = yield Rpc("session", "Login", self._login_request())
        self.token = answer.token
        self.need_login = False

    def login_at(self, endpoint: str) -> Flow[None]:
        """A session on a cluster's dnode (once: `tokens` keeps it until it fails)."""
        if not endpoint:
            if self.need_login or not self.token:
                yield from self.login()
            return
        if endpoint in self.tokens:
            return
        answer: pb.LoginResponse = yield Rpc("session", "Login", self._login_request(), endpoint)
        self.tokens[endpoint] = answer.token

    def _login_request(self) -> pb.LoginRequest:
        c = self.config
        return pb.LoginRequest(user=c.user, password=c.password, client_name=CLIENT_NAME)

    def check_open(self) -> None:
        if self.closed:
            raise Error("this consumer is closed; create a new one")

    def progress(self, keys: Iterable[Key] | None = None) -> list[pb.VgroupProgress]:
        """Every held vgroup's progress, or those of `keys`."""
        held = self.held.values() if keys is None else (self.held[key] for key in keys)
        return [
            pb.VgroupProgress(topic=h.topic, vgroup=h.vgroup, position=h.position, rows=h.rows)
            for h in held
        ]

    def positions(self, keys: Iterable[Key]) -> list[pb.TopicVgroupOffset]:
        positions = [(key, self.held[key].position) for key in keys if key in self.held]
        return [offset_of(*key, position) for key, position in positions if position is not None]

    def _position_of(self, key: Key) -> int | None:
        held = self.held.get(key)
        return held.position if held is not None else None

    def _drop(self, keys: Iterable[Key]) -> Flow[None]:
        tickets = []
        for key in keys:
            held = self.held.pop(key)
            self._committed.pop(key, None)
            self.paused.discard(key)
            self.announced.discard(key)
            if held.ticket is not None:
                tickets.append(held.ticket)
                self._in_flight.pop(held.ticket, None)
                self.grants.pop(held.ticket, None)
            held.more.clear()
        if tickets:
            yield Cancel(tuple(tickets))

    def _subscribe_request(self, names: list[str]) -> pb.SubscribeRequest:
        c = self.config
        return pb.SubscribeRequest(
            consumer_id=self.consumer_id,
            group_id=c.group_id,
            client_id=c.client_id,
            topics=names,
            auto_offset_reset=RESETS[c.auto_offset_reset],
            enable_auto_commit=c.enable_auto_commit,
            auto_commit_interval_ms=c.auto_commit_interval_ms,
            session_timeout_ms=c.session_timeout_ms,
            max_poll_interval_ms=c.max_poll_interval_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms,
            msg_with_table_name=c.msg_with_table_name,
            # the default goes as "" so that servers before group types accept it
            group_type="" if c.group_type == "vgroup" else c.group_type,
            ack_timeout_ms=c.ack_timeout_ms,
            max_deliveries=c.max_deliveries,
            dead_letter_table=c.dead_letter_table,
            group_key=c.group_key,
        )

    def _poll_request(self, held: Held, acks: RowIds | None = None) -> pb.PollRequest:
        """The poll of `held`'s vgroup, carrying `acks`: rows accepted there meanwhile."""
        c = self.config
        request = pb.PollRequest(
            consumer_id=self.consumer_id,
            group_id=self.offsets_group,
            topic=held.topic,
            vgroup=held.vgroup,
            epoch=self.epoch,
            position=held.position,
            auto_offset_reset=RESETS[c.auto_offset_reset],
            max_rows=c.max_poll_rows or 0,
            min_rows=c.min_poll_rows,
            max_wait_ms=c.fetch_max_wait_ms,
            with_table_name=c.msg_with_table_name,
            acquire_mode=ACQUIRE_MODES[c.share_acquire_mode],
        )
        if acks is not None:
            acks.into(request.ack_versions, request.ack_indexes)
        return request

    def _by_endpoint(
        self, items: Iterable[X], key: Callable[[X], Key]
    ) -> list[tuple[str, list[X]]]:
        """`items` grouped by the endpoint serving their vgroup ("" = the server)."""
        groups: dict[str, list[X]] = defaultdict(list)
        for item in items:
            held = self.held.get(key(item))
            groups[held.endpoint if held is not None else ""].append(item)
        return list(groups.items())

    def _rpc(
        self,
        service: Service,
        method: str,
        request: object,
        endpoint: str = "",
        timeout: float | None = None,
    ) -> Flow[Any]:
        """One call with our token there (deadline `timeout` s, else RPC_TIMEOUT_S); a
        dead session (its node restarted) logs in once more."""
        if endpoint:
            yield from self.login_at(endpoint)
        call = Rpc(
            service, method, request, endpoint, self.metadata_at(endpoint),
            timeout or RPC_TIMEOUT_S,
        )  # fmt: skip
        try:
            return (yield call)
        except AuthenticationFailed:
            if endpoint:
                self.tokens.pop(endpoint, None)
                yield from self.login_at(endpoint)
            else:
                yield from self.login()
            return (yield replace(call, metadata=self.metadata_at(endpoint)))

    def _retrying(self, call: Callable[[], Flow[R]]) -> Flow[R]:
        """`call()`, again after a short pause while a vnode answers RebalanceInProgress."""
        for _ in range(REBALANCE_ATTEMPTS - 1):
            try:
                return (yield from call())
            except RebalanceInProgress:
                yield Sleep(REBALANCE_RETRY_S)
        return (yield from call())

    def _quietly(self, what: str, flow: Flow[object], level: int = logging.WARNING) -> Flow[bool]:
        """Run `flow`; an error is logged, not raised (close, auto-commit). True if it ran."""
        try:
            yield from flow
        except Error as err:
            log.log(level, "%s failed: %s: %s", what, type(err).__name__, err)
            return False
        return True


def topic_names(topics: Sequence[str]) -> list[str]:
    """The topic list of subscribe(), checked: a list of non-empty names."""
    if isinstance(topics, str) or not isinstance(topics, Sequence):
        raise ConfigError(f"subscribe: {topics!r} is not a list of topic names, e.g. ['t1']")
    for name in topics:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"subscribe: {name!r} in {list(topics)!r} is not a topic name")
    return list(dict.fromkeys(name.strip() for name in topics))


def with_params(names: list[str], params: Mapping[str, Any] | None) -> list[str]:
    """The subscription names of `subscribe(names, params=...)`: a parameterized topic
    is named with its values as a JSON object after `?` (the server checks them and
    answers with the canonical names). With one topic `params` are its values; with
    several, a mapping of topic name to values, for those that take some."""
    if params is None:
        return names
    if not isinstance(params, Mapping):
        raise ConfigError(f"subscribe: params {params!r} is not a mapping of names to values")
    if len(names) == 1:
        return [_bound_name(names[0], params)]
    unknown = [t for t in params if t not in names]
    if unknown or not all(isinstance(v, Mapping) for v in params.values()):
        raise ConfigError(
            f"subscribe: with several topics, params maps a topic of {names} to its values, "
            f'e.g. params={{"{names[0]}": {{"tbname": "d1"}}}}; got {params!r}'
        )
    return [_bound_name(n, params[n]) if n in params else n for n in names]


def _bound_name(topic: str, values: Mapping[str, Any]) -> str:
    try:
        text = json.dumps(dict(values), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"subscribe: the parameters of topic {topic} must be JSON values (numbers, "
            f"strings, booleans, lists of them): {err}"
        ) from None
    return f"{topic}?{text}"


def offset_of(topic: str, vgroup: int, offset: int) -> pb.TopicVgroupOffset:
    return pb.TopicVgroupOffset(topic=topic, vgroup=vgroup, offset=offset)


def one(effect: Rpc) -> Flow[object]:
    """A flow of the single effect `effect` (its answer is the flow's value)."""
    return (yield effect)
