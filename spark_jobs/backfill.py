"""The backfill job: a query topic's history, read from the WAL by Spark, as Parquet.

    plan = prepare(data_dir, "overvoltage")          # every check; no Spark yet
    ends = local_ends(data_dir, plan.database)       # or the server's snapshot
    manifest = run_backfill(plan, Path("out"), ends, master="local[*]")

or, through the server (a cluster, or files the job cannot see: spark_jobs/remote.py),
`plan = prepare_remote(Remote(server, user, password, "overvoltage"))` and the ends
`remote_ends(plan)`.

`run_backfill` reads each vgroup from its first retained version to `ends[vgroup]`
(exclusive), evaluates the topic and writes Parquet partitioned by vgroup
(`vgroup=N/part-*.parquet`, TIMESTAMP_MICROS timestamps, plus `_version`), then
`_manifest.json` (`manifest`). Two engines give the same files:

* `live` (the default): one Spark task per WAL piece (spark_jobs/pieces.py) evaluates
  the topic with the vnodes' own evaluator and writes the piece's Parquet with pyarrow
  (spark_jobs/task.py); Spark schedules and retries the tasks, and their files are
  committed by the protocol of spark_jobs/commit.py. Nothing per row enters the JVM, and
  every topic a consumer can read can be backfilled.
* `spark_sql`: the `sqltopic_wal` source and the topic's SQL transpiled to Spark SQL
  (`transpile`), written by Spark's Parquet writer: the path users' own Spark jobs take,
  kept and checked against the live one (tests/spark/test_backfill_differential.py). It
  refuses SQL whose Spark meaning differs from the topic's (BackfillUnsupported).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from sqltopic.errors import BackfillError, BackfillUnsupported, OutputExists
from sqltopic.spark_jobs import parquet, remote, session, types
from sqltopic.spark_jobs.commit import PARTITION, OutputJob
from sqltopic.spark_jobs.manifest import MANIFEST_NAME, Manifest, VgroupSpan
from sqltopic.spark_jobs.pieces import Piece, extent, list_pieces
from sqltopic.spark_jobs.progress import BackfillProgress, ProgressWatch
from sqltopic.spark_jobs.remote import Remote
from sqltopic.spark_jobs.spec import VERSION, VGROUP, load_catalog, target_tables, writable_output
from sqltopic.spark_jobs.task import LivePlan, PieceOutput, file_schema, run_piece
from sqltopic.spark_jobs.transpile import SparkQuery, transpile
from sqltopic.sql.model import TBNAME, Catalog, Table, Topic
from sqltopic.sql.topic.evaluate import QueryShape
from sqltopic.sql.topic.target import find_target

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import DataFrameReader, SparkSession

__all__ = [
    "BackfillPlan",
    "BackfillProgress",
    "Manifest",
    "VgroupSpan",
    "local_ends",
    "prepare",
    "prepare_remote",
    "remote_ends",
    "run_backfill",
]

Engine = Literal["live", "spark_sql"]
# WAL bytes one live task reads (spark_jobs/pieces.py cuts them): its tasks run at ~8M
# rows/s, so a 64 MiB piece (a default segment, ~2.7M meters rows) takes ~0.3 s, far
# above Spark's ~50 ms cost per task (24 MiB pieces, the Spark SQL engine's, spent a
# fifth of a warm 20M-row job on it: docs/performance.md, Backfill).
LIVE_PIECE_BYTES = 64 << 20

Progress = Callable[[BackfillProgress], None]


@dataclass(frozen=True)
class BackfillPlan:
    """A checked backfill: the topic, where to read, and the Spark SQL to run."""

    data_dir: Path
    topic: str
    database: str
    table: str  # the topic's FROM table
    vgroups: tuple[int, ...]
    columns: tuple[str, ...]  # the source columns the SQL needs
    schema: tuple[tuple[str, str], ...]  # output column, TDengine type
    live: LiveParts  # what the live engine's tasks evaluate
    remote: Remote | None = None  # read through the server, not `data_dir`'s files

    def spark_query(self) -> SparkQuery:
        """The topic's SQL in Spark SQL, for the `spark_sql` engine (BackfillUnsupported
        when Spark cannot run it exactly)."""
        parts = self.live
        output = parts.shape.out
        relation = f"sqltopic_backfill_{self.topic}"
        extra = {PARTITION: VGROUP, VERSION: VERSION}
        return transpile(self.topic, parts.select_sql, parts.batch_schema, output, relation,
                         extra)  # fmt: skip


@dataclass(frozen=True)
class LiveParts:
    """The topic as the vnodes evaluate it, and the tables its tasks read."""

    select_sql: str
    shape: QueryShape
    batch_schema: pa.Schema  # the target's batch relation, for `transpile`
    tables: dict[int, dict[str, Table]]  # vgroup -> name -> table


def prepare(data_dir: Path, topic: str) -> BackfillPlan:
    """Every check that needs no Spark: TopicNotFound, BackfillUnsupported (not a query
    topic, or SQL Spark cannot run exactly), a data directory that is not one."""
    return _plan(load_catalog(data_dir), topic, data_dir, None)


def prepare_remote(source: Remote) -> BackfillPlan:
    """`prepare` of a backfill that reads through the server: the catalog objects it
    needs and the node of each vgroup asked of it (TopicNotFound, NoPermission)."""
    plan = _plan(remote.catalog(source), source.topic, Path(), None)
    return replace(plan, remote=source.located(plan.database))


def remote_ends(plan: BackfillPlan) -> dict[int, int]:
    """Per vgroup, the end of its WAL on the node hosting it (the next version)."""
    assert plan.remote is not None
    return {v: e.next_version for v, e in remote.extents(plan.remote, plan.vgroups).items()}


def _plan(catalog: Catalog, topic: str, data_dir: Path, source: Remote | None) -> BackfillPlan:
    found = catalog.topic(topic.lower())
    output = writable_output(catalog, found, "the backfill", "backfill", BackfillUnsupported)
    target = find_target(catalog, found.db, found.target or "")
    types.spark_schema(output)  # BackfillUnsupported for a type Spark cannot hold
    needs = set(found.uses) | {VGROUP, VERSION}
    if f'"{TBNAME}"' in found.select_sql:
        needs.add(TBNAME)
    return BackfillPlan(
        data_dir=data_dir,
        topic=found.name,
        database=found.db,
        table=target.name,
        vgroups=catalog.database(found.db).vgroups,
        columns=tuple(sorted(needs)),
        schema=tuple((c.name, c.type.sql()) for c in found.output),
        live=LiveParts(
            found.select_sql,
            QueryShape.of(catalog, found),
            target.batch_schema(),
            _tables(catalog, found),
        ),
        remote=source,
    )


def _tables(catalog: Catalog, topic: Topic) -> dict[int, dict[str, Table]]:
    """The tables whose rows the topic reads, by vgroup."""
    _tags, found = target_tables(catalog, topic.db, topic.target or "")
    return {
        v: {t.name: t for t in found if t.vgroup == v} for v in catalog.database(topic.db).vgroups
    }


def local_ends(data_dir: Path, database: str) -> dict[int, int]:
    """Per vgroup of `database`, the end of its WAL in the data directory's files (the
    next version to be written), read-only and without a lock."""
    db = load_catalog(data_dir).database(database.lower())
    return {v: extent(data_dir, v).next_version for v in db.vgroups}


def run_backfill(
    plan: BackfillPlan,
    output: Path,
    ends: Mapping[int, int],
    *,
    spark: SparkSession | None = None,
    master: str = "local[*]",
    progress: Progress | None = None,
    engine: Engine = "live",
    on_tasks: Callable[[list[PieceOutput]], None] | None = None,
    fail_once: Path | None = None,
) -> Manifest:
    """Run the job with `engine` (see the module docstring); `_manifest.json` is written
    last. `on_tasks` receives the live engine's task reports (rows, seconds). `fail_once`
    is for tests only: the first task to create that file fails after writing part of its
    output, and Spark retries it. Raises OutputExists (before anything), JavaNotFound
    (before Spark starts), BackfillUnsupported, BackfillError."""
    report = progress or (lambda _p: None)
    _check_output(output)
    _check_ends(plan, ends)
    query = plan.spark_query() if engine == "spark_sql" else None
    existed = output.exists()
    report(BackfillProgress("starting Spark", 0))
    with _session(spark, master) as active:
        try:
            if query is not None:
                return _run_spark_sql(active, plan, query, output, dict(ends), report)
            starts, outputs = _run_live(active, plan, output, dict(ends), report, fail_once)
            if on_tasks is not None:
                on_tasks(outputs)
            counts: dict[int, int] = {}
            for done in outputs:
                counts[done.vgroup] = counts.get(done.vgroup, 0) + done.rows
            return _write_manifest(plan, output, starts, dict(ends), counts, report)
        except BaseException:
            _remove_output(output, existed)
            raise


@contextlib.contextmanager
def _session(spark: SparkSession | None, master: str) -> Iterator[SparkSession]:
    if spark is not None:
        session.apply_required(spark)
        yield spark
        return
    own = session.start_session(master)
    try:
        yield own
    finally:
        own.stop()


def _run_live(
    spark: SparkSession, plan: BackfillPlan, out: Path, ends: dict[int, int], report: Progress,
    fail_once: Path | None,
) -> tuple[dict[int, int], list[PieceOutput]]:  # fmt: skip
    """One task per piece, evaluating the topic with the live evaluator; their files
    committed into `out` once every task succeeded. The starts read, and the tasks'
    reports."""
    report(BackfillProgress("planning", 0))
    starts = _clamped_starts(plan, ends)
    pieces = _pieces(plan, starts, ends)
    out.mkdir(parents=True, exist_ok=True)
    job = OutputJob.start(out)
    live = LivePlan(
        str(plan.data_dir), plan.remote, plan.live.shape, plan.live.select_sql, plan.live.tables,
        file_schema(plan.live.shape.out), job, None if fail_once is None else str(fail_once),
    )  # fmt: skip
    sc = spark.sparkContext
    rows = sc.accumulator(0)
    stage = "evaluating the topic, writing Parquet"
    try:
        with ProgressWatch(spark, report, stage, rows=lambda: int(rows.value)):
            found = (
                sc.parallelize(pieces, len(pieces)).map(partial(_task, live, rows)).collect()
                if pieces
                else []
            )
        report(BackfillProgress("committing", sum(r.rows for r in found)))
        job.commit([r.name for r in found if r.name])
    except BaseException:
        job.abort()
        raise
    return starts, found


def _task(live: LivePlan, rows: Accumulator[int], piece: Piece) -> PieceOutput:
    """A Spark task (in a Python worker): `run_piece`, its rows added to `rows`."""
    return run_piece(live, piece, rows.add)


def _pieces(plan: BackfillPlan, starts: dict[int, int], ends: dict[int, int]) -> list[Piece]:
    if plan.remote is not None:
        return remote.pieces(plan.remote, plan.vgroups, starts, ends, strict=True)
    return list_pieces(plan.data_dir, plan.vgroups, starts, ends, LIVE_PIECE_BYTES, strict=True)


def _write_manifest(
    plan: BackfillPlan, out: Path, starts: dict[int, int], ends: dict[int, int],
    counts: dict[int, int], report: Progress,
) -> Manifest:  # fmt: skip
    """The manifest of a committed job (versions [start, end) read and the rows written
    per vgroup), written last."""
    spans = tuple(VgroupSpan(v, starts[v], ends[v], counts.get(v, 0)) for v in sorted(plan.vgroups))
    manifest = Manifest(plan.topic, plan.database, spans, plan.schema)
    parquet.write_text_atomic(out / MANIFEST_NAME, manifest.to_json())
    report(BackfillProgress("done", sum(s.rows for s in spans)))
    return manifest


def _clamped_starts(plan: BackfillPlan, ends: dict[int, int]) -> dict[int, int]:
    return {v: min(s, ends[v]) for v, s in _starts(plan).items()}


def _run_spark_sql(
    spark: SparkSession, plan: BackfillPlan, query: SparkQuery, out: Path, ends: dict[int, int],
    report: Progress,
) -> Manifest:  # fmt: skip
    from sqltopic.spark_jobs.source import NAME, register  # noqa: PLC0415 - imports pyspark

    register(spark)
    report(BackfillProgress("planning", 0))
    starts = _clamped_starts(plan, ends)
    source = (
        _located(spark.read.format(NAME), plan)
        .option("database", plan.database)
        .option("table", plan.table)
        .option("columns", ",".join(plan.columns))
        .option("prefilter", plan.topic)
        .option("starts", json.dumps(starts))
        .option("ends", json.dumps(ends))
        .option("strict", "true")
        .load()
    )
    source.createOrReplaceTempView(query.relation)
    try:
        rows = spark.sql(query.sql)
        with ProgressWatch(spark, report, "reading WAL, writing Parquet"):
            parquet.write(rows, out, PARTITION)
    finally:
        spark.catalog.dropTempView(query.relation)
    report(BackfillProgress("counting", 0))
    return _write_manifest(plan, out, starts, ends, parquet.row_counts(out, PARTITION), report)


def _starts(plan: BackfillPlan) -> dict[int, int]:
    """Each vgroup's first retained version, in the files or on its node."""
    if plan.remote is not None:
        return {v: e.first for v, e in remote.extents(plan.remote, plan.vgroups).items()}
    return {v: extent(plan.data_dir, v).first for v in plan.vgroups}


