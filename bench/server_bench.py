"""Benchmark of a real `sqltopic server` process over gRPC, against Redis Streams on
loopback (bench/redis_peer.py) in the same run.

1. Ingest: prebuilt 10,000-row Arrow tables written to `meters` with `tbname` and tag
   columns (`Connection.write`), and prebuilt 1,000-row INSERT statements
   (`Connection.execute`), one client, into databases at WAL_LEVEL 2 and 1; against
   pipelined batches of 10,000 and 1,000 XADDs (one field per column) into Redis with
   `appendfsync always` and `everysec`; and the same Arrow writes at WAL_LEVEL 2 to a
   second server speaking TLS (certificates made by trustme), against the plain text;
2. consume: a backlog of 10,000,000 rows (10,000-row writes over 100 children and 4
   vgroups) drained from the start by one `sqltopic.client.consumer.Consumer` through query
   topics `SELECT ts, current, voltage FROM meters WHERE voltage > X` keeping 50 %, 1 %
   and 100 % of the rows; against XREADGROUP of the same rows, filtered client-side;
3. latency: a producer process writing one row every millisecond, each carrying its
   send time, to an idle subscribed consumer; against XADD and a blocked XREAD.

Rebalancing is measured by bench/rebalance_bench.py. `--json` prints one JSON object on
stdout (progress goes to stderr), otherwise a table; `--quick` is a small smoke run.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import harness
import pyarrow as pa
import pyarrow.compute as pc
import redis_peer as rp
import trustme
from engine_bench import (
    CHILDREN,
    GROUPS,
    LOCATIONS,
    ROWS_PER_STATEMENT,
    ROWS_PER_WRITE,
    SELECTIVITIES,
    START_MS,
    meters_table,
    statement,
    with_tags,
)  # fmt: skip
from harness import Report, Side, alternate

from sqltopic.cli.spawn import ServerChild
from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import TopicPartition
from sqltopic.sql.entries import vnode_dir

# The bench's server binds loopback only, where the default root password is allowed.
ROOT_PASSWORD = "taosdata"
VGROUPS = 4
# Distinct data tables reused by the ingest writes (their tags and targets vary).
DATA_TABLES = 8
# Goals (issue 4): rows/s of Arrow writes and INSERTs at WAL_LEVEL 2, rows scanned/s of
# the 50 % drain, and produce-to-consume latency percentiles.
ARROW_GOAL_ROWS_S = 1_000_000
SQL_GOAL_ROWS_S = 150_000
CONSUME_GOAL_ROWS_S = 5_000_000
LATENCY_P50_GOAL_MS = 2.0
LATENCY_P99_GOAL_MS = 10.0
# Goal (issue 12): Arrow ingest over TLS at least this share of plain text's, same run.
TLS_GOAL_SHARE = 0.8
SCHEMA_SQL = (
    "CREATE DATABASE {db} VGROUPS {vgroups} WAL_LEVEL {level}; USE {db}; "
    "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
    "TAGS (location VARCHAR(64), groupid INT)"
)
# The Redis streams: ingest entries, and the consume backlog.
INGEST_STREAM = "meters"
BACKLOG_STREAM = "backlog"


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    arrow_writes: int  # 10,000-row Arrow writes (and 10,000-XADD batches) per round
    statements: int  # 1,000-row INSERTs (and 1,000-XADD batches) per round
    ingest_rounds: int  # rounds per ingest variant, the two WAL levels alternating
    backlog_rows: int  # rows the consumers drain, written ROWS_PER_WRITE at a time
    consume_rounds: int  # drains per selectivity and side, sides alternating
    latency_samples: int  # rows timed from producer to consumer, per side


FULL = Sizes(
    arrow_writes=50, statements=100, ingest_rounds=5, backlog_rows=10_000_000,
    consume_rounds=1, latency_samples=5_000,
)  # fmt: skip
QUICK = Sizes(
    arrow_writes=4, statements=10, ingest_rounds=2, backlog_rows=100_000,
    consume_rounds=1, latency_samples=200,
)  # fmt: skip

log = harness.logger("server_bench")


# --- the server process ----------------------------------------------------------------


@contextlib.contextmanager
def sqltopic_server(root: Path, extra: Sequence[str] = ()) -> Iterator[ServerChild]:
    """A server on `root`'s data directory and a free loopback port (port 0: the server
    binds one and names it in its ready line), stopped gracefully at the end; `extra`:
    more server options."""
    with ServerChild(root / "sqltopic-data", 0, ROOT_PASSWORD, extra) as server:
        server.start()
        yield server


@dataclass(frozen=True)
class Certificates:
    """PEM files: the CA clients trust, and the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path

    def server_args(self) -> list[str]:
        return ["--tls-cert", str(self.cert), "--tls-key", str(self.key)]


