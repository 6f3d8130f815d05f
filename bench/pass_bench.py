"""Benchmark of the shared pass and its deliveries, in process: what a write costs the
event loop of a server whose followers are all caught up.

One `Engine` on a temp dir, no network: a database of VGROUPS 4 and 1,000 child tables
(fanout_bench's), a `LiveHub` per vgroup (the vnode's shared pass), `Follows` and four
`ConsumeStream`s (a client process each) on which every subscriber follows every vgroup,
as fanout_bench's consumers do through a server. Then writes of 1,000 rows over 10
children (fanout_bench's producer), each followed by the passes it wakes, their
deliveries and the streams' batches, until every answer is out; the streams' client
here reads the batches and grants the credit they used. Phases:

* `n1`, `n1000`: N device-set topics (`WHERE tbname IN` ten devices), one subscriber
  each;
* `params_1`, `params_10000`: one parameterized topic (`WHERE tbname = ?`) with B
  bindings, 40 per subscriber (fanout_bench's).

Reported per phase: `loop_ms_per_write_<phase>` (the event loop's CPU from the write's
end until the last answer is out and read, median; neither the write itself nor the
client's reading of the answers is in it),
`deliveries_per_write_<phase>`, and `deliveries_exact_<phase>` (every subscriber got
exactly one message per vgroup a write reached it on, with exactly its rows). The
ratios `ratio_n1000` and `ratio_params_10000` divide by the one-subscriber phase of the
same run, and `us_per_delivery_n1000` / `_params_10000` is what each delivery adds to
that phase's pass: the part of fanout_bench's `cpu_us_per_row` ratios that the pass and
its deliveries make (without gRPC, heartbeats and commits).

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smoke run of a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fanout_bench as fan
import harness
from harness import Report

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.follow import Follows
from sqltopic.server.dnode.live import LiveHub
from sqltopic.server.rpc.consume import ConsumeStream

STREAMS = 4  # client processes: fanout_bench's 1,000 consumers take four
WINDOW = 64  # each follow's credit (the protocol's most)
# Turns of the event loop a write's passes and batches take at most (a bound, not a
# timing): a few dozen when the loop does nothing else.
MAX_TURNS = 10_000
WARMUP_WRITES = 10  # writes before the measured ones: code and caches warm
CYCLE = fan.DEVICES // fan.CHILDREN_PER_WRITE  # writes of the producer's round of children


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    topic_counts: tuple[int, ...]  # N of each device-set phase
    binding_counts: tuple[int, ...]  # B of each parameterized phase
    writes: int  # measured writes per phase


FULL = Sizes(topic_counts=(1, 1_000), binding_counts=(1, 10_000), writes=200)
QUICK = Sizes(topic_counts=(1, 20), binding_counts=(1, 100), writes=20)

log = harness.logger("pass_bench")


@dataclass(frozen=True, slots=True)
class Sub:
    """One subscriber: the subscription it follows on every vgroup, its devices."""

    name: str
    stream: int
    devices: frozenset[int]


def _subs(label: str, count: int) -> tuple[list[str], list[Sub]]:
    """The phase's CREATE TOPICs and subscribers."""
    if label == "n":
        specs = fan.topic_specs(count, random.Random(1))
        return [s.sql() for s in specs], [
            Sub(s.name, k % STREAMS, frozenset(s.devices)) for k, s in enumerate(specs)
        ]
    topic = f"fanp{count}"
    ddl = [f"CREATE TOPIC {topic} AS " + fan.PARAMS_TOPIC_SQL.format(db=fan.DB)]
    subs = []
    for spec in fan.bound_specs(count):
        consumer = int(spec.group.rsplit("_g", 1)[1])
        for device, name in zip(spec.devices, spec.subscriptions(), strict=True):
            subs.append(Sub(name, consumer % STREAMS, frozenset([device])))
    return ddl, subs


