"""The cluster's costs (issue 16; docs/cluster.md): an mnode with dnodes against the
all-in-one server, every process on this machine.

1. DDL: CREATE TABLE statements/s through an mnode with 1 and 2 dnodes;
2. ingest: prebuilt 1,000-row Arrow batches over 40 child tables of a super table
   (`tbname` and tag columns), written by one client (`Connection.write`, one at a
   time; and `ingest_pipelined`: `Connection.write_async` back to back, as many under
   way as the connection keeps) to the server and to an mnode with 1, 2 and 3 dnodes
   (the client sends each part of a batch straight to the dnode hosting its vgroup);
3. consume: the same backlog drained from the start by one consumer of a topic
   `SELECT * FROM drain.meters`, on each of them;
4. latency: a producer process writing one-row Arrow batches at a steady pace, each
   carrying its send time, to one subscribed consumer, on each of them;
5. a dnode's failure: a dnode hosting half the vgroups SIGKILLed while a consumer polls
   their topic: until a write to its rows raises `VgroupUnavailable` and until SHOW
   VGROUPS says offline; restarted on its directory and port: until a row written to it
   reaches the consumer, and until its vgroups show ready.

Every process runs on this machine's cores (loopback), so the cluster's figures measure
its overhead, not scaling. `goals` says which of the issue's goals were met: 1 mnode + 1
dnode at least 0.8 x the server on ingest and consume, its latency p50 at most 3 ms, and
a restarted dnode's first delivery within 3 s of its restart.

    python bench/cluster_bench.py [--json] [--quick]
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import harness
import pyarrow as pa
import pyarrow.compute as pc
from harness import Report, Side, alternate
from redis_peer import WARMUP_SENT_NS, paced

from sqltopic.cli.spawn import ServerChild
from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import Error, VgroupUnavailable
from sqltopic.server.core.routing import vgroup_for
from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly

ROOT_PASSWORD = "cluster-bench-root-1"
SECRET = "cluster-bench-secret-0123456789"
VGROUPS = 4
# A condition polled this often while the figure is the time until it holds: a tenth of
# the dnode's heartbeat period, so it adds at most that much to the figure.
POLL_S = 0.1
# A dnode that is not offline (or ready again) by then is broken, not slow.
DEADLINE_S = 60.0
# The deployments of the data phases: the server, and an mnode with this many dnodes.
CLUSTER_SIZES = (1, 2, 3)
# Goals (issue 16): 1 mnode + 1 dnode against the server, and a restarted dnode.
RATIO_GOAL = 0.8
LATENCY_P50_GOAL_MS = 3.0
RESTART_DELIVERY_GOAL_S = 3.0


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    statements: int  # CREATE TABLE statements per round and side
    rounds: int  # DDL rounds per side
    kills: int  # SIGKILL-and-restart cycles of a dnode
    data_rounds: int  # ingest and consume rounds per side, the sides alternating
    batches: int  # ROWS_PER_BATCH-row Arrow writes per ingest round and side
    backlog_rows: int  # rows each consume drain reads, written ROWS_PER_BATCH at a time
    latency_samples: int  # rows timed from producer to consumer, per side


FULL = Sizes(
    statements=500, rounds=3, kills=3, data_rounds=5, batches=500, backlog_rows=200_000,
    latency_samples=2_000,
)  # fmt: skip
QUICK = Sizes(
    statements=40, rounds=1, kills=1, data_rounds=1, batches=50, backlog_rows=20_000,
    latency_samples=100,
)  # fmt: skip

log = harness.logger("cluster_bench")


# --- the processes -----------------------------------------------------------------------


@dataclass
class Cluster:
    mnode: ServerChild
    dnodes: list[ServerChild]
    root: Path


def _env() -> dict[str, str]:
    return {**os.environ, "SQLTOPIC_CLUSTER_SECRET": SECRET}


def start_dnode(root: Path, name: str, mnode: str, port: int = 0) -> ServerChild:
    dnode = ServerChild(root / name, port, ROOT_PASSWORD, ("--mnode", mnode), "dnode", _env())
    dnode.start()
    return dnode


@contextlib.contextmanager
def cluster(root: Path, dnodes: int) -> Iterator[Cluster]:
    """An mnode and `dnodes` admitted dnodes, all ready."""
    with ServerChild(root / "mnode", 0, ROOT_PASSWORD, (), "mnode", _env()) as mnode:
        mnode.start()
        made = Cluster(mnode, [], root)
        try:
            for i in range(dnodes):
                made.dnodes.append(start_dnode(root, f"dnode{i + 1}", mnode.address))
            with _connect(mnode.address) as conn:
                for dnode in made.dnodes:
                    conn.execute(f"CREATE DNODE '{dnode.address}'")
                _until(lambda: {r[2] for r in conn.execute("SHOW DNODES").rows} == {"ready"})
            yield made
        finally:
            for dnode in made.dnodes:
                dnode.stop()


def _connect(address: str) -> contextlib.AbstractContextManager[Connection]:
    return connect(address, password=ROOT_PASSWORD)


def _consumer_config(address: str, group: str) -> dict[str, str]:
    """A consumer's settings: defaults but for these."""
    return {
        "server": address, "group.id": group, "auto.offset.reset": "earliest",
        "td.connect.pass": ROOT_PASSWORD,
    }  # fmt: skip