def _located(reader: DataFrameReader, plan: BackfillPlan) -> DataFrameReader:
    """The source's options saying where the entries are: the files, or the server."""
    source = plan.remote
    if source is None:
        return reader.option("path", str(plan.data_dir))
    tls = source.tls
    options = {
        "server": source.server, "user": source.user, "password": source.password,
        "topic": source.topic, "tls": str(tls.enabled).lower(), "tlsCa": tls.ca or "",
        "tlsCert": tls.cert or "", "tlsKey": tls.key or "",
    }  # fmt: skip
    return reader.options(**options)


def _check_output(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise OutputExists(f"output {out} is a file; give a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        raise OutputExists(
            f"output directory {out} is not empty; give a new or empty directory (remove "
            "it first to replace an earlier backfill)"
        )


def _check_ends(plan: BackfillPlan, ends: Mapping[int, int]) -> None:
    missing = [v for v in plan.vgroups if v not in ends]
    extra = [v for v in ends if v not in plan.vgroups]
    if missing or extra:
        raise BackfillError(
            f"ends must name exactly the vgroups of database {plan.database} "
            f"({', '.join(map(str, plan.vgroups))}); missing {missing}, unknown {extra}"
        )


def _remove_output(out: Path, existed: bool) -> None:
    """What a failed job wrote: the directory when it made it, else its contents."""
    if not out.is_dir():
        return
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in out.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
