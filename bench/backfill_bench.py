"""Benchmark of the Spark backfill against one live consumer, on the same history.

A real `sqltopic server` holds a history of 100,000,000 meters rows (10,000-row Arrow
writes over 100 children and 4 vgroups, WAL_LEVEL 1) and the query topic
`SELECT ts, current, voltage, location FROM meters WHERE voltage > 249` (50 % of rows):

1. consume: one `Consumer` drains the topic from `earliest` (as bench/server_bench.py);
   and one client reads it with `Vnode.ReadTopic`, vgroup after vgroup (`readtopic_rows_s`,
   what the streaming source's tasks call);
2. backfill: `spark_jobs.backfill.run_backfill` (the live engine: Spark tasks evaluate
   the topic as the vnodes do and write Parquet with pyarrow) on `local[2]`, ends from the
   data directory, Parquet into a fresh directory; its time includes starting Spark;
3. stream: `spark.readStream.format("sqltopic")` from `earliest` with
   `Trigger.AvailableNow` into Spark's `noop` sink (`stream_rows_s`: from the query's
   start to its end, on a session already started, the first query of it, so its
   Python workers start with it; `stream_warm_rows_s`: a second drain on the warm
   session; the rows checked).

Rates are rows of history scanned per second (`backfill_rows_s`, `consume_rows_s`);
`backfill_task_rows_s` is the rows one task scans per second of its run, by Spark's task
metrics (`executorRunTime` of each successful attempt, read from Spark's status store
through py4j: it includes a Python worker's start and imports in its first task), and
the breakdown is the job's stages (start-up, planning, tasks, commit). Goals (issue 18):
backfill >= 1.5 x consume, a task >= 0.5 x consume, the stream >= 0.5 x consume.
`--json` prints one JSON object, else a table; `--quick` is a small smoke run.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import harness
import pyarrow as pa
import pyarrow.compute as pc
import pyspark
from engine_bench import CHILDREN, ROWS_PER_WRITE, SELECTIVITIES, START_MS, meters_table
from harness import Report
from pyspark.sql import SparkSession
from server_bench import VGROUPS, Backlog, create_schema, drain_topic, sqltopic_server

from sqltopic.client import connect
from sqltopic.client.topic_read import read_topic
from sqltopic.spark_jobs import register
from sqltopic.spark_jobs.backfill import BackfillProgress, local_ends, prepare, run_backfill
from sqltopic.spark_jobs.session import start_session
from sqltopic.spark_jobs.stream import NAME as STREAM_NAME
from sqltopic.spark_jobs.task import PieceOutput

# Issue 18's goals: the backfill scans history at least this many times as fast as one
# live consumer drains it, and one task (one core) at least TASK_GOAL_RATIO times.
GOAL_RATIO = 1.5
TASK_GOAL_RATIO = 0.5
STREAM_GOAL_RATIO = 0.5
# Bounds of the look-up of task metrics (one job of one stage, a task per WAL piece).
MAX_STAGES = 16
MAX_TASKS = 100_000
MASTER = "local[2]"
PERCENT = 50
TOPIC = "half"


@dataclass(frozen=True)
class Sizes:
    history_rows: int


FULL = Sizes(history_rows=100_000_000)
QUICK = Sizes(history_rows=200_000)

log = harness.logger("backfill_bench")


def write_history(address: str, rows: int) -> tuple[Backlog, float]:
    """`rows` rows in database `power`; the rows `voltage > X` keeps; rows/s written."""
    matching = dict.fromkeys(SELECTIVITIES, 0)
    with connect(address) as conn:
        create_schema(conn, "power", 1)
        began = time.perf_counter()
        for k in range(rows // ROWS_PER_WRITE):
            data = meters_table(START_MS + k * ROWS_PER_WRITE, ROWS_PER_WRITE, 3 * k + 1000)
            conn.write(f"power.d{k % CHILDREN}", data)
            for percent, x in SELECTIVITIES.items():
                matching[percent] += pc.sum(pc.greater(data["voltage"], x)).as_py()
        seconds = time.perf_counter() - began
        conn.execute(
            f"CREATE TOPIC {TOPIC} AS SELECT ts, current, voltage, location FROM power.meters "
            f"WHERE voltage > {SELECTIVITIES[PERCENT]}"
        )
    return Backlog(rows, matching, []), rows / seconds


def backfill(data_dir: Path, out: Path, expected: int) -> tuple[float, Report]:
    """Seconds of the whole job (Spark start-up included), its tasks' rate and stage
    times; checks the rows written."""
    stages: dict[str, float] = {}
    began = time.perf_counter()
    tasks: list[PieceOutput] = []

    def progress(p: BackfillProgress) -> None:
        stages.setdefault(p.stage, round(time.perf_counter() - began, 2))

    plan = prepare(data_dir, TOPIC)
    progress(BackfillProgress("starting Spark", 0))
    spark = start_session(MASTER)
    try:
        manifest = run_backfill(plan, out, local_ends(data_dir, "power"), spark=spark,
                                progress=progress, on_tasks=tasks.extend)  # fmt: skip
        seconds = time.perf_counter() - began
        run_s = task_run_seconds(spark)
    finally:
        spark.stop()
    rows = sum(s.rows for s in manifest.vgroups)
    if rows != expected:
        raise RuntimeError(f"the backfill wrote {rows} rows, expected {expected}")
    size = sum(f.stat().st_size for f in out.rglob("*.parquet"))
    scanned = sum(t.input_rows for t in tasks)
    own_s = sum(t.seconds for t in tasks)
    more: Report = {
        "backfill_task_rows_s": round(scanned / run_s) if run_s else 0,
        "backfill_task_own_rows_s": round(scanned / own_s) if own_s else 0,
        "backfill_tasks": len(tasks),
        "backfill_breakdown_s": _breakdown(stages, seconds),
        "backfill_parquet_mib": size >> 20,
    }
    return seconds, more


def task_run_seconds(spark: SparkSession) -> float:
    """The summed `executorRunTime` of the session's successful task attempts, from
    Spark's status store (the session ran this one job: its stages are numbered from 0)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    total_ms = 0
    for stage in range(MAX_STAGES):
        found = store.taskList(stage, 0, MAX_TASKS)
        if found.size() == 0:
            break
        for i in range(found.size()):
            task = found.apply(i)
            metrics = task.taskMetrics()
            if task.status() == "SUCCESS" and metrics.isDefined():
                total_ms += metrics.get().executorRunTime()
    return total_ms / 1000