def make_certificates(directory: Path) -> Certificates:
    """A new CA and a certificate it signed for 127.0.0.1, written to `directory`."""
    directory.mkdir(parents=True)
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    files = Certificates(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    files.ca.write_bytes(ca.cert_pem.bytes())
    files.cert.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    files.key.write_bytes(issued.private_key_pem.bytes())
    return files


def create_schema(conn: Connection, db: str, level: int, segment_kb: int | None = None) -> None:
    """Database `db` (VGROUPS 4, WAL_LEVEL `level`, WAL_SEGMENT_SIZE `segment_kb` when
    given) with meters and children d0.."""
    sql = SCHEMA_SQL.format(db=db, vgroups=VGROUPS, level=level)
    if segment_kb is not None:
        sql = sql.replace(
            f"WAL_LEVEL {level};", f"WAL_LEVEL {level} WAL_SEGMENT_SIZE {segment_kb};"
        )
    conn.execute(sql)
    conn.execute(
        "; ".join(
            f"CREATE TABLE d{i} USING meters TAGS ('{LOCATIONS[i % len(LOCATIONS)]}', {i % GROUPS})"
            for i in range(CHILDREN)
        )
    )


# --- ingest ----------------------------------------------------------------------------


def arrow_round(conn: Connection, db: str, tables: list[pa.Table]) -> float:
    """Rows/s of `Connection.write` of every table to `db`.meters; checks the rows."""
    rows: int = sum(t.num_rows for t in tables)
    start = time.perf_counter()
    written = sum(conn.write(f"{db}.meters", table) for table in tables)
    seconds = time.perf_counter() - start
    if written != rows:
        raise RuntimeError(f"wrote {written} rows of {rows}")
    return rows / seconds


def sql_round(conn: Connection, db: str, statements: list[str]) -> float:
    """Rows/s of `Connection.execute` of every statement in `db`; checks the rows."""
    conn.execute(f"USE {db}")
    start = time.perf_counter()
    written = sum(conn.execute(sql).affected_rows for sql in statements)
    seconds = time.perf_counter() - start
    if written != len(statements) * ROWS_PER_STATEMENT:
        raise RuntimeError(f"inserted {written} rows of {len(statements) * ROWS_PER_STATEMENT}")
    return len(statements) * ROWS_PER_STATEMENT / seconds


def ingest_data(sizes: Sizes, seed: int) -> tuple[list[list[pa.Table]], list[list[str]]]:
    """Per round (plus one warm-up round first): the Arrow tables (one child each, with
    tbname and tags) and the INSERT statements (integer ms timestamps)."""
    data = [
        meters_table(START_MS + i * ROWS_PER_WRITE, ROWS_PER_WRITE, i) for i in range(DATA_TABLES)
    ]
    tables, statements = [], []
    rng = random.Random(seed)
    for r in range(sizes.ingest_rounds + 1):
        children = [(r * sizes.arrow_writes + n) % CHILDREN for n in range(sizes.arrow_writes)]
        tables.append([with_tags(data[c % DATA_TABLES], [f"d{c}"], [c]) for c in children])
        first = r * sizes.statements
        statements.append(
            [statement("integer_ts", first + n, rng) for n in range(sizes.statements)]
        )
    return tables, statements


def peer_batches(tables: list[pa.Table], statements: int) -> tuple[list[bytes], list[bytes]]:
    """The XADD batches matching one round: 10,000 entries with the Arrow write's seven
    columns each, and `statements` batches of 1,000 entries with an INSERT's four values
    and its table's name (slices of the same tables)."""
    big = [rp.xadd_commands(INGEST_STREAM, table) for table in tables]
    small = []
    for n in range(statements):
        table = tables[n % len(tables)].drop_columns(["location", "groupid"])
        first = (n // len(tables)) * ROWS_PER_STATEMENT % ROWS_PER_WRITE
        small.append(rp.xadd_commands(INGEST_STREAM, table.slice(first, ROWS_PER_STATEMENT)))
    return big, small


@dataclass(frozen=True)
class IngestWork:
    """Per round (round 0 is the warm-up): Arrow tables, INSERTs, and XADD batches."""

    tables: list[list[pa.Table]]
    statements: list[list[str]]
    batches: list[tuple[list[bytes], list[bytes]]]

    def sides(self, conn: Connection, level: int, client: rp.Resp) -> dict[str, Side]:
        """The four ingest measurements at WAL level `level` (Redis: `client`)."""
        db, suffix = f"ingest{level}", "" if level == 2 else f"_wal{level}"
        arrow_round(conn, db, self.tables[0][:2])  # unmeasured warm-ups
        sql_round(conn, db, self.statements[0][:2])
        rp.xadd_round(client, [(self.batches[0][0][0], ROWS_PER_WRITE)])
        return {
            f"ingest_arrow_rows_s{suffix}": lambda r: arrow_round(conn, db, self.tables[r]),
            f"ingest_sql_rows_s{suffix}": lambda r: sql_round(conn, db, self.statements[r]),
            f"redis_xadd_rows_s_batch10k{suffix}": lambda r: rp.xadd_round(
                client, [(b, ROWS_PER_WRITE) for b in self.batches[r][0]]
            ),
            f"redis_xadd_rows_s_batch1k{suffix}": lambda r: rp.xadd_round(
                client, [(b, ROWS_PER_STATEMENT) for b in self.batches[r][1]]
            ),
        }


def tls_side(conn: Connection, work: IngestWork) -> dict[str, Side]:
    """Arrow writes at WAL level 2 as `ingest_arrow_rows_s` does, to a TLS server."""
    create_schema(conn, "ingest2", 2)
    arrow_round(conn, "ingest2", work.tables[0][:2])  # unmeasured warm-up
    return {"ingest_arrow_rows_s_tls": lambda r: arrow_round(conn, "ingest2", work.tables[r])}


def metrics_side(conn: Connection, work: IngestWork) -> dict[str, Side]:
    """Arrow writes at WAL level 2 as `ingest_arrow_rows_s` does, to the server whose
    /metrics is scraped every SCRAPE_PERIOD_S."""
    create_schema(conn, "ingest2", 2)
    arrow_round(conn, "ingest2", work.tables[0][:2])  # unmeasured warm-up
    return {"ingest_arrow_rows_s_metrics": lambda r: arrow_round(conn, "ingest2", work.tables[r])}


def next_to(sides: dict[str, Side], key: str, more: dict[str, Side]) -> dict[str, Side]:
    """`sides` with `more` inserted right after `key`."""
    placed: dict[str, Side] = {}
    for name, side in sides.items():
        placed[name] = side
        if name == key:
            placed |= more
    return placed


def run_ingest(
    conn: Connection, peers: dict[int, int], sizes: Sizes, seed: int, tls_conn: Connection,
    metered: Connection,
) -> tuple[Report, Report]:  # fmt: skip
    """sqltopic and Redis ingest at both durability levels; `peers`: WAL level -> port;
    Arrow writes to the TLS server of `tls_conn` and to the scraped one of `metered` in
    the same rounds."""
    for level in peers:
        create_schema(conn, f"ingest{level}", level)
    tables, statements = ingest_data(sizes, seed)
    work = IngestWork(tables, statements, [peer_batches(t, sizes.statements) for t in tables])
    with contextlib.ExitStack() as stack:
        sides: dict[str, Side] = {}
        for level, port in peers.items():
            sides |= work.sides(conn, level, stack.enter_context(rp.Resp(port)))
        # next to the plain-text writes it is compared with, in every round's order, so
        # that the machine's drift during a round falls on both alike
        more = tls_side(tls_conn, work) | metrics_side(metered, work)
        sides = next_to(sides, "ingest_arrow_rows_s", more)
        rates = alternate(sides, sizes.ingest_rounds)
    keys = {name: harness.median_rate(r) for name, r in rates.items()}
    for name in sorted(keys):
        log(f"{name}: {keys[name]:,} rows/s")
    meta = {f"{name}_rounds": [round(x) for x in r] for name, r in rates.items()}
    for level in peers:
        conn.execute(f"DROP DATABASE ingest{level}")
    tls_conn.execute("DROP DATABASE ingest2")
    metered.execute("DROP DATABASE ingest2")
    return keys, meta


# --- consume ---------------------------------------------------------------------------

# The backlog's Redis entries: the rows written to child d<n>, with the child's name.
BACKLOG_SHAPE = rp.StreamShape(
    ("ts", "current", "voltage", "phase", "tbname"),
    {"ts": pa.int64(), "current": pa.float32(), "voltage": pa.int32()},
)
TOPIC_SQL = "SELECT ts, current, voltage FROM power.meters WHERE voltage > {x}"
# The headline selectivity first, then the others.
CONSUME_ORDER = (50, 1, 100)
# min.poll.rows of the headline's extra drain: at the default 4,096 a poll of the 50 %
# topic covers one 10,000-row WAL entry; at this many it covers about twenty.
BIG_MIN_POLL_ROWS = 100_000
# One poll call while draining: short, so the loop notices the end of the backlog soon.
DRAIN_POLL_S = 0.1
# A whole drain of the full backlog takes seconds to a minute; this only stops a hang.
DRAIN_DEADLINE_S = 900.0


# The backlog's WAL segments (KB): ~60 MB per vgroup of the full backlog in several
# segments, so that seeking by time crosses segments as a long-lived vnode's WAL has.
BACKLOG_SEGMENT_KB = 8 * 1024
# Every this many backlog writes, the wall clock (ms) before the write is kept: the
# times the seek phase looks up.
MARK_EVERY = 10


@dataclass(frozen=True)
class Backlog:
    rows: int
    matching: dict[int, int]  # selectivity in percent -> rows with voltage > X
    marks: list[int]  # wall-clock ms taken before some writes, rising


def build_backlog(conn: Connection, port: int, rows: int) -> tuple[Backlog, Report]:
    """The same `rows` rows written to database `power` (WAL_LEVEL 1; ROWS_PER_WRITE
    per write, write k into child k % CHILDREN) and XADDed to Redis' BACKLOG_STREAM."""
    create_schema(conn, "power", 1, BACKLOG_SEGMENT_KB)
    matching = dict.fromkeys(SELECTIVITIES, 0)
    seconds = {"write": 0.0, "xadd": 0.0}
    marks: list[int] = []
    with rp.Resp(port) as client:
        for k in range(rows // ROWS_PER_WRITE):
            if k % MARK_EVERY == 0:
                marks.append(time.time_ns() // 1_000_000)
            child = k % CHILDREN
            data = meters_table(START_MS + k * ROWS_PER_WRITE, ROWS_PER_WRITE, 3 * k + 1000)
            tbname = pa.repeat(pa.scalar(f"d{child}"), ROWS_PER_WRITE)
            commands = rp.xadd_commands(BACKLOG_STREAM, data.append_column("tbname", tbname))
            start = time.perf_counter()
            conn.write(f"power.d{child}", data)
            middle = time.perf_counter()
            client.send(commands)
            client.expect_ids(ROWS_PER_WRITE)
            seconds["write"] += middle - start
            seconds["xadd"] += time.perf_counter() - middle
            for percent, x in SELECTIVITIES.items():
                matching[percent] += pc.sum(pc.greater(data["voltage"], x)).as_py()
    meta = {
        "backlog_rows": rows,
        "backlog_write_rows_s": round(rows / seconds["write"]),
        "backlog_xadd_rows_s": round(rows / seconds["xadd"]),
    }
    return Backlog(rows, matching, marks), meta


def drain_topic(
    address: str, topic: str, group: str, backlog: Backlog, percent: int,
    settings: dict[str, str] | None = None,
) -> float:  # fmt: skip
    """Seconds for a new consumer of group `group` to receive every row of `topic` from
    the start of the backlog: the clock runs from subscribe to the last matching row.
    Then checks that it read every vgroup to its end and got nothing more."""
    expected = backlog.matching[percent]
    config = {"server": address, "group.id": group, "auto.offset.reset": "earliest"}
    consumer = Consumer(config | (settings or {}))
    try:
        delivered = 0
        deadline = time.monotonic() + DRAIN_DEADLINE_S
        start = time.perf_counter()
        consumer.subscribe([topic])
        while delivered < expected:
            message = consumer.poll(DRAIN_POLL_S)
            if message is not None:
                delivered += sum(block.data.num_rows for block in message.blocks)
            elif time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: {delivered} of {expected} rows in time")
        seconds = time.perf_counter() - start
        check_drained(consumer, topic, delivered, expected)
    finally:
        consumer.close()
    return seconds


def check_drained(consumer: Consumer, topic: str, delivered: int, expected: int) -> None:
    """Poll until the position of every vgroup is its end; no more rows may come."""
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    while True:
        parts = consumer.assignment()
        at_end = len(parts) == VGROUPS and all(p.offset == p.end for p in parts)
        if at_end and delivered == expected:
            return
        if delivered > expected or time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: {delivered} rows (expected {expected}), at {parts}")
        message = consumer.poll(DRAIN_POLL_S)
        if message is not None:
            delivered += sum(block.data.num_rows for block in message.blocks)


def drain_redis(port: int, group: str, backlog: Backlog, percent: int) -> float:
    """Seconds for a new Redis consumer group to read the backlog stream, filtered
    client-side; checks the entries read and the rows kept."""
    entries, delivered, seconds = rp.drain_group(
        port, BACKLOG_STREAM, group, BACKLOG_SHAPE, "voltage", SELECTIVITIES[percent]
    )
    if entries != backlog.rows or delivered != backlog.matching[percent]:
        raise RuntimeError(f"redis {group}: {entries} entries, {delivered} rows kept")
    return seconds


def consume_sides(conn: Connection, port: int, backlog: Backlog, percent: int) -> dict[str, Side]:
    """Both sides' drains at selectivity `percent` (topic bench_sel<percent>)."""
    topic, sel = f"bench_sel{percent}", "" if percent == 50 else f"_sel{percent}"
    conn.execute(f"CREATE TOPIC {topic} AS {TOPIC_SQL.format(x=SELECTIVITIES[percent])}")

    def ours(r: int) -> float:
        return backlog.rows / drain_topic(conn.address, topic, f"{topic}_r{r}", backlog, percent)

    def theirs(r: int) -> float:
        return backlog.rows / drain_redis(port, f"{topic}_r{r}", backlog, percent)

    def bigger_polls(r: int) -> float:
        group, settings = f"{topic}_big_r{r}", {"min.poll.rows": str(BIG_MIN_POLL_ROWS)}
        return backlog.rows / drain_topic(conn.address, topic, group, backlog, percent, settings)

    sides: dict[str, Side] = {f"consume_rows_s{sel}": ours, f"redis_consume_rows_s{sel}": theirs}
    if percent == CONSUME_ORDER[0]:
        sides[f"consume_rows_s{sel}_minrows{BIG_MIN_POLL_ROWS // 1000}k"] = bigger_polls
    return sides


def run_consume(
    conn: Connection, port: int, backlog: Backlog, rounds: int
) -> tuple[Report, Report]:  # fmt: skip
    keys: Report = {}
    meta: Report = {}
    for percent in CONSUME_ORDER:
        rates = alternate(consume_sides(conn, port, backlog, percent), rounds)
        for name, values in rates.items():
            keys[name] = harness.median_rate(values)
            meta[f"{name}_rounds"] = [round(v) for v in values]
            log(f"{name}: {keys[name]:,} rows scanned/s")
        sel = "" if percent == 50 else f"_sel{percent}"
        keys[f"consume_rows_delivered{sel}"] = backlog.matching[percent]
        meta[f"topic_sql{sel}"] = TOPIC_SQL.format(x=SELECTIVITIES[percent])
    return keys, meta


# --- seek by time ----------------------------------------------------------------------

# Look-ups timed per side: one offsets_for_times call over every vgroup of the backlog
# (Redis: one XRANGE of the stream from the time, COUNT 1).
SEEK_SAMPLES = 200
SEEK_TIME_GOAL_MS = 5.0


def run_seek(
    conn: Connection, data_dir: Path, port: int, backlog: Backlog
) -> tuple[Report, Report]:  # fmt: skip
    """Milliseconds per look-up by time over the backlog: Consumer.offsets_for_times of
    every vgroup, and Redis' XRANGE from the same time; the answers checked to rise
    with the time and to lie in the retained ranges."""
    conn.execute("CREATE TOPIC IF NOT EXISTS seek_all AS SELECT * FROM power.meters")
    vgroups = sorted(int(r[1]) for r in conn.execute("SHOW power.VGROUPS").rows)
    times = sorted(random.Random(SEEK_SAMPLES).choices(backlog.marks, k=SEEK_SAMPLES))
    ours: list[float] = []
    with Consumer({"server": conn.address, "group.id": "bench_seek"}) as consumer:
        found: list[list[int]] = []
        for when in times:
            parts = [TopicPartition("seek_all", v, when) for v in vgroups]
            start = time.perf_counter()
            answer = consumer.offsets_for_times(parts)
            ours.append((time.perf_counter() - start) * 1000)
            assert all(p.begin is not None and p.end is not None for p in answer)
            assert all(p.begin <= p.offset <= p.end for p in answer)  # type: ignore[operator]
            found.append([p.offset for p in answer])  # type: ignore[misc]
    for column in zip(*found, strict=True):
        if list(column) != sorted(column):
            raise RuntimeError("offsets_for_times went back as the time rose")
    theirs: list[float] = []
    with rp.Resp(port) as client:
        for when in times:
            start = time.perf_counter()
            client.call("XRANGE", BACKLOG_STREAM, f"{when}-0", "+", "COUNT", 1)
            theirs.append((time.perf_counter() - start) * 1000)
    segments = {v: len(list((vnode_dir(data_dir, v) / "wal").glob("*.log"))) for v in vgroups}
    keys = {
        "seek_time_ms": round(statistics.median(ours), 3),
        "seek_time_ms_redis": round(statistics.median(theirs), 3),
        "ratio_seek_time": round(statistics.median(ours) / statistics.median(theirs), 2),
    }
    log(f"seek by time: {keys['seek_time_ms']} ms (Redis XRANGE {keys['seek_time_ms_redis']} "
        f"ms), segments per vgroup {segments}")  # fmt: skip
    meta = {
        "seek_time_ms_p99": round(sorted(ours)[int(0.99 * len(ours))], 3),
        "seek_wal_segments": segments,
        "seek_samples": SEEK_SAMPLES,
    }
    return keys, meta


# --- latency ---------------------------------------------------------------------------

LATENCY_DB_SQL = (
    "CREATE DATABASE lat VGROUPS {vgroups} WAL_LEVEL 1; USE lat; "
    "CREATE STABLE probe (ts TIMESTAMP, sent_ns BIGINT) TAGS (n INT); "
    "CREATE TOPIC bench_latency AS SELECT ts, sent_ns FROM lat.probe"
)
# Children of `probe`: the producer writes to them in turn, so rows reach every vgroup.
PROBES = 8
# The producer's pace: one row per millisecond.
PERIOD_S = 0.001
# An extra, informational run at a tenth of that pace (at most this many samples): the
# same path without the queueing of a server that cannot keep up with 1,000 rows/s.
SLOW_PERIOD_S = 0.01
SLOW_SAMPLES = 500
# Unmeasured rows a producer writes first (connection set-up, first-call costs).
WARMUP_ROWS = 50
# One poll of the idle consumer, before the producer starts: it sets the positions.
IDLE_POLL_S = 0.5
# The producer process starts (imports) in a few seconds; the rest is samples x period.
LATENCY_SLACK_S = 60.0
# One poll while waiting for a latency sample.
SAMPLE_POLL_S = 1.0


def produce(address: str, samples: int, period_s: float, first_ms: int) -> None:
    """Producer process: WARMUP_ROWS unmeasured INSERTs, then `samples` one-row INSERTs
    paced `period_s` apart, each carrying its send time (time.time_ns) in `sent_ns`;
    timestamps from `first_ms` on, 1 ms apart."""

    def insert(i: int, sent_ns: int) -> None:
        ts = first_ms + WARMUP_ROWS + i
        conn.execute(f"INSERT INTO p{i % PROBES} VALUES ({ts}, {sent_ns})")

    with connect(address, database="lat") as conn:
        for i in range(-WARMUP_ROWS, 0):
            insert(i, rp.WARMUP_SENT_NS)
        rp.paced(samples, period_s, lambda i: insert(i, time.time_ns()))


def latencies_sqltopic(
    address: str, samples: int, period_s: float, group: str, first_ms: int
) -> list[tuple[int, int]]:
    """(send, receive) times in ns of `samples` rows written `period_s` apart, through a
    new consumer of `group` subscribed and waiting in poll (auto.offset.reset latest)."""
    times: list[tuple[int, int]] = []
    config = {"server": address, "group.id": group, "auto.offset.reset": "latest"}
    with Consumer(config) as consumer:
        consumer.subscribe(["bench_latency"])
        consumer.poll(IDLE_POLL_S)
        deadline = time.monotonic() + samples * period_s + LATENCY_SLACK_S
        with harness.producer(produce, address, samples, period_s, first_ms) as proc:
            while len(times) < samples:
                message = consumer.poll(SAMPLE_POLL_S)
                now = time.time_ns()
                if message is not None:
                    sent = [s for b in message.blocks for s in b.data["sent_ns"].to_pylist()]
                    times += [(s, now) for s in sent if s != rp.WARMUP_SENT_NS]
                elif proc.exitcode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{len(times)} of {samples} latency samples")
    return times


def latencies_redis(port: int, samples: int) -> list[tuple[int, int]]:
    """The same through Redis: XADD per row, one XREAD blocked on the stream."""
    after = rp.start_id(port)
    with harness.producer(rp.produce, port, samples, WARMUP_ROWS, PERIOD_S):
        return rp.receive(port, after, samples, samples * PERIOD_S + LATENCY_SLACK_S)


def latency_figures(
    times: list[tuple[int, int]], prefix: str = "", suffix: str = ""
) -> tuple[Report, Report]:
    """p50 and p99 of receive - send in ms; for meta, the maximum and the rate the
    producer kept (it falls behind its pace when a write takes longer)."""
    latencies = [(received - sent) / 1e6 for sent, received in times]
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    sent = [s for s, _ in times]
    span_s = (max(sent) - min(sent)) / 1e9
    name = f"{prefix}latency_ms"
    keys = {f"{name}_p50{suffix}": round(cuts[49], 3), f"{name}_p99{suffix}": round(cuts[98], 3)}
    meta = {
        f"{name}_max{suffix}": round(max(latencies), 3),
        f"{prefix}latency_producer_rows_s{suffix}": round((len(sent) - 1) / span_s),
    }
    return keys, meta


def run_latency(
    conn: Connection, port: int, samples: int, metered: Connection
) -> tuple[Report, Report]:  # fmt: skip
    for server in (conn, metered):
        server.execute(LATENCY_DB_SQL.format(vgroups=VGROUPS))
        server.execute(
            "; ".join(f"CREATE TABLE p{n} USING probe TAGS ({n})" for n in range(PROBES))
        )
    keys, meta = latency_figures(
        latencies_sqltopic(conn.address, samples, PERIOD_S, "latency", START_MS)
    )
    for figures in (
        latency_figures(
            latencies_sqltopic(metered.address, samples, PERIOD_S, "latency", START_MS),
            suffix="_metrics",
        ),
        latency_figures(latencies_redis(port, samples), prefix="redis_"),
        latency_figures(
            latencies_sqltopic(
                conn.address, min(samples, SLOW_SAMPLES), SLOW_PERIOD_S, "latency_slow",
                START_MS + 2 * (WARMUP_ROWS + samples),
            ),
            suffix=f"_paced{round(SLOW_PERIOD_S * 1000)}ms",
        ),
    ):  # fmt: skip
        keys |= figures[0]
        meta |= figures[1]
    meta["latency_samples"] = samples
    for name, value in (keys | meta).items():
        log(f"{name}: {value}")
    return keys, meta


# --- metrics on and off ------------------------------------------------------------------

# How often the bench scrapes the metered server's /metrics: 15 times Prometheus' default.
SCRAPE_PERIOD_S = 1.0
# With metrics scraped, ingest and latency p50 stay within this share of the plain
# server's (issue 17: 3 %).
METRICS_GOAL_SHARE = 0.97
# One scrape answers within this (loopback).
SCRAPE_TIMEOUT_S = 30.0


@contextlib.contextmanager
def polling(request: str | urllib.request.Request, period_s: float) -> Iterator[list[float]]:
    """Fetch `request` every `period_s` from a thread until the block ends; the ms each
    fetch took."""
    took: list[float] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period_s):
            start = time.perf_counter()
            with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT_S) as answer:
                answer.read()
            took.append((time.perf_counter() - start) * 1000)

    thread = threading.Thread(target=loop, name="poller", daemon=True)
    thread.start()
    try:
        yield took
    finally:
        stop.set()
        thread.join(SCRAPE_TIMEOUT_S)


# How often the bench reads the console's /api/overview: what an open console tab does
# (its refresh_ms).
CONSOLE_PERIOD_S = 2.0


def console_overview(url: str) -> urllib.request.Request:
    """A request for the overview of the console at `url`, logged in as root."""
    login = urllib.request.Request(
        url + "api/session", data=json.dumps({"user": "root", "password": "taosdata"}).encode(),
        method="POST", headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(login, timeout=SCRAPE_TIMEOUT_S) as answer:
        token = json.load(answer)["token"]
    return urllib.request.Request(
        url + "api/overview", headers={"Authorization": f"Bearer {token}"}
    )


# --- the run ---------------------------------------------------------------------------

# ratio key -> (sqltopic key, Redis key)
RATIOS = {
    "ratio_ingest_arrow": ("ingest_arrow_rows_s", "redis_xadd_rows_s_batch10k"),
    "ratio_ingest_arrow_wal1": ("ingest_arrow_rows_s_wal1", "redis_xadd_rows_s_batch10k_wal1"),
    "ratio_ingest_sql": ("ingest_sql_rows_s", "redis_xadd_rows_s_batch1k"),
    "ratio_ingest_sql_wal1": ("ingest_sql_rows_s_wal1", "redis_xadd_rows_s_batch1k_wal1"),
    "ratio_consume": ("consume_rows_s", "redis_consume_rows_s"),
    "ratio_consume_sel1": ("consume_rows_s_sel1", "redis_consume_rows_s_sel1"),
    "ratio_consume_sel100": ("consume_rows_s_sel100", "redis_consume_rows_s_sel100"),
    "ratio_latency_p50": ("latency_ms_p50", "redis_latency_ms_p50"),
    "ratio_latency_p99": ("latency_ms_p99", "redis_latency_ms_p99"),
}
# ratio key -> (TLS key, plain-text key)
TLS_RATIOS = {"ratio_ingest_arrow_tls": ("ingest_arrow_rows_s_tls", "ingest_arrow_rows_s")}
# ratio key -> (metrics-on key, metrics-off key)
METRICS_RATIOS = {
    "ratio_ingest_arrow_metrics": ("ingest_arrow_rows_s_metrics", "ingest_arrow_rows_s"),
    "ratio_latency_p50_metrics": ("latency_ms_p50_metrics", "latency_ms_p50"),
}

NOTES = {
    "method": (
        "One `sqltopic server` process (python -m sqltopic.cli server) and two "
        "redis-server processes (appendonly yes, appendfsync always = WAL_LEVEL 2, "
        "everysec = WAL_LEVEL 1; no RDB, no AOF rewrite) on loopback. Rates are medians "
        "of rounds; sides alternate, order swapped every round. Ratios are sqltopic / "
        "Redis (for latency, below 1 is better for sqltopic)."
    ),
    "ingest_note": (
        "One client, one call at a time: Connection.write of prebuilt 10,000-row Arrow "
        "tables (ts, current, voltage, phase, tbname, location, groupid; one existing "
        "child per write) to <db>.meters; Connection.execute of prebuilt 1,000-row "
        "INSERT INTO d<n> VALUES statements (integer ms). Databases VGROUPS 4. Redis: "
        "prebuilt pipelined batches of 10,000 XADDs with the Arrow write's seven columns "
        "as fields, and of 1,000 XADDs with an INSERT's four values plus tbname; a "
        "batch's replies are read before the next batch is sent."
    ),
    "consume_note": (
        "rows_s = backlog rows / seconds from subscribe() to the delivery of the last "
        "matching row, by one sqltopic.client.consumer.Consumer (group new per drain, "
        "auto.offset.reset earliest, other settings default); then every vgroup's "
        "position is checked to be its end, and the delivered count to match. Backlog: "
        "database power VGROUPS 4 WAL_LEVEL 1, 10,000-row writes into child k % 100. "
        "Redis: the same rows as XADD entries (ts, current, voltage, phase, tbname) in "
        "one stream, read by XREADGROUP COUNT 10000 NOACK from a new group, replies "
        "decoded column-wise with pyarrow and the filter applied client-side. "
        f"_minrows{BIG_MIN_POLL_ROWS // 1000}k: the 50 % drain with min.poll.rows "
        f"{BIG_MIN_POLL_ROWS:,} (default 4,096), for the cost per poll."
    ),
    "latency_note": (
        "A producer process writes one row per ms (paced; INSERT INTO p<i % 8> of "
        "database lat, VGROUPS 4, WAL_LEVEL 1) carrying time.time_ns() in sent_ns; the "
        "consumer (subscribed, waiting in poll, auto.offset.reset latest, defaults "
        "otherwise) records time.time_ns() when poll returns; latency = receive - send. "
        "Redis: XADD per row to the everysec instance, one XREAD BLOCK on the stream. "
        f"{WARMUP_ROWS} unmeasured rows first. A producer waits for each write's answer, "
        "so it falls behind its pace when writes take longer: meta *_producer_rows_s is "
        f"the rate it kept. _paced{round(SLOW_PERIOD_S * 1000)}ms: sqltopic again, one "
        f"row per {round(SLOW_PERIOD_S * 1000)} ms, at most {SLOW_SAMPLES} samples."
    ),
    "tls_note": (
        "ingest_arrow_rows_s_tls: the Arrow writes of ingest_arrow_rows_s (WAL_LEVEL 2, "
        "the same tables, in the same alternating rounds, each time right next to the "
        "plain-text writes) to a second sqltopic server "
        "process started with --tls-cert/--tls-key (a trustme CA, an ECDSA P-256 "
        "certificate for 127.0.0.1), through connect(tls_ca=...). ratio_ingest_arrow_tls "
        f"= TLS / plain text; goal: at least {TLS_GOAL_SHARE}."
    ),
    "metrics": (
        "ingest_arrow_rows_s_metrics and latency_ms_*_metrics: the same work against a "
        "third server started with --metrics-port and --http-port, whose /metrics the "
        f"bench scrapes every {SCRAPE_PERIOD_S:g} s for the whole run (Prometheus' default "
        "is 15 s) and whose console it keeps open (/api/overview every "
        f"{CONSOLE_PERIOD_S:g} s, as a browser tab; the console samples lag itself); its "
        "Arrow rounds alternate with the plain server's, its latency samples follow. "
        "Goals: ratio_ingest_arrow_metrics >= 0.97 and ratio_latency_p50_metrics <= "
        "1/0.97."
    ),
    "rebalance": "not measured here: bench/rebalance_bench.py",
}


def machine_meta(root: Path, sizes: Sizes) -> Report:
    # The code under test: the server's layers and the client side (git pathspecs).
    paths = ["../server", "../wal", "../sql", "../proto"]
    paths += ["../client"]
    status = harness.command(["git", "status", "--porcelain", *paths])
    return harness.machine_meta(
        root,
        libraries={
            "pyarrow": pa.__version__,
            "grpcio": grpc.__version__,
            "redis_server": rp.server_version(),
        },
        status={
            "server_git_status": "; ".join(line.strip() for line in status.splitlines()) or "clean"
        },
        settings={"vgroups": VGROUPS, "rows_per_write": ROWS_PER_WRITE},
        sizes=sizes,
        quick=sizes == QUICK,
    )


def goals(report: Report) -> Report:
    met = {
        "ingest_arrow_goal_met": report["ingest_arrow_rows_s"] >= ARROW_GOAL_ROWS_S,
        "ingest_sql_goal_met": report["ingest_sql_rows_s"] >= SQL_GOAL_ROWS_S,
        "consume_goal_met": report["consume_rows_s"] >= CONSUME_GOAL_ROWS_S,
        "latency_p50_goal_met": report["latency_ms_p50"] <= LATENCY_P50_GOAL_MS,
        "latency_p99_goal_met": report["latency_ms_p99"] <= LATENCY_P99_GOAL_MS,
        "ingest_arrow_tls_goal_met": report["ratio_ingest_arrow_tls"] >= TLS_GOAL_SHARE,
        "seek_time_goal_met": report["seek_time_ms"] <= SEEK_TIME_GOAL_MS,
        "metrics_ingest_goal_met": report["ratio_ingest_arrow_metrics"] >= METRICS_GOAL_SHARE,
        "metrics_latency_goal_met": (report["ratio_latency_p50_metrics"] <= 1 / METRICS_GOAL_SHARE),
    }
    return met | {
        "all_goals_met": all(met.values()),
        "ingest_arrow_goal_rows_s": ARROW_GOAL_ROWS_S,
        "ingest_sql_goal_rows_s": SQL_GOAL_ROWS_S,
        "consume_goal_rows_s": CONSUME_GOAL_ROWS_S,
        "latency_p50_goal_ms": LATENCY_P50_GOAL_MS,
        "latency_p99_goal_ms": LATENCY_P99_GOAL_MS,
        "ingest_arrow_tls_goal_share": TLS_GOAL_SHARE,
        "seek_time_goal_ms": SEEK_TIME_GOAL_MS,
        "metrics_goal_share": METRICS_GOAL_SHARE,
    }


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    seconds: dict[str, float] = {}
    report: Report = {}
    meta = machine_meta(root, sizes) | NOTES
    with contextlib.ExitStack() as stack:
        with harness.phase(log, "start", seconds):
            server = stack.enter_context(sqltopic_server(root))
            certificates = make_certificates(root / "tls-pem")
            tls = stack.enter_context(sqltopic_server(root / "tls", certificates.server_args()))
            peers = {
                2: stack.enter_context(rp.redis_server(root / "redis-always", "always")),
                1: stack.enter_context(rp.redis_server(root / "redis-everysec", "everysec")),
            }
            conn = stack.enter_context(connect(server.address))
            tls_conn = stack.enter_context(connect(tls.address, tls_ca=certificates.ca))
            metrics_port, console_port = rp.free_port(), rp.free_port()
            extra = ["--metrics-port", str(metrics_port), "--http-port", str(console_port)]
            metered = stack.enter_context(sqltopic_server(root / "metered", extra))
            metered_conn = stack.enter_context(connect(metered.address))
            scrapes = stack.enter_context(
                polling(f"http://127.0.0.1:{metrics_port}/metrics", SCRAPE_PERIOD_S)
            )
            overview = console_overview(f"http://127.0.0.1:{console_port}/")
            overviews = stack.enter_context(polling(overview, CONSOLE_PERIOD_S))
        with harness.phase(log, "ingest", seconds):
            keys, more = run_ingest(conn, peers, sizes, seed, tls_conn, metered_conn)
            report |= keys
            meta |= more
        with harness.phase(log, "backlog", seconds):
            backlog, more = build_backlog(conn, peers[1], sizes.backlog_rows)
            meta |= more
        with harness.phase(log, "consume", seconds):
            keys, more = run_consume(conn, peers[1], backlog, sizes.consume_rounds)
            report |= keys
            meta |= more
        with harness.phase(log, "seek", seconds):
            keys, more = run_seek(conn, root / "sqltopic-data", peers[1], backlog)
            report |= keys
            meta |= more
        with harness.phase(log, "latency", seconds):
            keys, more = run_latency(conn, peers[1], sizes.latency_samples, metered_conn)
            report |= keys
            meta |= more
    meta["metrics_scrapes"] = len(scrapes)
    meta["console_overviews"] = len(overviews)
    meta["console_overview_ms_p50"] = round(statistics.median(overviews), 3) if overviews else None
    ratios = RATIOS | TLS_RATIOS | METRICS_RATIOS
    report |= {name: round(report[a] / report[b], 4) for name, (a, b) in ratios.items()}
    return report | goals(report) | {"meta": meta | {"phase_seconds": seconds}}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="server_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="small sizes: a 100,000-row backlog, 200 latency samples",
        seed_help="seed of the INSERT values",
    )


if __name__ == "__main__":
    sys.exit(main())