def _until(condition: Callable[[], bool]) -> float:
    """Seconds until `condition` holds (looked at every POLL_S), or RuntimeError."""
    began = time.perf_counter()
    while not condition():
        if time.perf_counter() - began > DEADLINE_S:
            raise RuntimeError(f"not within {DEADLINE_S:.0f} s")
        time.sleep(POLL_S)
    return time.perf_counter() - began


def _vgroups_ready(conn: Connection, databases: tuple[str, ...]) -> bool:
    """Whether SHOW VGROUPS says every vgroup of the `databases` is ready."""
    rows = [r for db in databases for r in conn.execute(f"SHOW {db}.VGROUPS").rows]
    return {str(r[4]) for r in rows} == {"ready"}


# --- the rows -------------------------------------------------------------------------------

# The super table every data phase writes through, and its children d0.. (tag t = n).
STABLE_SQL = "CREATE STABLE {db}.meters (ts TIMESTAMP, v INT) TAGS (t INT)"
CHILDREN = 40
ROWS_PER_BATCH = 1_000
START_MS = 1_700_000_000_000
# Row i of every batch: child i % CHILDREN (the children interleaved, as devices
# reporting together), the step i // CHILDREN of that child's timestamps.
_INDEX = range(ROWS_PER_BATCH)
_NAMES = pa.array([f"d{i % CHILDREN}" for i in _INDEX], pa.string())
_TAGS = pa.array([i % CHILDREN for i in _INDEX], pa.int32())
_STEPS = pa.array([i // CHILDREN for i in _INDEX], pa.int64())
STEPS_PER_BATCH = ROWS_PER_BATCH // CHILDREN


def batch(k: int) -> pa.Table:
    """Batch number `k`: ROWS_PER_BATCH rows over the children, `ts` going on where batch
    k - 1 ended (1 ms apart per child), `v` = the row's number over all batches."""
    ts = pc.add(_STEPS, START_MS + k * STEPS_PER_BATCH).cast(pa.timestamp("ms"))
    first = k * ROWS_PER_BATCH
    v = pa.array(range(first, first + ROWS_PER_BATCH), pa.int32())
    return pa.table({"tbname": _NAMES, "ts": ts, "v": v, "t": _TAGS})


def one_row(ts_ms: int, v: int) -> pa.Table:
    """One row for a child table (no tbname, no tags)."""
    return pa.table({"ts": pa.array([ts_ms], pa.timestamp("ms")), "v": pa.array([v], pa.int32())})


# --- DDL ----------------------------------------------------------------------------------


def ddl_round(address: str, db: str, statements: int) -> float:
    """CREATE TABLE statements per second, one after another on one connection."""
    with _connect(address) as conn:
        conn.execute(
            f"CREATE DATABASE {db} VGROUPS {VGROUPS};"
            f"CREATE STABLE {db}.meters (ts TIMESTAMP, v INT) TAGS (t INT)"
        )
        began = time.perf_counter()
        for i in range(statements):
            conn.execute(f"CREATE TABLE {db}.d{i} USING {db}.meters TAGS ({i})")
        return statements / (time.perf_counter() - began)


def run_ddl(root: Path, sizes: Sizes) -> Report:
    rates: dict[str, list[float]] = {"all_in_one": [], "cluster_1": [], "cluster_2": []}
    for r in range(sizes.rounds):
        with ServerChild(root / f"server{r}", 0, ROOT_PASSWORD) as server:
            server.start()
            rates["all_in_one"].append(ddl_round(server.address, "a", sizes.statements))
        for dnodes in (1, 2):
            with cluster(root / f"cluster{dnodes}-{r}", dnodes) as made:
                rate = ddl_round(made.mnode.address, "c", sizes.statements)
                rates[f"cluster_{dnodes}"].append(rate)
        log(f"DDL round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rates.items()))
    report: Report = {f"ddl_per_s_{k}": harness.median_rate(v) for k, v in rates.items()}
    base = report["ddl_per_s_all_in_one"]
    for dnodes in (1, 2):
        rate = report[f"ddl_per_s_cluster_{dnodes}"]
        report[f"ratio_ddl_cluster_{dnodes}"] = round(rate / base, 3)
    return report


# --- the deployments of ingest, consume and latency ------------------------------------------

# Every deployment's databases: ingest's, the consume backlog's, and latency's.
SCHEMA_SQL = "; ".join([
    f"CREATE DATABASE ingest VGROUPS {VGROUPS}", STABLE_SQL.format(db="ingest"),
    f"CREATE DATABASE drain VGROUPS {VGROUPS}", STABLE_SQL.format(db="drain"),
    "CREATE TOPIC drain_all AS SELECT * FROM drain.meters",
    f"CREATE DATABASE lat VGROUPS {VGROUPS}",
    "CREATE STABLE lat.probe (ts TIMESTAMP, sent_ns BIGINT) TAGS (n INT)",
    "CREATE TOPIC lat_probe AS SELECT ts, sent_ns FROM lat.probe",
])  # fmt: skip
DATABASES = ("ingest", "drain", "lat")


@contextlib.contextmanager
def deployments(root: Path) -> Iterator[dict[str, Connection]]:
    """A connection to each side (all_in_one, cluster_<n>), all running at once so
    that the sides can alternate round by round; each has SCHEMA_SQL, its vgroups
    ready."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(ServerChild(root / "server", 0, ROOT_PASSWORD))
        server.start()
        addresses = {"all_in_one": server.address}
        for n in CLUSTER_SIZES:
            made = stack.enter_context(cluster(root / f"data{n}", n))
            addresses[f"cluster_{n}"] = made.mnode.address
        conns = {side: stack.enter_context(_connect(a)) for side, a in addresses.items()}
        for conn in conns.values():
            conn.execute(SCHEMA_SQL)
        for side, conn in conns.items():
            if side != "all_in_one":
                _until(functools.partial(_vgroups_ready, conn, DATABASES))
        yield conns


def rated(name: str, rates: dict[str, list[float]]) -> tuple[Report, Report]:
    """Median rates `<name>_rows_s_<side>`, the clusters' ratios to the server
    (`ratio_<name>_cluster_<n>`); per-round rates for meta."""
    prefix = f"{name}_rows_s"
    keys: Report = {f"{prefix}_{side}": harness.median_rate(r) for side, r in rates.items()}
    base = keys[f"{prefix}_all_in_one"]
    for n in CLUSTER_SIZES:
        keys[f"ratio_{name}_cluster_{n}"] = round(keys[f"{prefix}_cluster_{n}"] / base, 3)
    for key, value in keys.items():
        log(f"{key}: {value:,}")
    meta = {f"{prefix}_{side}_rounds": [round(x) for x in r] for side, r in rates.items()}
    return keys, meta


# --- ingest ---------------------------------------------------------------------------------


def ingest_round(conn: Connection, tables: list[pa.Table]) -> float:
    """Rows/s of `Connection.write` of every table to ingest.meters; checks the rows."""
    rows = len(tables) * ROWS_PER_BATCH
    began = time.perf_counter()
    written = sum(conn.write("ingest.meters", table) for table in tables)
    seconds = time.perf_counter() - began
    if written != rows:
        raise RuntimeError(f"wrote {written} rows of {rows}")
    return rows / seconds


def pipelined_round(conn: Connection, tables: list[pa.Table]) -> float:
    """Rows/s of `Connection.write_async` of every table back to back (as many under way
    as the connection keeps: 16 on a server, 16 per dnode's stream on a cluster), each
    answer checked once all are sent."""
    rows = len(tables) * ROWS_PER_BATCH
    began = time.perf_counter()
    made = [conn.write_async("ingest.meters", table) for table in tables]
    written = sum(f.result() for f in made)
    seconds = time.perf_counter() - began
    if written != rows:
        raise RuntimeError(f"wrote {written} rows of {rows}")
    return rows / seconds


def run_ingest(conns: dict[str, Connection], sizes: Sizes) -> tuple[Report, Report]:
    """Batch 0 first to every side, unmeasured (it makes the children); then round r
    writes the batches after round r - 1's, the same to every side: one write at a
    time (`ingest`), then kept under way (`ingest_pipelined`, batches after those)."""
    per_kind = sizes.data_rounds * sizes.batches
    tables = [batch(k) for k in range(1 + 2 * per_kind)]
    for conn in conns.values():
        ingest_round(conn, tables[:1])
    keys: Report = {}
    meta: Report = {}
    for name, write, first in (("ingest", ingest_round, 1),
                               ("ingest_pipelined", pipelined_round, 1 + per_kind)):  # fmt: skip

        def side(conn: Connection, write: Callable[..., float] = write, first: int = first) -> Side:
            return lambda r: write(conn, tables[first + (r - 1) * sizes.batches :][: sizes.batches])

        more_keys, more_meta = rated(
            name, alternate({s: side(c) for s, c in conns.items()}, sizes.data_rounds)
        )
        keys |= more_keys
        meta |= more_meta
    return keys, meta


# --- consume --------------------------------------------------------------------------------

# One poll while draining: short, so the loop notices the end of the backlog soon.
DRAIN_POLL_S = 0.1


def build_backlog(conns: dict[str, Connection], rows: int) -> Report:
    """The same `rows` rows written to drain.meters of every side; write rates for meta."""
    tables = [batch(k) for k in range(rows // ROWS_PER_BATCH)]
    meta: Report = {"backlog_rows": len(tables) * ROWS_PER_BATCH}
    for side, conn in conns.items():
        began = time.perf_counter()
        written = sum(conn.write("drain.meters", table) for table in tables)
        if written != meta["backlog_rows"]:
            raise RuntimeError(f"{side}: wrote {written} backlog rows of {meta['backlog_rows']}")
        meta[f"backlog_write_rows_s_{side}"] = round(written / (time.perf_counter() - began))
    return meta


def drain(address: str, group: str, expected: int, notes: list[tuple[float, int]]) -> float:
    """Rows/s of a new consumer of `group` receiving every row of topic drain_all from
    the start: the clock runs from subscribe to the last row. Then checks that it read
    every vgroup to its end and got nothing more. Appends to `notes` the seconds until
    the first message and the rows/s from there to the last row."""
    with Consumer(_consumer_config(address, group)) as consumer:
        delivered, first_rows, first_at = 0, 0, 0.0
        deadline = time.monotonic() + DEADLINE_S
        began = time.perf_counter()
        consumer.subscribe(["drain_all"])
        while delivered < expected:
            message = consumer.poll(DRAIN_POLL_S)
            if message is not None:
                delivered += sum(block.data.num_rows for block in message.blocks)
                if not first_at:
                    first_at, first_rows = time.perf_counter(), delivered
            elif time.monotonic() > deadline:
                raise RuntimeError(f"{group}: {delivered} of {expected} rows in time")
        ended = time.perf_counter()
        later = (expected - first_rows) / (ended - first_at) if ended > first_at else 0.0
        notes.append((first_at - began, round(later)))
        while True:
            parts = consumer.assignment()
            if len(parts) == VGROUPS and all(p.offset == p.end for p in parts):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{group}: not at the end: {parts}")
            message = consumer.poll(DRAIN_POLL_S)
            if message is not None:
                delivered += sum(block.data.num_rows for block in message.blocks)
        if delivered != expected:
            raise RuntimeError(f"{group}: {delivered} rows delivered, expected {expected}")
    return expected / (ended - began)


def run_consume(conns: dict[str, Connection], rows: int, rounds: int) -> tuple[Report, Report]:
    """One unmeasured drain per side first (first-call costs: the consumer's logins to
    the dnodes, the topic's first read), then the rounds."""
    for name, conn in conns.items():
        drain(conn.address, f"drain_{name}_warmup", rows, [])
    notes: dict[str, list[tuple[float, int]]] = {side: [] for side in conns}

    def side(name: str, conn: Connection) -> Side:
        return lambda r: drain(conn.address, f"drain_{name}_r{r}", rows, notes[name])

    rates = alternate({s: side(s, c) for s, c in conns.items()}, rounds)
    keys, meta = rated("consume", rates)
    for name, values in notes.items():
        meta[f"consume_first_message_s_{name}"] = [round(first, 3) for first, _ in values]
        meta[f"consume_rows_s_after_first_message_{name}"] = [later for _, later in values]
    return keys, meta


# --- latency --------------------------------------------------------------------------------

# Children of lat.probe: the producer writes to them in turn, so rows reach every vgroup.
PROBES = 8
# The producer's pace: one row every this long.
PERIOD_S = 0.005
# Unmeasured rows a producer writes first (connection set-up, first-call costs).
WARMUP_ROWS = 50
# The producer process starts (imports) in a few seconds; the rest is samples x period.
LATENCY_SLACK_S = 60.0
# One poll while waiting for a latency sample.
SAMPLE_POLL_S = 1.0


def produce(address: str, samples: int, period_s: float) -> None:
    """Producer process: WARMUP_ROWS unmeasured writes, then `samples` one-row writes
    to lat.p<i % PROBES> paced `period_s` apart, each carrying its send time
    (time.time_ns) in `sent_ns`; timestamps 1 ms apart."""

    def send(i: int, sent_ns: int) -> None:
        ts = pa.array([START_MS + WARMUP_ROWS + i], pa.timestamp("ms"))
        row = pa.table({"ts": ts, "sent_ns": pa.array([sent_ns], pa.int64())})
        conn.write(f"lat.p{i % PROBES}", row)

    with _connect(address) as conn:
        for i in range(-WARMUP_ROWS, 0):
            send(i, WARMUP_SENT_NS)
        paced(samples, period_s, lambda i: send(i, time.time_ns()))


def latencies(conn: Connection, samples: int) -> tuple[list[float], float]:
    """Produce-to-consume latencies in ms of `samples` rows written PERIOD_S apart by a
    producer process, received by a consumer subscribed (every vgroup assigned) and
    waiting in poll; and the rows/s the producer kept."""
    probes = pa.table({
        "tbname": [f"p{n}" for n in range(PROBES)],
        "ts": pa.array([START_MS - 1] * PROBES, pa.timestamp("ms")),
        "sent_ns": pa.array([WARMUP_SENT_NS] * PROBES, pa.int64()),
        "n": pa.array(range(PROBES), pa.int32()),
    })  # fmt: skip
    conn.write("lat.probe", probes)  # makes the children
    times: list[tuple[int, int]] = []
    with Consumer(_consumer_config(conn.address, "latency")) as consumer:
        consumer.subscribe(["lat_probe"])
        _until(lambda: _assigned(consumer))
        deadline = time.monotonic() + samples * PERIOD_S + LATENCY_SLACK_S
        with harness.producer(produce, conn.address, samples, PERIOD_S) as proc:
            while len(times) < samples:
                message = consumer.poll(SAMPLE_POLL_S)
                now = time.time_ns()
                if message is not None:
                    sent = [s for b in message.blocks for s in b.data["sent_ns"].to_pylist()]
                    times += [(s, now) for s in sent if s != WARMUP_SENT_NS]
                elif proc.exitcode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{len(times)} of {samples} latency samples")
    sent_at = [s for s, _ in times]
    kept = (len(sent_at) - 1) / ((max(sent_at) - min(sent_at)) / 1e9)
    return [(received - sent) / 1e6 for sent, received in times], kept


def _assigned(consumer: Consumer) -> bool:
    """Whether every vgroup is assigned to `consumer`, after one short poll (its rows,
    the probes' warm-up ones, are dropped)."""
    consumer.poll(POLL_S)
    return len(consumer.assignment()) == VGROUPS


def run_latency(conns: dict[str, Connection], samples: int) -> tuple[Report, Report]:
    keys: Report = {}
    meta: Report = {"latency_samples": samples, "latency_period_ms": PERIOD_S * 1000}
    for side, conn in conns.items():
        ms, kept = latencies(conn, samples)
        cuts = statistics.quantiles(ms, n=100, method="inclusive")
        keys[f"latency_ms_p50_{side}"] = round(cuts[49], 3)
        keys[f"latency_ms_p99_{side}"] = round(cuts[98], 3)
        meta[f"latency_ms_max_{side}"] = round(max(ms), 3)
        meta[f"latency_producer_rows_s_{side}"] = round(kept)
        log(f"latency {side}: p50 {cuts[49]:.2f} ms, p99 {cuts[98]:.2f} ms, max {max(ms):.1f}")
    return keys, meta


# --- a dnode's failure ----------------------------------------------------------------------

# How often a write is tried again while it is expected to fail (kill) or succeed
# (restart): it adds at most this much to the figure.
RETRY_S = 0.01
# The v of the row each restart's write carries: none of the batches' rows has it.
MARKER = 2_000_000_000
# One poll of the watching consumer: short, so that stopping it is quick.
WATCH_POLL_S = 0.2


class Watcher:
    """A consumer of a topic over f.meters polling in a thread of its own: when each
    row's `v` first arrived (perf_counter), and the errors its polls raised."""

    def __init__(self, address: str, topic: str) -> None:
        self.arrived: dict[int, float] = {}
        self.errors: Counter[str] = Counter()
        self.failed: BaseException | None = None
        self._config = _consumer_config(address, "watch")
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=DEADLINE_S)

    def _run(self) -> None:
        try:
            with Consumer(self._config) as consumer:
                consumer.subscribe([self._topic])
                while not self._stop.is_set():
                    try:
                        message = consumer.poll(WATCH_POLL_S)
                    except Error as exc:  # counted: a poll is not supposed to raise here
                        self.errors[f"{type(exc).__name__}: {exc}"[:200]] += 1
                        time.sleep(WATCH_POLL_S)
                        continue
                    now = time.perf_counter()
                    for block in message.blocks if message is not None else ():
                        for v in block.data["v"].to_pylist():
                            self.arrived.setdefault(v, now)
        except BaseException as exc:
            self.failed = exc

    def wait(self, v: int) -> float:
        """When the row of `v` arrived (perf_counter)."""
        _until(lambda: v in self.arrived or self.failed is not None)
        if self.failed is not None:
            raise RuntimeError("the watching consumer failed") from self.failed
        return self.arrived[v]


def _victim_table(made: Cluster, victim: ServerChild) -> str:
    """A child of f.meters whose vgroup is on `victim`."""
    rows = _rows(made.mnode.address, "SHOW f.VGROUPS")
    placement = {int(str(r[1])): str(r[3]) for r in rows}
    database = load_readonly(made.mnode.data / CATALOG_FILE)[0].databases["f"]
    for n in range(CHILDREN):
        if placement[vgroup_for(database, f"d{n}")] == victim.address:
            return f"f.d{n}"
    raise RuntimeError(f"no child of f.meters on {victim.address}")


def _rows(address: str, sql: str) -> list[tuple[Any, ...]]:
    with _connect(address) as conn:
        return list(conn.execute(sql).rows)


def _until_raises(write: Callable[[], object]) -> None:
    """Until `write()` raises VgroupUnavailable (tried every RETRY_S)."""
    began = time.perf_counter()
    while time.perf_counter() - began < DEADLINE_S:
        try:
            write()
        except VgroupUnavailable:
            return
        time.sleep(RETRY_S)
    raise RuntimeError(f"writes still succeed {DEADLINE_S:.0f} s after the kill")


def _until_written(write: Callable[[], object], errors: Counter[str]) -> None:
    """`write()` tried every RETRY_S until it succeeds; the errors met, by type."""
    began = time.perf_counter()
    while True:
        try:
            write()
        except Error as exc:
            errors[type(exc).__name__] += 1
            if time.perf_counter() - began > DEADLINE_S:
                raise
            time.sleep(RETRY_S)
        else:
            return


def run_failure(root: Path, sizes: Sizes) -> tuple[Report, Report]:
    """SIGKILL a dnode hosting half the vgroups while a consumer polls them: until a
    write to its rows raises VgroupUnavailable, until they show offline (SHOW VGROUPS);
    restart it on its directory and port: until a row written to it reaches the
    consumer, until they are ready again (both from the restart's start)."""
    figures: dict[str, list[float]] = {
        "dnode_kill_to_error_s": [], "dnode_offline_s": [], "dnode_restart_ready_s": [],
        "dnode_restart_to_delivery_s": [],
        # meta: from the restarted dnode's ready line
        "dnode_ready_line_to_written_s": [], "dnode_ready_line_to_delivery_s": [],
    }  # fmt: skip
    write_errors: Counter[str] = Counter()
    with cluster(root / "failure", 2) as made, _connect(made.mnode.address) as conn:
        conn.execute(
            f"CREATE DATABASE f VGROUPS {VGROUPS}; {STABLE_SQL.format(db='f')}; "
            "CREATE TOPIC f_all AS SELECT ts, v FROM f.meters"
        )
        victim = made.dnodes[1]

        def statuses() -> set[str]:
            rows = conn.execute("SHOW f.VGROUPS").rows
            return {str(r[4]) for r in rows if r[3] == victim.address}

        _until(lambda: statuses() == {"ready"})
        conn.write("f.meters", batch(0))  # the children, on both dnodes
        table = _victim_table(made, victim)
        with Watcher(made.mnode.address, "f_all") as watcher, ThreadPoolExecutor(1) as pool:
            watcher.wait(ROWS_PER_BATCH - 1)  # polling every vgroup
            for k in range(sizes.kills):
                ts = START_MS + 1_000_000 + k
                began = time.perf_counter()
                victim.kill()
                _until_raises(functools.partial(conn.write, table, one_row(ts, 0)))
                figures["dnode_kill_to_error_s"].append(time.perf_counter() - began)
                _until(lambda: statuses() == {"offline"})
                figures["dnode_offline_s"].append(time.perf_counter() - began)
                began = time.perf_counter()
                port = int(victim.address.rsplit(":", 1)[1])  # the same endpoint as before
                ready = pool.submit(_ready_after, made.mnode.address, victim.address, began)
                victim = start_dnode(made.root, "dnode2", made.mnode.address, port)
                made.dnodes[1] = victim
                up = time.perf_counter()
                marked = functools.partial(conn.write, table, one_row(ts, MARKER + k))
                _until_written(marked, write_errors)
                figures["dnode_ready_line_to_written_s"].append(time.perf_counter() - up)
                arrived = watcher.wait(MARKER + k)
                figures["dnode_restart_to_delivery_s"].append(arrived - began)
                figures["dnode_ready_line_to_delivery_s"].append(arrived - up)
                figures["dnode_restart_ready_s"].append(ready.result())
                log("kill: " + ", ".join(f"{name} {v[-1]:.3f}" for name, v in figures.items()))
        poll_errors = dict(watcher.errors)
    report: Report = {name: round(statistics.median(v), 4) for name, v in figures.items()}
    keys = {k: v for k, v in report.items() if "_ready_line_" not in k}
    meta: Report = {k: v for k, v in report.items() if "_ready_line_" in k} | {
        "failure_rounds": {name: [round(x, 4) for x in v] for name, v in figures.items()},
        "restart_write_errors": dict(write_errors),
        "restart_poll_errors": poll_errors,
    }
    return keys, meta


def _ready_after(mnode: str, endpoint: str, began: float) -> float:
    """Seconds from `began` until SHOW VGROUPS says the vgroups of f at `endpoint` are
    ready (on a connection of its own)."""
    with _connect(mnode) as conn:

        def ready() -> bool:
            rows = conn.execute("SHOW f.VGROUPS").rows
            return {str(r[4]) for r in rows if r[3] == endpoint} == {"ready"}

        _until(ready)
    return time.perf_counter() - began


# --- the run --------------------------------------------------------------------------------


def goals(report: Report) -> Report:
    """Each goal of issue 16: met or not, with its figure and limit."""

    def goal(figure: str, limit: float, at_least: bool) -> Report:
        value = report[figure]
        met = value >= limit if at_least else value <= limit
        return {"met": met, "figure": figure, "value": value, ("min" if at_least else "max"): limit}

    checks = {
        "ingest_cluster_1": goal("ratio_ingest_cluster_1", RATIO_GOAL, True),
        "consume_cluster_1": goal("ratio_consume_cluster_1", RATIO_GOAL, True),
        "latency_p50_cluster_1": goal("latency_ms_p50_cluster_1", LATENCY_P50_GOAL_MS, False),
        "restart_to_delivery": goal("dnode_restart_to_delivery_s", RESTART_DELIVERY_GOAL_S, False),
    }
    return checks | {"all_met": all(c["met"] for c in checks.values())}


NOTES = {
    "method": (
        "The sides: one `sqltopic server`, and an mnode with 1, 2 and 3 dnodes (all "
        "started at once, idle while another side runs), every process on this "
        "machine's cores over loopback. Databases VGROUPS 4, default WAL_LEVEL (1). "
        "Rates are medians of rounds; the sides alternate, order reversed every other "
        "round. Ratios are cluster / server."
    ),
    "ingest_note": (
        f"One client, one call at a time: Connection.write of prebuilt {ROWS_PER_BATCH:,}-"
        f"row Arrow tables (tbname, ts, v, t) to ingest.meters, {CHILDREN} existing "
        "children interleaved in each (one unmeasured batch first made them); on a "
        "cluster each batch is split by the dnode hosting its rows' vgroups. "
        "ingest_pipelined: the same batches (later ones) by Connection.write_async back "
        "to back, every answer checked after the round's last send (16 under way on a "
        "server's Writes stream; on a cluster 16 per dnode's stream)."
    ),
    "consume_note": (
        "rows_s = backlog rows / seconds from subscribe() to the delivery of the last "
        "row, by one Consumer of a new group (auto.offset.reset earliest, defaults "
        "otherwise) of topic drain_all (SELECT * FROM drain.meters); then every vgroup's "
        "position is checked to be its end. meta consume_first_message_s: subscribe() to "
        "the first message; consume_rows_s_after_first_message: the rows after it / "
        "the seconds from it to the last row. One unmeasured drain per side first."
    ),
    "latency_note": (
        f"A producer process writes one row every {PERIOD_S * 1000:g} ms (paced; "
        f"Connection.write to lat.p<i % {PROBES}>) carrying time.time_ns() in sent_ns; "
        "the consumer (subscribed, every vgroup assigned, waiting in poll, defaults "
        "otherwise) records time.time_ns() when poll returns. "
        f"{WARMUP_ROWS} unmeasured rows first. *_producer_rows_s: the rate it kept."
    ),
    "failure_note": (
        "An mnode and 2 dnodes, database f VGROUPS 4 (2 on the victim), a consumer of "
        "SELECT ts, v FROM f.meters polling in a thread. kill_to_error: SIGKILL until a "
        f"write to a child on the victim raises VgroupUnavailable (tried every {RETRY_S} "
        "s); offline: SIGKILL until SHOW VGROUPS says offline; restart_to_delivery: the "
        "restart's start (a new process on the same directory and port) until the "
        "consumer received a row written to the victim (the write tried every "
        f"{RETRY_S} s until it succeeds); restart_ready: until SHOW VGROUPS says ready. "
        "meta dnode_ready_line_to_*: from the restarted process's ready line until that "
        "write succeeded and until the row arrived; restart_write_errors: the failed "
        "writes before, by type; restart_poll_errors: errors the consumer's poll raised."
    ),
}


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    del seed  # nothing random here
    seconds: dict[str, float] = {}
    report: Report = {}
    meta: Report = machine_meta(root, sizes) | NOTES
    with harness.phase(log, "ddl", seconds):
        report |= run_ddl(root, sizes)
    with contextlib.ExitStack() as stack:
        with harness.phase(log, "start", seconds):
            conns = stack.enter_context(deployments(root))
        with harness.phase(log, "ingest", seconds):
            keys, more = run_ingest(conns, sizes)
            report |= keys
            meta |= more
        with harness.phase(log, "consume", seconds):
            meta |= build_backlog(conns, sizes.backlog_rows)
            keys, more = run_consume(conns, sizes.backlog_rows, sizes.data_rounds)
            report |= keys
            meta |= more
        with harness.phase(log, "latency", seconds):
            keys, more = run_latency(conns, sizes.latency_samples)
            report |= keys
            meta |= more
    with harness.phase(log, "failure", seconds):
        keys, more = run_failure(root, sizes)
        report |= keys
        meta |= more
    report["goals"] = goals(report)
    return report | {"meta": meta | {"phase_seconds": seconds}}


def machine_meta(root: Path, sizes: Sizes) -> Report:
    paths = ["../server", "../sql", "../client", "../wal"]
    status = harness.command(["git", "status", "--porcelain", *paths])
    return harness.machine_meta(
        root,
        libraries={"pyarrow": pa.__version__, "grpcio": grpc.__version__},
        status={"server_git_status": "; ".join(s.strip() for s in status.splitlines()) or "clean"},
        settings={
            "vgroups": VGROUPS,
            "poll_s": POLL_S,
            "rows_per_batch": ROWS_PER_BATCH,
            "children": CHILDREN,
        },
        sizes=sizes,
        quick=sizes == QUICK,
    )


if __name__ == "__main__":
    sys.exit(
        harness.main(
            None,
            name="cluster_bench",
            doc=__doc__,
            run=run,
            full=FULL,
            quick=QUICK,
            quick_help="a smoke run (~2 min)",
            seed_help="unused",
        )
    )
