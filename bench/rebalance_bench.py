"""Benchmark of consumer-group rebalancing (issue 5): how fast a group settles when a
consumer joins, leaves gracefully or is SIGKILLed, and whether rows are delivered twice.

A real `sqltopic server` process, a database of 16 vgroups with one child table per
vgroup, a producer process writing one row to every child each PERIOD_S (every row
carries a unique sequence number), and consumers that are real processes (one
interpreter each: no GIL shared), each reporting every message it receives (vgroup,
receive time, sequence numbers) to this process over a pipe. This process watches the
group with SHOW CONSUMERS and SHOW SUBSCRIPTIONS.

* join: a group of 3; a 4th subscribes. leave: one of 4 closes. crash: one of 4 is
  SIGKILLed (session.timeout.ms 6000).
* An event is *settled* (see `Run.settle`) when SHOW SUBSCRIPTIONS names a consumer for
  every vgroup, only live members, each holding 16 // k or ceil(16 / k) of them, and the
  consumer it names for each vgroup has received rows of that vgroup since the event.
  The settle time runs from the event (join: `subscribe()` called in the joiner; leave:
  `close()` called in the leaver; crash: the SIGKILL) to the latest of those first
  receipts. Crash takeover: the same, over the dead consumer's vgroups only.
  An event that does not settle within the deadline counts as the whole deadline, and
  the report says why (each unsettled vgroup, its SHOW row, the owner's own view).
* Duplicates: deliveries of a sequence number already delivered, counted per phase;
  losses: sequence numbers written but never delivered, once the producer stopped.

Variants: every setting at its default (the headline keys), heartbeat.interval.ms 1000
(`_hb1000`), and commit after processing each message instead of auto-commit
(`_manual`). `--json` prints one JSON object on stdout (progress goes to stderr),
otherwise a table; `--quick` is a small smoke run of the default variant.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import random
import statistics
import sys
import threading
import time
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import grpc
import harness
import pyarrow as pa
from harness import Report

from sqltopic.cli.spawn import ServerChild
from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import Error
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core.routing import HASH_SPACE, table_hash

DB = "rb"
VGROUPS = 16
# Root's password: the default is accepted on loopback, where the server listens.
ROOT_PASSWORD = "taosdata"
# The producer writes one row to every child (one per vgroup) this often, so a vgroup
# gets rows every PERIOD_S. Rows written while a vgroup changes hands wait in its WAL, so
# only a hand-over faster than a period waits for the next row. 16 rows per period keep
# the server ~55 % busy on 2 cores (~3.5 ms of its CPU per one-row message, §5.6).
PERIOD_S = 0.1
# Row timestamps are START_MS + seq (the engine benchmark's first timestamp).
START_MS = 1_538_548_685_000
# Sequence numbers of variant i start at i * SEQ_BASE (a topic per variant selects them).
SEQ_BASE = 1_000_000_000
# issue 5: SIGKILLed consumers are detected by their session timeout, set to this.
SESSION_TIMEOUT_MS = 6_000
# Goals (issue 5): join and leave settle p99, crash takeover p99 (session timeout + 2 s).
SETTLE_GOAL_MS = 1_000
TAKEOVER_GOAL_MS = SESSION_TIMEOUT_MS + 2_000
# Group sizes: 3 before a join, 4 before a leave or a crash.
BASE_MEMBERS = 3
# How often the group is looked at with SHOW (two SQL calls each time).
SHOW_POLL_S = 0.1
# One poll call in a consumer process: it looks for commands between polls.
CHILD_POLL_S = 0.05
# Pause between events, uniform in this range (seeded): spreads the events over the
# consumers' heartbeat cycles instead of hitting one phase of them every time.
PAUSE_S = (0.2, 1.2)
# A graceful event settles within seconds; a crash within the session timeout plus the
# server's 2 s timer and a heartbeat; these only stop a hang.
SETTLE_DEADLINE_S = 30.0
CRASH_DEADLINE_S = 60.0
# Starting a Python process that imports grpc and pyarrow and logs in takes seconds.
START_DEADLINE_S = 60.0
# Every row written must arrive once the producer stops; this only stops a hang.
DRAIN_DEADLINE_S = 60.0
# Events that may fail to settle (each counted as taking the whole deadline) before a
# variant stops: one is a finding to report, several mean the group is broken.
MAX_SETTLE_FAILURES = 3
# A consumer answers "state" between two polls, each CHILD_POLL_S.
STATE_DEADLINE_S = 5.0
# Redeliveries described in the report, per phase (the first ones).
MAX_EXAMPLES = 10

log = harness.logger("rebalance_bench")


@dataclass(frozen=True, slots=True)
class Sizes:
    """How many events of each kind each variant measures."""

    rounds: int  # join + leave rounds, default variant
    crash_rounds: int  # SIGKILL rounds, default variant
    variant_rounds: int  # join + leave rounds of each other variant
    variant_crash_rounds: int  # SIGKILL rounds of the heartbeat variant


FULL = Sizes(rounds=20, crash_rounds=20, variant_rounds=10, variant_crash_rounds=10)
QUICK = Sizes(rounds=1, crash_rounds=1, variant_rounds=0, variant_crash_rounds=0)


@dataclass(frozen=True)
class Variant:
    """Consumer settings under test: key suffix, config, commit after each message."""

    suffix: str
    settings: dict[str, str]
    manual: bool
    rounds: int
    crash_rounds: int


def variants(sizes: Sizes) -> list[Variant]:
    """The default settings first (the headline keys), then the other variants."""
    plan = [Variant("", {}, False, sizes.rounds, sizes.crash_rounds)]
    if sizes.variant_rounds:
        plan += [
            Variant("_hb1000", {"heartbeat.interval.ms": "1000"}, False,
                    sizes.variant_rounds, sizes.variant_crash_rounds),
            Variant("_manual", {"enable.auto.commit": "false"}, True, sizes.variant_rounds, 0),
        ]  # fmt: skip
    return plan


# --- the child processes ---------------------------------------------------------------


def run_consumer(address: str, name: str, topic: str, config: dict[str, str], manual: bool,
                 pipe: Pipe) -> None:  # fmt: skip
    """A consumer process: log in, say "ready", subscribe on command, then report every
    message ("rows", vgroup, receive time, sequence numbers) until told to close."""
    try:
        consumer = Consumer({"server": address, "client.id": name} | config)
        pipe.send(("ready", time.monotonic_ns()))
        if pipe.recv() == "subscribe":
            pipe.send(("subscribing", time.monotonic_ns()))
            consumer.subscribe([topic])
            consume(consumer, manual, pipe)
        pipe.send(("closing", time.monotonic_ns()))
        consumer.close()
        pipe.send(("closed", time.monotonic_ns()))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            pipe.send(("error", f"{type(exc).__name__}: {exc}"))
        raise


def consume(consumer: Consumer, manual: bool, pipe: Pipe) -> None:
    """Poll until a "close" command arrives; "state" asks for `core_state`."""
    while True:
        if pipe.poll():
            if pipe.recv() == "close":
                return
            pipe.send(("state", core_state(consumer)))
        message = consumer.poll(CHILD_POLL_S)
        if message is None:
            continue
        received = time.monotonic_ns()
        seqs = [s for block in message.blocks for s in block.data["seq"].to_pylist()]
        if seqs:
            pipe.send(("rows", message.vgroup, received, seqs))
        if manual:
            try:
                consumer.commit(message)
            except Error as err:  # fenced: the vgroup moved on; its rows go elsewhere
                pipe.send(("commit_failed", f"{type(err).__name__}: {err}"))


def core_state(consumer: Consumer) -> str:
    """The consumer's own view, for the report of a group that does not settle: epoch,
    status, and per held vgroup its position, poll in flight, message waiting, and the
    seconds until it may poll again. (Diagnostics: reads the client's private state.)"""
    core = consumer._core
    now = core.clock()
    held = {
        vgroup: (h.position, h.ticket, h.ready is not None, round(max(0.0, h.retry_at - now), 2))
        for (_, vgroup), h in sorted(core.held.items())
    }
    status = pb.ConsumerStatus.Name(pb.ConsumerStatus.ValueType(core.status))
    return (
        f"epoch {core.epoch}, status {status}, "
        f"need_refresh {core.need_refresh}, "
        f"held vgroup: (position, ticket, ready, retry_in_s) {held}"
    )


def run_producer(address: str, children: list[str], base: int, period_s: float,
                 pipe: Pipe) -> None:  # fmt: skip
    """The producer process: every `period_s` one INSERT of one row per child, sequence
    numbers from `base` on (ts = START_MS + seq), until "stop"; then ("stopped", ticks)."""
    with connect(address, database=DB) as conn:
        pipe.send(("ready", time.monotonic_ns()))
        began, ticks = time.monotonic(), 0
        while not pipe.poll(max(0.0, began + ticks * period_s - time.monotonic())):
            first = base + ticks * len(children)
            values = (f"{c} VALUES ({START_MS + first + i}, {first + i})"
                      for i, c in enumerate(children))  # fmt: skip
            conn.execute("INSERT INTO " + " ".join(values))
            ticks += 1
        pipe.recv()
        pipe.send(("stopped", ticks))


# --- this side of the children ---------------------------------------------------------


@dataclass(frozen=True)
class Redelivery:
    """A row delivered again: its seq and vgroup, who got it first and again, and when
    (monotonic ns)."""

    seq: int
    vgroup: int
    first: tuple[str, int]
    again: tuple[str, int]


class Receipts:
    """Every delivery the consumers reported: per (consumer, vgroup) the receive times,
    per sequence number its first delivery, and the redeliveries. Thread-safe."""

    def __init__(self) -> None:
        self.phase = "setup"  # the phase deliveries are counted in
        self.redelivered: dict[str, list[Redelivery]] = defaultdict(list)  # by phase
        self._times: dict[tuple[str, int], list[int]] = defaultdict(list)
        self._first: dict[int, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def add(self, name: str, vgroup: int, received_ns: int, seqs: list[int]) -> None:
        with self._lock:
            self._times[name, vgroup].append(received_ns)
            for seq in seqs:
                first = self._first.get(seq)
                if first is None:
                    self._first[seq] = (name, received_ns)
                    continue
                self.redelivered[self.phase].append(
                    Redelivery(seq, vgroup, first, (name, received_ns))
                )

    def first(self, name: str, vgroup: int, since_ns: int) -> int | None:
        """When `name` first received rows of `vgroup` at or after `since_ns`."""
        with self._lock:
            times = self._times.get((name, vgroup), [])
            index = bisect_left(times, since_ns)
            return times[index] if index < len(times) else None

    def last(self, vgroup: int) -> tuple[str, int] | None:
        """Who last received rows of `vgroup`, and when."""
        with self._lock:
            times = [(t[-1], name) for (name, v), t in self._times.items() if v == vgroup and t]
        if not times:
            return None
        when, name = max(times)
        return name, when

    def missing(self, seqs: range) -> list[int]:
        with self._lock:
            return [seq for seq in seqs if seq not in self._first]


class Child:
    """A child process and the reader of its pipe: events by kind, rows to `receipts`."""

    def __init__(self, name: str, target: Callable[..., None], args: tuple[Any, ...],
                 receipts: Receipts | None = None) -> None:  # fmt: skip
        context = multiprocessing.get_context("spawn")
        self.name = name
        self.pipe, theirs = context.Pipe()
        self.proc: BaseProcess = context.Process(
            target=target, args=(*args, theirs), name=name, daemon=True
        )
        self.proc.start()
        theirs.close()  # the child holds its end: EOF here once it exits
        self.receipts = receipts
        self.events: dict[str, Any] = {}
        self.ended = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name=f"pipe-{name}", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                event = self.pipe.recv()
            except (EOFError, OSError):
                break
            if event[0] == "rows":
                assert self.receipts is not None
                self.receipts.add(self.name, *event[1:])
                continue
            with self._changed:
                if event[0] == "commit_failed":
                    self.events["commit_failed"] = self.events.get("commit_failed", 0) + 1
                else:
                    self.events[event[0]] = event[1]
                self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_for(self, kind: str, seconds: float) -> Any:
        """The value of the child's event `kind`, once it came."""
        with self._changed:
            self._changed.wait_for(lambda: kind in self.events or self.ended, seconds)
            if kind in self.events:
                return self.events[kind]
        self.check()
        raise RuntimeError(f"{self.name}: no {kind!r} within {seconds:.0f} s")

    def check(self) -> None:
        """Fail when the child reported an error or died unasked."""
        error = self.events.get("error")
        if error is not None or (self.ended and "closed" not in self.events):
            raise RuntimeError(f"{self.name} failed: {error or 'it exited'}")

    def send(self, command: str) -> None:
        self.pipe.send(command)

    def ask_state(self) -> str:
        """A consumer's `core_state` (it answers between polls)."""
        with self._changed:
            self.events.pop("state", None)
        self.send("state")
        try:
            return str(self.wait_for("state", STATE_DEADLINE_S))
        except RuntimeError as err:
            return str(err)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()

    def finish(self) -> None:
        self.proc.join(timeout=START_DEADLINE_S)
        if self.proc.exitcode is None:
            self.kill()


# --- watching the group ----------------------------------------------------------------

UNKNOWN = "?"  # an owner id SHOW CONSUMERS did not list (it joined in between)


@dataclass(frozen=True)
class View:
    """The group as SHOW sees it: vgroup -> its consumer's client.id (None: unassigned),
    and the client.ids of the group's members."""

    owners: dict[int, str | None]
    members: set[str]


def view(conn: Connection, topic: str, group: str) -> View:
    """The group on `topic` now (SHOW CONSUMERS first: an owner id it lacks is UNKNOWN)."""
    consumers = conn.query("SHOW CONSUMERS").to_pylist()
    names = {r["consumer_id"]: r["client_id"] for r in consumers if r["consumer_group"] == group}
    owners: dict[int, str | None] = {}
    for r in conn.query("SHOW SUBSCRIPTIONS").to_pylist():
        if r["topic_name"] == topic and r["consumer_group"] == group:
            cid = r["consumer_id"]
            owners[r["vgroup_id"]] = None if cid is None else names.get(cid, UNKNOWN)
    return View(owners, set(names.values()))


def balanced(owners: dict[int, str | None], live: list[str]) -> bool:
    """Every vgroup owned, only by live members, each holding 16 // k or ceil(16 / k)."""
    if len(owners) != VGROUPS or not set(live) >= set(owners.values()):
        return False
    held = Counter(owners.values())
    low, high = VGROUPS // len(live), math.ceil(VGROUPS / len(live))
    return all(low <= held[name] <= high for name in live)


@dataclass(frozen=True)
class Settled:
    """One event: ms from it to the settle, to SHOW's first balanced view (assignments
    done on the mnode), to the departed member leaving SHOW CONSUMERS; the final owners."""

    settle_ms: float
    assigned_ms: float
    removed_ms: float | None
    owners: dict[int, str | None]
    firsts: dict[int, int]  # vgroup -> its owner's first receipt since the event (ns)


# --- one variant -----------------------------------------------------------------------


@dataclass
class Samples:
    """The figures of one variant's events, in ms."""

    join: list[Settled] = field(default_factory=list)
    leave: list[Settled] = field(default_factory=list)
    crash: list[Settled] = field(default_factory=list)
    takeover_ms: list[float] = field(default_factory=list)
    close_ms: list[float] = field(default_factory=list)


class Run:
    """One variant: its topic and group, the producer, the members (in join order) and a
    spare consumer, logged in and waiting to subscribe."""

    def __init__(self, conn: Connection, variant: Variant, index: int, rng: random.Random):
        self.conn = conn
        self.variant = variant
        self.topic = f"rb_seq{index}"
        self.group = f"rb_group{index}"
        self.base = index * SEQ_BASE
        self.rng = rng
        self.receipts = Receipts()
        self.members: list[Child] = []
        self.children: list[Child] = []  # every child started, for the clean-up
        self.spare: Child | None = None
        self.samples = Samples()
        self.events: list[tuple[int, str]] = []  # (monotonic ns, "join c5"), in order
        self.failures: list[str] = []  # why events did not settle in time
        self._started = 0
        conn.execute(
            f"CREATE TOPIC {self.topic} AS SELECT ts, seq FROM {DB}.seqs "
            f"WHERE seq >= {self.base} AND seq < {self.base + SEQ_BASE}"
        )

    def start(self, children: list[str]) -> Child:
        """Start the producer, 3 members and a spare; the group settled. The producer."""
        address = self.conn.address
        producer = Child("producer", run_producer, (address, children, self.base, PERIOD_S))
        self.children.append(producer)
        first = [self.spawn() for _ in range(BASE_MEMBERS + 1)]  # they start in parallel
        for child in first:
            child.wait_for("ready", START_DEADLINE_S)
        producer.wait_for("ready", START_DEADLINE_S)
        *self.members, self.spare = first
        for member in self.members:
            member.send("subscribe")
        since = max(m.wait_for("subscribing", START_DEADLINE_S) for m in self.members)
        self.events.append((since, f"start of {len(self.members)} members"))
        self.settle(since, deadline_s=CRASH_DEADLINE_S, strict=True)
        return producer

    def spawn(self) -> Child:
        self._started += 1
        name = f"c{self._started}"
        config = {
            "group.id": self.group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": str(SESSION_TIMEOUT_MS),
        } | self.variant.settings
        args = (self.conn.address, name, self.topic, config, self.variant.manual)
        child = Child(name, run_consumer, args, self.receipts)
        self.children.append(child)
        return child

    def next_spare(self) -> None:
        self.spare = self.spawn()
        self.spare.wait_for("ready", START_DEADLINE_S)

    def pause(self) -> None:
        time.sleep(self.rng.uniform(*PAUSE_S))

    def join(self) -> Settled:
        """The spare subscribes; settled with it as a member."""
        assert self.spare is not None
        joiner, self.spare = self.spare, None
        joiner.send("subscribe")
        since = joiner.wait_for("subscribing", START_DEADLINE_S)
        self.events.append((since, f"join {joiner.name}"))
        self.members.append(joiner)
        try:
            return self.settle(since)
        finally:
            self.next_spare()

    def leave(self) -> Settled:
        """The longest-serving member closes gracefully."""
        leaver = self.members.pop(0)
        leaver.send("close")
        since = leaver.wait_for("closing", SETTLE_DEADLINE_S)
        self.events.append((since, f"leave {leaver.name}"))
        settled = self.settle(since, gone=leaver.name)
        closed = leaver.wait_for("closed", SETTLE_DEADLINE_S)
        self.samples.close_ms.append((closed - since) / 1e6)
        leaver.finish()
        return settled

    def crash(self) -> Settled:
        """SIGKILL the longest-serving member; the takeover is the time until survivors
        received rows of each of its vgroups."""
        before = view(self.conn, self.topic, self.group)
        victim = self.members.pop(0)
        dead = [v for v, owner in before.owners.items() if owner == victim.name]
        if not dead:
            raise RuntimeError(f"{victim.name} holds no vgroup before its crash: {before}")
        since = time.monotonic_ns()
        victim.kill()
        self.events.append((since, f"crash {victim.name}"))
        settled = self.settle(since, gone=victim.name, deadline_s=CRASH_DEADLINE_S)
        late = since + round(CRASH_DEADLINE_S * 1e9)  # a vgroup nobody took (a failure)
        taken = max(settled.firsts.get(v, late) for v in dead)
        self.samples.takeover_ms.append((taken - since) / 1e6)
        return settled

    def settle(self, since: int, gone: str | None = None,
               deadline_s: float = SETTLE_DEADLINE_S, strict: bool = False) -> Settled:  # fmt: skip
        """Wait until the group is settled (module docstring) after the event at `since`
        (monotonic ns); `gone` is the member that left. Past the deadline the failure is
        recorded and the event counts as taking the whole deadline (`strict`, or after
        MAX_SETTLE_FAILURES: the run stops)."""
        live = [m.name for m in self.members]
        deadline = time.monotonic() + deadline_s
        assigned = removed = None
        done: dict[int, int] = {}
        while True:
            for member in self.members:
                member.check()
            now_view = view(self.conn, self.topic, self.group)
            now = time.monotonic_ns()
            if gone is not None and removed is None and gone not in now_view.members:
                removed = now
            if not balanced(now_view.owners, live):
                assigned = None
            else:
                assigned = assigned or now
                firsts = {
                    v: self.receipts.first(owner, v, since)
                    for v, owner in now_view.owners.items()
                    if owner is not None
                }
                done = {v: t for v, t in firsts.items() if t is not None}
                if len(done) == len(firsts):
                    return Settled(
                        (max(done.values()) - since) / 1e6, (assigned - since) / 1e6,
                        None if removed is None else (removed - since) / 1e6,
                        now_view.owners, done,
                    )  # fmt: skip
            if time.monotonic() > deadline:
                break
            time.sleep(SHOW_POLL_S)
        why = self.unsettled(now_view, live, since, deadline_s)
        if strict or len(self.failures) >= MAX_SETTLE_FAILURES:
            raise RuntimeError(why)
        log(why)
        self.failures.append(why)
        return Settled(
            deadline_s * 1000, deadline_s * 1000 if assigned is None else (assigned - since) / 1e6,
            None if removed is None else (removed - since) / 1e6, now_view.owners, done,
        )  # fmt: skip

    def unsettled(self, now_view: View, live: list[str], since: int, deadline_s: float) -> str:
        """Why the group did not settle: the owners, and each vgroup whose owner got no
        rows of it since the event, with its SHOW SUBSCRIPTIONS row and the last delivery
        of its rows (to anyone)."""
        lines = [
            f"group {self.group} did not settle within {deadline_s:g} s after "
            f"{self.events[-1][1] if self.events else 'start'}: owners {now_view.owners}, "
            f"live {live}"
        ]
        subscriptions = {
            r["vgroup_id"]: r
            for r in self.conn.query("SHOW SUBSCRIPTIONS").to_pylist()
            if r["topic_name"] == self.topic and r["consumer_group"] == self.group
        }
        lacking: set[str | None] = set()
        for vgroup, owner in sorted(now_view.owners.items()):
            if owner is not None and self.receipts.first(owner, vgroup, since) is not None:
                continue
            last = self.receipts.last(vgroup)
            where = "never" if last is None else f"{last[0]} at {(last[1] - since) / 1e6:+.0f} ms"
            row = subscriptions.get(vgroup, {})
            lines.append(
                f"  vgroup {vgroup}: owner {owner}, offset {row.get('offset')}, lag "
                f"{row.get('lag')}; its rows last delivered: {where}"
            )
            lacking.add(owner)
        for member in self.members:
            if member.name in lacking:
                lines.append(f"  {member.name} says: {member.ask_state()}")
        return "\n".join(lines)

    def measure(self) -> None:
        """The variant's rounds: join and leave, then crashes (each after an unmeasured
        join back to 4 members)."""
        self.receipts.phase = "graceful"
        for r in range(self.variant.rounds):
            self.pause()
            self.samples.join.append(self.join())
            self.pause()
            self.samples.leave.append(self.leave())
            log(f"round {r + 1}: join {self.samples.join[-1].settle_ms:.0f} ms, "
                f"leave {self.samples.leave[-1].settle_ms:.0f} ms")  # fmt: skip
        self.receipts.phase = "crash"
        for r in range(self.variant.crash_rounds):
            self.pause()
            self.join()
            self.pause()
            self.samples.crash.append(self.crash())
            log(f"crash {r + 1}: takeover {self.samples.takeover_ms[-1]:.0f} ms "
                f"(removed after {self.samples.crash[-1].removed_ms or 0:.0f} ms)")  # fmt: skip
        self.receipts.phase = "end"

    def finish(self, producer: Child) -> tuple[int, list[int]]:
        """Stop the producer, wait for every row it wrote; (rows written, rows missing)."""
        producer.send("stop")
        ticks: int = producer.wait_for("stopped", SETTLE_DEADLINE_S)
        written = range(self.base, self.base + ticks * VGROUPS)
        deadline = time.monotonic() + DRAIN_DEADLINE_S
        while (missing := self.receipts.missing(written)) and time.monotonic() < deadline:
            time.sleep(SHOW_POLL_S)
        remaining = [*self.members, *([self.spare] if self.spare else [])]
        for member in remaining:
            member.send("close")
        for member in remaining:
            member.wait_for("closed", SETTLE_DEADLINE_S)
            member.finish()
        producer.finish()
        return len(written), missing

    def stop_all(self) -> None:
        for child in self.children:
            if child.proc.is_alive():
                child.kill()


def run_variant(conn: Connection, variant: Variant, index: int, rng: random.Random,
                children: list[str]) -> tuple[Report, Report]:  # fmt: skip
    run = Run(conn, variant, index, rng)
    try:
        producer = run.start(children)
        run.measure()
        written, missing = run.finish(producer)
    finally:
        run.stop_all()
    return figures(run, written, missing)


# --- figures ---------------------------------------------------------------------------


def cuts(values: list[float]) -> tuple[float, float]:
    """p50 and p99 (inclusive method; one value is both)."""
    if len(values) == 1:
        return values[0], values[0]
    points = statistics.quantiles(values, n=100, method="inclusive")
    return points[49], points[98]


def percentiles(name: str, values: list[float], suffix: str) -> Report:
    if not values:
        return {}
    p50, p99 = cuts(values)
    return {f"{name}_p50{suffix}": round(p50, 1), f"{name}_p99{suffix}": round(p99, 1)}


def figures(run: Run, written: int, missing: list[int]) -> tuple[Report, Report]:
    s, samples, again = run.variant.suffix, run.samples, run.receipts.redelivered
    keys: Report = {
        **percentiles("join_settle_ms", [x.settle_ms for x in samples.join], s),
        **percentiles("leave_settle_ms", [x.settle_ms for x in samples.leave], s),
        **percentiles("crash_takeover_ms", samples.takeover_ms, s),
        f"duplicate_rows{s}": len(again["graceful"]),
        f"missing_rows{s}": len(missing),
        f"settle_failures{s}": len(run.failures),
    }
    meta: Report = {
        **percentiles("join_assigned_ms", [x.assigned_ms for x in samples.join], s),
        **percentiles("leave_assigned_ms", [x.assigned_ms for x in samples.leave], s),
        **percentiles("leave_close_ms", samples.close_ms, s),
        **percentiles("crash_removed_ms", [x.removed_ms or 0.0 for x in samples.crash], s),
        **percentiles("crash_settle_ms", [x.settle_ms for x in samples.crash], s),
        f"join_settle_ms_rounds{s}": [round(x.settle_ms) for x in samples.join],
        f"join_assigned_ms_rounds{s}": [round(x.assigned_ms) for x in samples.join],
        f"leave_settle_ms_rounds{s}": [round(x.settle_ms) for x in samples.leave],
        f"leave_assigned_ms_rounds{s}": [round(x.assigned_ms) for x in samples.leave],
        f"crash_takeover_ms_rounds{s}": [round(x) for x in samples.takeover_ms],
        f"crash_removed_ms_rounds{s}": [round(x.removed_ms or 0) for x in samples.crash],
        **crash_duplicates(again["crash"], run.events, s),
        f"setup_duplicate_rows{s}": len(again["setup"]),
        f"commit_failures{s}": sum(c.events.get("commit_failed", 0) for c in run.children),
        f"rows_written{s}": written,
        f"settings{s}": run.variant.settings | {"session.timeout.ms": str(SESSION_TIMEOUT_MS)},
    }
    for phase in ("setup", "graceful"):  # crash-phase redeliveries are expected
        if again[phase]:
            meta[f"{phase}_duplicate_examples{s}"] = [
                describe(x, run.events) for x in again[phase][:MAX_EXAMPLES]
            ]
    if run.failures:
        meta[f"settle_failure_reports{s}"] = run.failures
    if missing:
        meta[f"missing_seqs_sample{s}"] = missing[:MAX_EXAMPLES]
    return keys, meta


def crash_duplicates(again: list[Redelivery], events: list[tuple[int, str]], suffix: str) -> Report:
    """Redeliveries in the crash rounds: how many were first delivered to a consumer
    that was then killed (expected: after its last commit), how many to others, and
    the oldest of the former, in ms before the kill (bounded by the auto-commit
    interval plus the handing out of what was fetched)."""
    kills = {e.split()[1]: t for t, e in events if e.startswith("crash ")}
    of_killed = [x for x in again if x.first[0] in kills]
    ages = [(kills[x.first[0]] - x.first[1]) / 1e6 for x in of_killed]
    return {
        f"crash_duplicate_rows{suffix}": len(again),
        f"crash_duplicate_rows_of_killed{suffix}": len(of_killed),
        f"crash_duplicate_oldest_ms_before_kill{suffix}": round(max(ages, default=0.0)),
    }


def describe(redelivery: Redelivery, events: list[tuple[int, str]]) -> str:
    """A redelivery, its times in ms after the last event before its first delivery."""
    (first, first_ns), (again, again_ns) = redelivery.first, redelivery.again
    since, event = next(((t, e) for t, e in reversed(events) if t <= first_ns), (0, "start"))
    return (
        f"seq {redelivery.seq} of vgroup {redelivery.vgroup}: to {first} at "
        f"{(first_ns - since) / 1e6:+.0f} ms and to {again} at {(again_ns - since) / 1e6:+.0f} "
        f"ms after {event}"
    )


def goals(report: Report) -> Report:
    """The goals of the default variant (a figure not measured misses its goal)."""
    clean = report["duplicate_rows"] == 0
    met = {
        "join_settle_goal_met": report.get("join_settle_ms_p99", math.inf) <= SETTLE_GOAL_MS
        and clean,
        "leave_settle_goal_met": report.get("leave_settle_ms_p99", math.inf) <= SETTLE_GOAL_MS
        and clean,
        "crash_takeover_goal_met": report.get("crash_takeover_ms_p99", math.inf)
        <= TAKEOVER_GOAL_MS,
    }
    return met | {
        "all_goals_met": all(met.values()),
        "settle_goal_ms": SETTLE_GOAL_MS,
        "crash_takeover_goal_ms": TAKEOVER_GOAL_MS,
    }


NOTES = {
    "method": (
        f"One sqltopic server process; database {DB} VGROUPS {VGROUPS} WAL_LEVEL 1 with "
        "one child table of seqs (ts, seq BIGINT) per vgroup; a producer process writes "
        f"one row to every child each {PERIOD_S * 1000:.0f} ms (one INSERT), seq unique. "
        "Per variant a new topic (its seq range) and group; consumers are processes "
        "(sqltopic.client.consumer.Consumer, auto.offset.reset earliest, "
        f"session.timeout.ms {SESSION_TIMEOUT_MS}, client.id = name), reporting every "
        "message with its receive time (CLOCK_MONOTONIC, shared by all processes)."
    ),
    "settle": (
        "Settled: SHOW SUBSCRIPTIONS names a consumer for all vgroups, only live "
        "members, 16 // k or ceil(16 / k) each (k = members), and each vgroup's named "
        "consumer has received rows of it since the event. settle_ms = latest of those "
        "first receipts - event (join: subscribe() called; leave: close() called; crash: "
        "SIGKILL). crash_takeover_ms: the same over the killed consumer's vgroups. "
        f"Unmoved vgroups wait up to {PERIOD_S * 1000:.0f} ms for their next row. An "
        f"event not settled within {SETTLE_DEADLINE_S:.0f} s ({CRASH_DEADLINE_S:.0f} s "
        "after a crash) counts as that long; settle_failure_reports says why."
    ),
    "breakdown": (
        "*_assigned_ms: first SHOW poll (every "
        f"{SHOW_POLL_S * 1000:.0f} ms) with the balanced assignment, i.e. hand-overs done on "
        "the mnode; crash_removed_ms: first SHOW poll without the killed consumer; "
        "leave_close_ms: duration of close() in the leaver."
    ),
    "duplicates": (
        "duplicate_rows: deliveries, during the join and leave rounds, of a seq already "
        "delivered (to any consumer); crash_duplicate_rows: the same in the crash rounds "
        "(expected: the killed consumer's rows after its last commit); "
        "crash_duplicate_rows_of_killed: those a killed consumer had received first; "
        "crash_duplicate_oldest_ms_before_kill: the oldest of them."
    ),
}


def machine_meta(root: Path, sizes: Sizes) -> Report:
    paths = ["../server", "../client", "../wal", "../sql", "../proto"]
    status = harness.command(["git", "status", "--porcelain", *paths])
    return harness.machine_meta(
        root,
        libraries={"pyarrow": pa.__version__, "grpcio": grpc.__version__},
        status={
            "server_git_status": "; ".join(line.strip() for line in status.splitlines()) or "clean"
        },
        settings={
            "vgroups": VGROUPS,
            "period_ms": PERIOD_S * 1000,
            "show_poll_ms": SHOW_POLL_S * 1000,
        },
        sizes=sizes,
        quick=sizes == QUICK,
    )


# --- the run ---------------------------------------------------------------------------


def child_names() -> list[str]:
    """One child table name per vgroup (by the server's placement hash), slot order."""
    names: dict[int, str] = {}
    n = 0
    while len(names) < VGROUPS:
        name = f"s{n}"
        names.setdefault(table_hash(DB, name) * VGROUPS // HASH_SPACE, name)
        n += 1
    return [names[slot] for slot in sorted(names)]


def create_schema(conn: Connection, children: list[str]) -> None:
    conn.execute(
        f"CREATE DATABASE {DB} VGROUPS {VGROUPS} WAL_LEVEL 1; USE {DB}; "
        "CREATE STABLE seqs (ts TIMESTAMP, seq BIGINT) TAGS (n INT)"
    )
    conn.execute(
        "; ".join(f"CREATE TABLE {c} USING seqs TAGS ({i})" for i, c in enumerate(children))
    )


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    seconds: dict[str, float] = {}
    report: Report = {}
    meta = machine_meta(root, sizes) | NOTES
    rng = random.Random(seed)
    children = child_names()
    # port 0: the server binds a free one and names it in its ready line
    with ServerChild(root / "data", 0, ROOT_PASSWORD) as server:
        with harness.phase(log, "start", seconds):
            address = server.start()
            conn = connect(address)
            create_schema(conn, children)
        with conn:
            for index, variant in enumerate(variants(sizes), start=1):
                with harness.phase(log, f"variant{variant.suffix or '_default'}", seconds):
                    keys, more = run_variant(conn, variant, index, rng, children)
                report |= keys
                meta |= more
                for name, value in keys.items():
                    log(f"{name}: {value}")
    return report | goals(report) | {"meta": meta | {"phase_seconds": seconds}}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="rebalance_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="1 join/leave round and 1 crash, default settings only",
        seed_help="seed of the pauses between events",
    )


if __name__ == "__main__":
    sys.exit(main())