class Client:
    """The client side of one stream: its follow requests, then grants of what it got;
    counts each ticket's data messages and rows."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[pb.ConsumeRequest | None] = asyncio.Queue()
        self.messages: Counter[int] = Counter()
        self.rows: Counter[int] = Counter()
        self.errors: list[str] = []
        self.cpu = 0.0  # seconds of the loop's thread spent reading answers

    async def feed(self) -> AsyncIterator[pb.ConsumeRequest]:
        while (request := await self.requests.get()) is not None:
            yield request

    async def read(self, answers: AsyncIterator[bytes]) -> None:
        async for data in answers:
            began = time.thread_time()  # the client's own work is not the server's
            batch = pb.ConsumeResponse.FromString(data)
            granted: list[int] = []
            for answer in (batch, *batch.batch):
                if answer.WhichOneof("result") == "error":
                    self.errors.append(answer.error.message)
                elif answer.message.WhichOneof("message") == "data":
                    self.messages[answer.ticket] += 1
                    self.rows[answer.ticket] += answer.message.data.row_count
                    granted.append(answer.ticket)
            if granted:
                self.requests.put_nowait(pb.ConsumeRequest(grants=granted))
            self.cpu += time.thread_time() - began


class Phase:
    """One engine with the phase's topics, its passes and its followers."""

    def __init__(self, root: Path, label: str, count: int) -> None:
        self.engine = Engine(root)
        fan.create_schema(self.engine)
        ddl, self.subs = _subs(label, count)
        for statement in ddl:
            self.engine.execute(statement)
        catalog = self.engine.state.catalog
        self.vgroups = sorted(catalog.database(fan.DB).vgroups)
        self.vgroup_of = {d: catalog.tables[(fan.DB, f"d{d}")].vgroup for d in range(fan.DEVICES)}
        self.tickets: dict[int, tuple[Sub, int]] = {}  # ticket -> subscriber, vgroup
        # device -> the tickets its rows reach: its subscribers' follows of its vgroup
        self.reach: dict[int, list[int]] = {}

    def close(self) -> None:
        self.engine.close()

    async def run(self, writes: int) -> tuple[list[float], int, bool]:
        """The loop's CPU after each measured write (s), the deliveries, and whether
        every subscriber got exactly its messages and rows."""
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()

        async def inline(fn: Any, *args: Any) -> Any:
            return fn(*args)

        state = self.engine.state
        hubs = {v: LiveHub(self.engine, state.vnode(v), inline) for v in self.vgroups}

        async def at_end(request: pb.PollRequest, wait: float, user: str) -> pb.PollResponse:
            # a follow's ordinary poll: caught up, at the WAL's end (it then stands)
            end = state.vnode(request.vgroup).wal.next_version
            return pb.PollResponse(empty=pb.EmptyMessage(offset=end, end_offset=end), epoch=1)

        async def fetch(request: pb.PollRequest, user: str) -> pb.PollResponse:
            return await at_end(request, 0.0, user)

        follows = Follows(
            at_end, lambda r: hubs[r.vgroup], lambda _: 1, lambda: self.engine.generation,
            stopping,
        )  # fmt: skip
        clients = [Client() for _ in range(STREAMS)]
        streams = [
            ConsumeStream(fetch, lambda _: ("t", "root"), _no_slot, stopping, follows.run)
            for _ in range(STREAMS)
        ]
        readers = [
            loop.create_task(c.read(s.run(c.feed()))) for c, s in zip(clients, streams, strict=True)
        ]
        self._follow_all(clients)
        await _until(lambda: sum(h.waiting for h in hubs.values()) == len(self.tickets))
        expected_messages: Counter[int] = Counter()
        expected_rows: Counter[int] = Counter()
        spent: list[float] = []
        for k in range(WARMUP_WRITES + writes):
            if k == WARMUP_WRITES:  # count from the first measured write on
                for c in clients:
                    c.messages.clear()
                    c.rows.clear()
            # the warm-up writes end a round of the children: the measured ones begin
            # with d0, the first devices bound (a quick run's bindings are all there)
            children = fan.write_children(k + CYCLE - WARMUP_WRITES)
            self.engine.write(f"{fan.DB}.meters", fan.batch(children, 1_000_000 + k * 1_000))
            began, client_began = time.thread_time(), sum(c.cpu for c in clients)
            await _until(lambda: _settled(hubs, streams))
            if k < WARMUP_WRITES:
                continue
            client = sum(c.cpu for c in clients) - client_began
            spent.append(time.thread_time() - began - client)
            for device in children:
                for ticket in self.reach.get(device, ()):
                    expected_rows[ticket] += fan.ROWS_PER_WRITE // fan.CHILDREN_PER_WRITE
            for ticket in {t for d in children for t in self.reach.get(d, ())}:
                expected_messages[ticket] += 1
        await _until(lambda: _settled(hubs, streams))
        got_messages = sum((c.messages for c in clients), Counter[int]())
        got_rows = sum((c.rows for c in clients), Counter[int]())
        stopping.set()
        for c in clients:
            c.requests.put_nowait(None)
        await asyncio.wait(readers)
        for hub in hubs.values():
            hub.close()
        errors = [e for c in clients for e in c.errors]
        exact = not errors and got_messages == expected_messages and got_rows == expected_rows
        return spent, sum(expected_messages.values()), exact

    def _follow_all(self, clients: list[Client]) -> None:
        """Every subscriber follows every vgroup on its stream."""
        for k, sub in enumerate(self.subs):
            for vgroup in self.vgroups:
                ticket = len(self.tickets) + 1
                self.tickets[ticket] = (sub, vgroup)
                for device in sub.devices:
                    if self.vgroup_of[device] == vgroup:
                        self.reach.setdefault(device, []).append(ticket)
                poll = pb.PollRequest(
                    topic=sub.name, group_id=f"g{k}", vgroup=vgroup, consumer_id=k + 1,
                    epoch=1, max_wait_ms=60_000,
                )  # fmt: skip
                clients[sub.stream].requests.put_nowait(
                    pb.ConsumeRequest(ticket=ticket, poll=poll, follow=WINDOW, batch=True)
                )


