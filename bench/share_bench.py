"""Benchmark of shared groups (group.type shared) against vgroup groups and Redis Streams.

A real `sqltopic server` holds a backlog of meters rows (1,000-row Arrow writes over 100
children and 4 vgroups) and the topic `SELECT ts, current, voltage FROM power.meters`
(every row). Consumers are separate processes started before the clock; the clock
runs from the moment they all may start until every row was processed:

* `shared_rows_s_c4`, `shared_rows_s_c8`: 4 or 8 consumers of a shared group, each
  spending 1 ms of work per 100 rows (a sleep), with the default settings;
* `vgroup_rows_s_c8`: the same eight in a vgroup group (only four get a vgroup);
* `shared_ack_overhead`: one consumer, no work, default settings: a vgroup group's rate
  (auto-commit) over a shared group's (the next poll acknowledges what the last one
  handed out); `shared_ack_overhead_explicit` the same with enable.auto.commit false, a
  commit or an ack (each waiting for the disk) per message;
* `shared_rows_s_nowork_c4` and Redis Streams' `redis_rows_s_nowork_c4` (XREADGROUP
  COUNT 500, XACK per entry, pipelined per read) with the same four consumers, no work;
  `redis_rows_s_c8` with the 1 ms work, for comparison;
* `redelivery_ms_p99`: a consumer holding a lease is SIGKILLed; the time from the end of
  its lease (ack.timeout.ms after it got the rows) until another consumer of the group
  gets them (delivery count 2);
* `lost_rows`, `acked_twice`: over every shared run, from the ids of the rows received
  (each received once: none delivered twice, none missing);
* `shared_server_cpu_us_per_row_c1`, `vgroup_server_cpu_us_per_row_c1`: the server's
  CPU (all threads, /proc) per row of the one-consumer runs, and their ratio
  `shared_server_cpu_overhead`: what a lease costs beside a poll, less noisy than rates.

Each rate is the median of `rounds` runs (3; the rounds interleave the kinds, so that a
slow spell of the machine hits all of them), each in a group of its own.

Goals (issue 15): shared_rows_s_c8 >= 1.8 x vgroup_rows_s_c8; shared_ack_overhead <=
1.25; redelivery_ms_p99 <= 1000; shared no-work >= 3 x Redis with XACK per entry; no
row lost or acknowledged twice. `--json` prints one JSON object, else a table.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import harness
import pyarrow as pa
import redis_peer as rp
from engine_bench import CHILDREN, START_MS, meters_table
from fanout_bench import cpu_seconds, server_pid
from harness import Report
from server_bench import create_schema, sqltopic_server

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer

TOPIC = "everything"
ROWS_PER_WRITE = 1_000
# The consumer work: 1 ms per 100 rows.
WORK_US_PER_ROW = 10.0
LEASE_ROWS = 500  # max.poll.rows: one lease (and Redis's COUNT)
ACK_TIMEOUT_MS = 1_000  # the redelivery run's lease
# A run that does not finish in this long is broken, not slow.
RUN_DEADLINE_S = 600.0
START_DEADLINE_S = 120.0
GOALS = {"c8_vs_vgroup": 1.8, "ack_overhead": 1.25, "redelivery_ms_p99": 1000.0,
         "nowork_vs_redis": 3.0}  # fmt: skip
FIELDS = ("ts", "current", "voltage")


@dataclass(frozen=True)
class Sizes:
    rows: int
    redelivery_samples: int
    rounds: int  # each rate is the median of this many runs (the machine is noisy)


FULL = Sizes(rows=400_000, redelivery_samples=20, rounds=3)
QUICK = Sizes(rows=20_000, redelivery_samples=3, rounds=1)

log = harness.logger("share_bench")


@dataclass(frozen=True)
class Run:
    """One measured drain: consumers of one kind, how long, what they settled."""

    seconds: float
    rows: int
    ids: list[tuple[int, int, int]]  # shared runs: every row id acknowledged
    settled: int
    cpu_s: float  # the server's CPU (all threads) over the run; 0 for Redis's


# --- consumers, one process each ---------------------------------------------------------


def _config(address: str, group: str, kind: str, **extra: str) -> dict[str, str]:
    """The consumers' config: the defaults (auto-commit: implicit acknowledgement in a
    shared group, periodic commits in a vgroup group) but for where to start."""
    return {
        "server": address, "group.id": group, "group.type": kind,
        "auto.offset.reset": "earliest", "max.poll.rows": str(LEASE_ROWS),
        "fetch.max.wait.ms": "200",
    } | extra  # fmt: skip


def sqltopic_worker(
    address: str, group: str, kind: str, settle: str, work_us: float, ready: Any, go: Event,
    stop: Event, counter: Any, out: Any,
) -> None:  # fmt: skip
    """One consumer: `settle` "implicit" (the defaults: the next poll acknowledges, or
    auto-commit) or "explicit" (enable.auto.commit false: ack or commit each message)."""
    ids: list[tuple[int, int, int]] = []
    settled = 0
    explicit = settle == "explicit"
    extra = {"enable.auto.commit": "false"} if explicit else {}
    with Consumer(_config(address, group, kind, **extra)) as consumer:
        consumer.subscribe([TOPIC])
        consumer.assignment()
        ready.put(1)
        go.wait()
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is None or message.kind != "data":
                continue
            if work_us:
                time.sleep(message.row_count * work_us / 1e6)
            ids += [(message.vgroup, v, i) for v, i in message.row_ids]
            if explicit and kind == "shared":
                settled += consumer.ack(message)
            elif explicit:
                consumer.commit(message)
            with counter.get_lock():
                counter.value += message.row_count
    out.put((ids, settled))


def redis_worker(
    port: int, name: str, work_us: float, ready: Any, go: Event, stop: Event, counter: Any,
    out: Any,
) -> None:  # fmt: skip
    read = rp.encode("XREADGROUP", "GROUP", "g", name, "COUNT", LEASE_ROWS, "STREAMS", "s", ">")
    step = 4 + 4 * len(FIELDS)
    acked = 0
    with rp.Resp(port) as client:
        ready.put(1)
        go.wait()
        while not stop.is_set():
            client.send(read)
            lines = client.stream_reply(len(FIELDS))
            if lines is None:
                time.sleep(0.001)
                continue
            ids = lines[2::step]
            if work_us:
                time.sleep(len(ids) * work_us / 1e6)
            client.send(b"".join(rp.encode("XACK", "s", "g", i) for i in ids))
            for _ in ids:
                acked += int(client.reply())  # type: ignore[arg-type]
            with counter.get_lock():
                counter.value += len(ids)
    out.put(([], acked))


def drain(
    target: Callable[..., None], args: list[tuple[Any, ...]], total: int, pid: int | None = None
) -> Run:
    """Start one process per `args` (each `target(*args, ready, go, stop, counter, out)`),
    wait until they are ready, then time them until `total` rows were processed (and
    the CPU that process `pid`, the server, spent meanwhile)."""
    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    counter = ctx.Value("q", 0)
    procs = [ctx.Process(target=target, args=(*a, ready, go, stop, counter, out)) for a in args]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=START_DEADLINE_S)
        cpu = cpu_seconds(pid) if pid is not None else 0.0
        began = time.perf_counter()
        go.set()
        deadline = began + RUN_DEADLINE_S
        while counter.value < total:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{counter.value:,} of {total:,} rows in {RUN_DEADLINE_S} s")
            time.sleep(0.005)
        seconds = time.perf_counter() - began
        cpu = cpu_seconds(pid) - cpu if pid is not None else 0.0
        stop.set()
        results = [out.get(timeout=START_DEADLINE_S) for _ in procs]
    finally:
        stop.set()
        for proc in procs:
            proc.join(START_DEADLINE_S)
            if proc.is_alive():
                proc.kill()
    ids = [rid for found, _ in results for rid in found]
    return Run(seconds, counter.value, ids, sum(settled for _, settled in results), cpu)


# --- redelivery ---------------------------------------------------------------------------

HOLDER = """
import sys
import time
from sqltopic.client.consumer import Consumer
consumer = Consumer({"server": sys.argv[1], "group.id": sys.argv[2], "group.type": "shared",
    "ack.timeout.ms": sys.argv[3], "session.timeout.ms": "60000", "max.poll.rows": "500",
    "auto.offset.reset": "earliest", "enable.auto.commit": "false"})
