"""No loss under churn: a producer writes rows numbered 0..N-1 while consumer processes of
one group join, leave gracefully, and one is SIGKILLed. Every consumer commits by hand
after processing each message. In the end each row was committed by exactly one
delivery, and every other delivery of a row is an uncommitted message of a consumer that
died or lost the vgroup (a fenced commit: the hand-over).

How a SIGKILL cannot lie: a consumer prints `D vgroup offset end seq...` when poll hands
it a message, then processes it, commits it and prints `C vgroup end` (`F vgroup end`
when the commit was fenced); each line is on the pipe the test reads before the next
step. Processed-and-committed rows are those of a D line followed by its C line. A D
line without an outcome can only be the killed consumer's last, its commit in doubt: the
test reads the group's committed offsets right after the kill, while the dead consumer
still holds its vgroups (nobody else may commit them until its session times out).
"""

from __future__ import annotations

import bisect
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from sqltopic.client import Connection, connect
from tests.live_server import ServerProcess
from tests.server.wire import Wire

GROUP, TOPIC = "churn", "seqs"
# The database's vgroups: ids 1..4 on the fresh server of the test.
VGROUPS = 4
# Child tables the producer writes in turn: enough that every vgroup gets some.
TABLES = 12
# The tables exist before any row: their DDL entries do not sit between data entries.
SETUP = f"""
CREATE DATABASE churn VGROUPS {VGROUPS};
CREATE STABLE churn.s (ts TIMESTAMP, seq BIGINT) TAGS (p INT);
CREATE TOPIC {TOPIC} AS SELECT ts, seq FROM churn.s;
{";".join(f"CREATE TABLE churn.t{i} USING churn.s TAGS ({i})" for i in range(TABLES))}
"""
# Rows per write: small writes make many WAL entries, so messages and commits are many.
BATCH = 25
# Pause between writes: rows keep coming through every step of the churn.
PRODUCE_PAUSE_S = 0.005
# A step of the group (join, take-over after the session timeout of 6 s plus the mnode's
# 2 s timer) that has not happened within this long never will.
DEADLINE_S = 60.0
# How long a leaving consumer may take to exit: it finishes its message and closes, and
# a close waits for a heartbeat in flight up to the client's own bound (beats.
# ANSWER_WAIT_S, 60 s; seen once in CI, 2026-11-26). This test is about rows, not about how
# fast a consumer leaves.
EXIT_DEADLINE_S = 150.0
# How often a wait looks again: the steps it waits for take a second or more.
CHECK_EVERY_S = 0.05
# How often the kill looks for c2 in the middle of a message (which takes 20 ms).
KILL_CHECK_S = 0.001
# The consumer process: the shortest session timeout (6 s) and a heartbeat every second,
# so the killed one is declared dead soon; processing takes 20 ms, so the kill usually
# lands between a delivery and its commit.
CONSUMER = r"""
import signal, sys, threading, time
from sqltopic.client.consumer import Consumer
from sqltopic.errors import ConsumerFenced

address, name = sys.argv[1], sys.argv[2]
leave = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: leave.set())
config = {"server": address, "group.id": "churn", "client.id": name,
          "auto.offset.reset": "earliest", "enable.auto.commit": "false",
          "session.timeout.ms": "6000", "heartbeat.interval.ms": "1000",
          "max.poll.rows": "200", "fetch.max.wait.ms": "100"}


def say(*words):
    print(*words, flush=True)  # on the pipe before the next step


with Consumer(config) as consumer:
    consumer.subscribe(["seqs"])
    say("joined")
    while not leave.is_set():
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.kind != "data":
            say("X", msg.kind, msg.vgroup, msg.offset, msg.end_offset)
            continue
        say("D", msg.vgroup, msg.offset, msg.end_offset, *msg.to_arrow().column("seq").to_pylist())
        time.sleep(0.02)  # processing it
        try:
            consumer.commit(msg)
        except ConsumerFenced:
            say("F", msg.vgroup, msg.end_offset)
            continue
        say("C", msg.vgroup, msg.end_offset)
say("left")
"""
# "died": the killed consumer's last message, its commit never landed
Outcome = Literal["committed", "fenced", "died", "in doubt"]