def _breakdown(stages: dict[str, float], total: float) -> dict[str, float]:
    """Seconds in each phase, from the stages' start times."""
    marks = [
        ("startup", "starting Spark"),
        ("planning", "planning"),
        ("tasks", "evaluating the topic, writing Parquet"),
        ("commit", "committing"),
    ]
    starts = [stages.get(stage, total) for _name, stage in marks] + [stages.get("done", total)]
    return {name: round(starts[i + 1] - starts[i], 2) for i, (name, _s) in enumerate(marks)}


def read_topic_seconds(address: str, expected: int) -> float:
    """Seconds one client takes to read the topic with ReadTopic, vgroup after vgroup
    (checks the rows)."""
    got = 0
    began = time.perf_counter()
    with connect(address) as conn:
        for vgroup in range(1, VGROUPS + 1):
            for block in read_topic(conn, TOPIC, vgroup, 0, 0):
                got += block.rows.num_rows if block.rows is not None else 0
    seconds = time.perf_counter() - began
    if got != expected:
        raise RuntimeError(f"ReadTopic delivered {got} rows, expected {expected}")
    return seconds


def stream(address: str, root: Path, expected: int) -> tuple[float, Report]:
    """Seconds for the streaming source to drain the topic from earliest (availableNow,
    noop sink), from the query's start on a started session: the first query (its
    Python workers start with it) and, in `meta`, a second one on the warm session;
    checks the rows of both."""
    spark = start_session(MASTER)
    try:
        register(spark)
        cold, batches = _drain_stream(spark, address, root / "ck-cold", expected)
        warm, _ = _drain_stream(spark, address, root / "ck-warm", expected)
    finally:
        spark.stop()
    return cold, {"stream_batches": batches, "stream_warm_seconds": round(warm, 2)}


def _drain_stream(
    spark: SparkSession, address: str, checkpoint: Path, expected: int
) -> tuple[float, int]:
    rows = (
        spark.readStream.format(STREAM_NAME).option("server", address)
        .option("topic", TOPIC).option("startingOffsets", "earliest").load()
    )  # fmt: skip
    began = time.perf_counter()
    query = (
        rows.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    seconds = time.perf_counter() - began
    got = sum(int(p["numInputRows"]) for p in query.recentProgress)
    if got != expected:
        raise RuntimeError(f"the stream delivered {got} rows, expected {expected}")
    return seconds, len(query.recentProgress)


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    del seed  # the history is deterministic
    report: Report = {}
    with sqltopic_server(root) as server:
        log(f"writing {sizes.history_rows:,} rows...")
        backlog, write_rate = write_history(server.address, sizes.history_rows)
        log("draining with one consumer...")
        consume_s = drain_topic(server.address, TOPIC, "bench", backlog, PERCENT)
        log("backfilling with Spark...")
        expected = backlog.matching[PERCENT]
        backfill_s, more = backfill(server.data, root / "out", expected)
        log("reading with ReadTopic...")
        readtopic_s = read_topic_seconds(server.address, expected)
        log("streaming with Spark...")
        stream_s, streamed = stream(server.address, root, expected)
    rows = backlog.rows
    task_rate = more.pop("backfill_task_rows_s")
    report["backfill_rows_s"] = round(rows / backfill_s)
    report["consume_rows_s"] = round(rows / consume_s)
    report["backfill_seconds"] = round(backfill_s, 2)
    report["consume_seconds"] = round(consume_s, 2)
    report["backfill_vs_consume"] = round(consume_s / backfill_s, 3)
    report["goal_ratio"] = GOAL_RATIO
    report["goal_met"] = report["backfill_vs_consume"] >= GOAL_RATIO
    report["backfill_task_rows_s"] = task_rate
    report["task_vs_consume"] = round(task_rate / report["consume_rows_s"], 3)
    report["task_goal_ratio"] = TASK_GOAL_RATIO
    report["task_goal_met"] = report["task_vs_consume"] >= TASK_GOAL_RATIO
    report["stream_rows_s"] = round(rows / stream_s)
    report["stream_vs_consume"] = round(consume_s / stream_s, 3)
    report["stream_goal_ratio"] = STREAM_GOAL_RATIO
    report["stream_goal_met"] = report["stream_vs_consume"] >= STREAM_GOAL_RATIO
    report["stream_warm_rows_s"] = round(rows / streamed.pop("stream_warm_seconds"))
    report["readtopic_rows_s"] = round(rows / readtopic_s)
    report["matching_rows"] = expected
    meta = harness.machine_meta(
        root,
        libraries={"pyspark": pyspark.__version__, "pyarrow": pa.__version__},
        status={},
        settings={"master": MASTER, "topic_percent": PERCENT, "write_rows_s": round(write_rate)},
        sizes=sizes,
        quick=sizes == QUICK,
    )
    return report | {"meta": meta | more | streamed}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="backfill_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="small sizes: a 200,000-row history",
        seed_help="unused: the history is deterministic",
    )


if __name__ == "__main__":
    sys.exit(main())