consumer.subscribe(["everything"])
while (message := consumer.poll(1.0)) is None:
    pass
print(time.monotonic(), flush=True)  # the lease began just before
sys.stdin.read()
"""


def redelivery_ms(address: str, group: str) -> float:
    """ms from the end of a SIGKILLed holder's lease (it got its rows, on the system's
    monotonic clock, plus ack.timeout.ms) until another consumer of the group gets them
    (0 when sooner: the lease began just before the holder had the rows)."""

    survivor = Consumer(
        _config(address, group, "shared", **{"ack.timeout.ms": str(ACK_TIMEOUT_MS)})
    )
    try:
        survivor.subscribe([TOPIC])
        args = [sys.executable, "-c", HOLDER, address, group, str(ACK_TIMEOUT_MS)]
        holder = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None
        lease_end = float(holder.stdout.readline()) + ACK_TIMEOUT_MS / 1000
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + RUN_DEADLINE_S
        while time.monotonic() < deadline:
            message = survivor.poll(0.05)
            if message is None:
                continue
            if (message.delivery_count or 0) >= 2:
                return max(0.0, (time.monotonic() - lease_end) * 1000)
            survivor.ack(message)
        raise RuntimeError("the killed consumer's rows never came back")
    finally:
        survivor.close()


# --- the run --------------------------------------------------------------------------------

# The sqltopic runs: figure, group type, settling, consumers, work per row (µs).
SQLTOPIC_RUNS = (
    ("shared_rows_s_c4", "shared", "implicit", 4, WORK_US_PER_ROW),
    ("shared_rows_s_c8", "shared", "implicit", 8, WORK_US_PER_ROW),
    ("vgroup_rows_s_c8", "vgroup", "implicit", 8, WORK_US_PER_ROW),
    ("shared_rows_s_nowork_c4", "shared", "implicit", 4, 0.0),
    ("shared_rows_s_c1", "shared", "implicit", 1, 0.0),
    ("vgroup_rows_s_c1", "vgroup", "implicit", 1, 0.0),
    ("shared_rows_s_c1_explicit", "shared", "explicit", 1, 0.0),
    ("vgroup_rows_s_c1_explicit", "vgroup", "explicit", 1, 0.0),
)
# Redis Streams' runs: figure, consumers, work per row (µs).
REDIS_RUNS = (("redis_rows_s_nowork_c4", 4, 0.0), ("redis_rows_s_c8", 8, WORK_US_PER_ROW))


def write_backlog(address: str, rows: int) -> list[pa.Table]:
    tables = []
    with connect(address) as conn:
        create_schema(conn, "power", 1)
        for k in range(rows // ROWS_PER_WRITE):
            data = meters_table(START_MS + k * ROWS_PER_WRITE, ROWS_PER_WRITE, k + 7)
            conn.write(f"power.d{k % CHILDREN}", data)
            tables.append(data)
        conn.execute(f"CREATE TOPIC {TOPIC} AS SELECT ts, current, voltage FROM power.meters")
    return tables


def load_redis(port: int, tables: list[pa.Table]) -> None:
    with rp.Resp(port) as client:
        for table in tables:
            client.send(rp.xadd_commands("s", table.select(list(FIELDS))))
            client.expect_ids(table.num_rows)


def sqltopic_run(
    address: str, group: str, kind: str, settle: str, consumers: int, work_us: float, total: int,
    pid: int,
) -> Run:  # fmt: skip
    args = [(address, group, kind, settle, work_us) for _ in range(consumers)]
    return drain(sqltopic_worker, args, total, pid)


def redis_run(port: int, consumers: int, work_us: float, total: int) -> Run:
    with rp.Resp(port) as client:
        client.call("XGROUP", "CREATE", "s", "g", "0")
    try:
        args = [(port, f"c{n}", work_us) for n in range(consumers)]
        return drain(redis_worker, args, total)
    finally:
        with rp.Resp(port) as client:
            client.call("XGROUP", "DESTROY", "s", "g")


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    del seed  # the backlog is deterministic
    total = sizes.rows
    report: Report = {}
    shared: list[Run] = []
    with sqltopic_server(root) as server, rp.redis_server(root / "redis", "everysec") as port:
        log(f"writing {total:,} rows...")
        tables = write_backlog(server.address, total)
        load_redis(port, tables)
        address, pid = server.address, server_pid(server)
        runs: dict[str, list[Run]] = {}
        for round_ in range(sizes.rounds):  # rounds interleaved: a slow spell hits all
            for name, kind, settle, consumers, work in SQLTOPIC_RUNS:
                log(f"{name} (round {round_ + 1} of {sizes.rounds})...")
                group = f"{name}-{round_}"
                done = sqltopic_run(address, group, kind, settle, consumers, work, total, pid)
                runs.setdefault(name, []).append(done)
                if kind == "shared":
                    shared.append(done)
            for name, consumers, work in REDIS_RUNS:
                log(f"{name} (round {round_ + 1} of {sizes.rounds})...")
                runs.setdefault(name, []).append(redis_run(port, consumers, work, total))
        log("redelivery...")
        delays = sorted(
            redelivery_ms(address, f"redeliver{n}") for n in range(sizes.redelivery_samples)
        )
    rate = {name: round(statistics.median(r.rows / r.seconds for r in done))
            for name, done in runs.items()}  # fmt: skip
    report |= rate
    for name in ("shared_rows_s_c1", "vgroup_rows_s_c1"):
        cpu_name = name.replace("rows_s", "server_cpu_us_per_row")
        report[cpu_name] = round(statistics.median(r.cpu_s / r.rows * 1e6 for r in runs[name]), 2)
    report["shared_server_cpu_overhead"] = round(
        report["shared_server_cpu_us_per_row_c1"] / report["vgroup_server_cpu_us_per_row_c1"], 3
    )
    report["shared_c8_vs_vgroup_c8"] = round(rate["shared_rows_s_c8"] / rate["vgroup_rows_s_c8"], 3)
    report["shared_ack_overhead"] = round(rate["vgroup_rows_s_c1"] / rate["shared_rows_s_c1"], 3)
    report["shared_ack_overhead_explicit"] = round(
        rate["vgroup_rows_s_c1_explicit"] / rate["shared_rows_s_c1_explicit"], 3
    )
    report["shared_nowork_vs_redis"] = round(
        rate["shared_rows_s_nowork_c4"] / rate["redis_rows_s_nowork_c4"], 3
    )
    report["redelivery_ms_p50"] = round(delays[len(delays) // 2], 1)
    report["redelivery_ms_p99"] = round(delays[min(len(delays) - 1, int(len(delays) * 0.99))], 1)
    report["lost_rows"] = sum(total - len(set(r.ids)) for r in shared)
    report["acked_twice"] = sum(len(r.ids) - len(set(r.ids)) for r in shared)
    report["goals"] = GOALS
    report["goals_met"] = {
        "c8_vs_vgroup": report["shared_c8_vs_vgroup_c8"] >= GOALS["c8_vs_vgroup"],
        "ack_overhead": report["shared_ack_overhead"] <= GOALS["ack_overhead"],
        "redelivery_ms_p99": report["redelivery_ms_p99"] <= GOALS["redelivery_ms_p99"],
        "nowork_vs_redis": report["shared_nowork_vs_redis"] >= GOALS["nowork_vs_redis"],
        "exact": report["lost_rows"] == 0 and report["acked_twice"] == 0,
    }
    meta = harness.machine_meta(
        root,
        libraries={"pyarrow": pa.__version__, "redis": rp.server_version()},
        status={},
        settings={
            "lease_rows": LEASE_ROWS,
            "work_us_per_row": WORK_US_PER_ROW,
            "ack_timeout_ms": ACK_TIMEOUT_MS,
            "consumers": "processes",
        },
        sizes=sizes,
        quick=sizes == QUICK,
    )
    return report | {"meta": meta}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="share_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="small sizes: 20,000 rows, 3 redelivery samples, one round",
        seed_help="unused: the backlog is deterministic",
    )


if __name__ == "__main__":
    sys.exit(main())