@dataclass(eq=False)  # compared by identity: the same message may come twice
class Delivery:
    """A message a consumer processed, and what became of its commit."""

    consumer: str
    vgroup: int
    offset: int
    end: int
    seqs: list[int]
    outcome: Outcome = "in doubt"


class ConsumerProcess:
    """The consumer script in its own process; its complete stdout lines as they come."""

    def __init__(self, address: str, name: str) -> None:
        self.name = name
        args = [sys.executable, "-c", CONSUMER, address, name]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut by SIGKILL was never acted on
                with self._lock:
                    self._lines.append(line.rstrip("\n"))

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def commits(self) -> int:
        return sum(line.startswith("C ") for line in self.lines())

    def leave(self) -> int:
        """SIGTERM: it finishes the message in hand, closes, exits; its exit code."""
        self.proc.terminate()
        return self.wait()

    def wait(self) -> int:
        code = self.proc.wait(EXIT_DEADLINE_S)
        self._pump.join(DEADLINE_S)
        return code

    def deliveries(self) -> list[Delivery]:
        """Its D lines with their outcome; only the last may lack one."""
        found: list[Delivery] = []
        for line in self.lines():
            kind, *words = line.split()
            assert kind != "X", f"{self.name} got a message that is not data: {line}"
            if kind == "D":
                vgroup, offset, end, *seqs = map(int, words)
                found.append(Delivery(self.name, vgroup, offset, end, seqs))
            elif kind in ("C", "F"):
                last, (vgroup, end) = found[-1], map(int, words)
                assert (last.outcome, last.vgroup, last.end) == ("in doubt", vgroup, end), line
                last.outcome = "committed" if kind == "C" else "fenced"
        assert all(d.outcome != "in doubt" for d in found[:-1]), f"{self.name}: {found}"
        return found