@contextlib.contextmanager
def _no_slot(session: str, user: str) -> Iterator[None]:
    yield  # no session limits in process


def _settled(hubs: dict[int, LiveHub], streams: list[ConsumeStream]) -> bool:
    """Whether the passes woken are done and every answer is out and read (a stream
    waits for answers only once its client took the last batch)."""
    return all(h.idle for h in hubs.values()) and all(s.drained for s in streams)


async def _until(done: Callable[[], bool]) -> None:
    """Turn the event loop until `done()` (at most MAX_TURNS turns)."""
    for _ in range(MAX_TURNS):
        if done():
            return
        await asyncio.sleep(0)
    raise RuntimeError(f"pass_bench: not settled after {MAX_TURNS} turns of the loop")


def run_phase(root: Path, label: str, count: int, writes: int) -> Report:
    name = f"{label}{count}" if label == "n" else f"params_{count}"
    phase = Phase(root / name, label, count)
    try:
        spent, deliveries, exact = asyncio.run(phase.run(writes))
    finally:
        phase.close()
    ms = statistics.median(spent) * 1e3
    log(f"{name}: {ms:.3f} ms of the loop per write, {deliveries / writes:.1f} deliveries "
        f"per write, exact {exact}")  # fmt: skip
    return {
        f"loop_ms_per_write_{name}": round(ms, 3),
        f"deliveries_per_write_{name}": round(deliveries / writes, 2),
        f"deliveries_exact_{name}": exact,
    }


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    report: Report = {}
    for n in sizes.topic_counts:
        report |= run_phase(root, "n", n, sizes.writes)
    for b in sizes.binding_counts:
        report |= run_phase(root, "params", b, sizes.writes)
    for label, counts in (("n", sizes.topic_counts), ("params_", sizes.binding_counts)):
        if len(counts) < 2:
            continue
        base, top = report[f"loop_ms_per_write_{label}{counts[0]}"], f"{label}{counts[-1]}"
        ms, deliveries = report[f"loop_ms_per_write_{top}"], report[f"deliveries_per_write_{top}"]
        report[f"ratio_{top}"] = round(ms / base, 2)
        if deliveries:  # what each delivery adds to one subscriber's pass
            report[f"us_per_delivery_{top}"] = round((ms - base) * 1e3 / deliveries, 2)
    meta = harness.machine_meta(
        root,
        libraries={},
        status={"git_status": harness.command(["git", "status", "--porcelain"]) or "clean"},
        settings={
            "devices": fan.DEVICES, "vgroups": fan.VGROUPS, "rows_per_write": fan.ROWS_PER_WRITE,
            "children_per_write": fan.CHILDREN_PER_WRITE, "streams": STREAMS,
            "follow_window": WINDOW, "warmup_writes": WARMUP_WRITES, "seed": seed,
        },
        sizes=sizes,
        quick=sizes == QUICK,
    )  # fmt: skip
    return report | {"meta": meta}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="pass_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="20 topics and 100 bindings, 20 writes",
        seed_help="unused: the topics are fanout_bench's (seed 1)",
    )


if __name__ == "__main__":
    sys.exit(main())