class Producer(threading.Thread):
    """Writes batches of rows numbered from 0 until stopped; rows 0..acked-1 are written."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.stop = threading.Event()
        self.acked = 0
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self._produce()
        except Exception as exc:  # the test reports it: fewer rows would prove less
            self.error = exc

    def _produce(self) -> None:
        with connect(self.address) as conn:
            batch = 0
            while not self.stop.is_set():
                table = batch % TABLES
                seqs = range(self.acked, self.acked + BATCH)
                conn.write("churn.s", pa.table({
                    "tbname": [f"t{table}"] * BATCH, "p": pa.array([table] * BATCH, pa.int32()),
                    "ts": pa.array(seqs, pa.timestamp("ms")), "seq": pa.array(seqs, pa.int64()),
                }))  # fmt: skip
                self.acked += BATCH
                batch += 1
                self.stop.wait(PRODUCE_PAUSE_S)


def _wait_until(condition: Callable[[], bool], what: str, every: float = CHECK_EVERY_S) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(every)


def _show(conn: Connection, what: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = conn.query(f"SHOW {what}").to_pylist()
    return rows


def _holders(conn: Connection) -> dict[int, str | None]:
    """vgroup -> client id of its holder (None: unassigned), for a settled group: every
    consumer `ready`, so no vgroup is being handed over."""
    members = [r for r in _show(conn, "CONSUMERS") if r["topic"] == TOPIC]
    if any(r["status"] != "ready" for r in members):
        return {}
    names = {r["consumer_id"]: r["client_id"] for r in members}
    subs = [r for r in _show(conn, "SUBSCRIPTIONS") if r["consumer_group"] == GROUP]
    return {r["vgroup_id"]: names.get(r["consumer_id"]) for r in subs}


def _settled(conn: Connection, names: set[str]) -> bool:
    holders = _holders(conn)
    return len(holders) == VGROUPS and set(holders.values()) == names


def test_no_row_is_lost_and_duplicates_only_follow_uncommitted_positions(
    conn: Connection, server: ServerProcess, wire: Wire
) -> None:
    conn.execute(SETUP)
    producer = Producer(server.address)
    producer.start()
    started: list[ConsumerProcess] = []

    def join(name: str) -> ConsumerProcess:
        started.append(ConsumerProcess(server.address, name))
        return started[-1]

    try:
        c1 = join("c1")
        _wait_until(lambda: c1.commits() > 0, "c1 commits")
        c2, c3 = join("c2"), join("c3")
        _wait_until(lambda: c2.commits() > 0 and c3.commits() > 0, "c2 and c3 commit")
        assert c1.leave() == 0
        c4 = join("c4")
        _wait_until(lambda: _settled(conn, {"c2", "c3", "c4"}), "c2, c3, c4 share the vgroups")
        held_by_c2 = {v for v, name in _holders(conn).items() if name == "c2"}
        _wait_until(lambda: c2.lines()[-1].startswith("D "), "c2 processes a message", KILL_CHECK_S)
        c2.proc.kill()  # SIGKILL: no commit, no close; it holds its vgroups until it times out
        assert c2.wait() == -9
        at_kill = {v: wire.committed(GROUP, TOPIC, v) for v in held_by_c2}
        # still a member, so nobody else could have committed its vgroups since the kill
        assert "c2" in {r["client_id"] for r in _show(conn, "CONSUMERS")}
        by_c2 = _settle_doubt(c2.deliveries(), at_kill)
        _wait_until(lambda: _settled(conn, {"c3", "c4"}), "c3 and c4 take over from c2")
        assert c3.leave() == 0
        producer.stop.set()
        producer.join(DEADLINE_S)
        assert not producer.is_alive()
        assert producer.error is None, producer.error
        total = producer.acked

        def everything() -> list[Delivery]:
            return by_c2 + [d for c in (c1, c3, c4) for d in c.deliveries()]

        def all_committed() -> bool:
            return len({s for d in _committed(everything()) for s in d.seqs}) == total

        _wait_until(all_committed, f"all {total} rows are committed")
        assert c4.leave() == 0
    finally:
        producer.stop.set()
        for process in started:
            process.proc.kill()
            process.proc.wait(DEADLINE_S)
    deliveries = everything()
    assert all(d.outcome != "in doubt" for d in deliveries), "an outcome not printed"
    _check(deliveries, total)
    for vgroup in range(1, VGROUPS + 1):  # the server stored what the consumers saw committed
        ends = [d.end for d in _committed(deliveries) if d.vgroup == vgroup]
        assert wire.committed(GROUP, TOPIC, vgroup) == max(ends, default=None)


def _settle_doubt(deliveries: list[Delivery], at_kill: dict[int, int | None]) -> list[Delivery]:
    """The killed consumer's deliveries, its last one's commit settled by the group's
    offset read right after the kill: its end (landed) or no further (it died first)."""
    last = deliveries[-1] if deliveries else None
    if last is not None and last.outcome == "in doubt":
        assert last.vgroup in at_kill, f"{last}: not a vgroup c2 held at the kill"
        offset = at_kill[last.vgroup]
        last.outcome = "committed" if offset == last.end else "died"
        assert last.outcome == "committed" or (offset or 0) <= last.offset, (last, offset)
    return deliveries


def _committed(deliveries: list[Delivery]) -> list[Delivery]:
    return [d for d in deliveries if d.outcome == "committed"]


def _check(deliveries: list[Delivery], total: int) -> None:
    """Each row committed by exactly one delivery; every delivery starts at its vgroup's
    committed position (the end of the last committed delivery there); the others, whose
    rows come again, are the killed consumer's last or lost their vgroup to a hand-over
    (a fenced commit)."""
    committed = _committed(deliveries)
    counts = Counter(seq for d in committed for seq in d.seqs)
    lost = sorted(set(range(total)) - set(counts))
    assert not lost, f"{len(lost)} of {total} rows never committed, from {lost[0]}"
    assert len(counts) == total, f"rows not written were committed: {sorted(counts)[total:]}"
    twice = sorted(seq for seq, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} rows committed twice (read below a commit), from {twice[0]}"
    ends: dict[int, list[int]] = {}
    for d in committed:
        ends.setdefault(d.vgroup, []).append(d.end)
    for vgroup_ends in ends.values():
        vgroup_ends.sort()
    for d in deliveries:
        mine = ends.get(d.vgroup, [])
        below = mine[: bisect.bisect_right(mine, d.offset)]
        assert not below or below[-1] == d.offset, f"{d} skips or repeats committed rows"
        assert d.outcome in ("committed", "fenced", "died"), d
