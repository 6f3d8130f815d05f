"""One backfill task: a WAL piece in, the topic's rows of it as one Parquet file out.

Runs in a Spark Python worker, with the evaluator the vnodes use (sql/topic/evaluate.py):
the piece's runs of rows of the topic's tables (spark_jobs/read.py `piece_runs`, from the
files or through the server) are gathered into batches of about `TASK_BATCH_ROWS`, each
made into the topic's relation (`QueryShape.batch`) and evaluated in the topic's tracked
form (sql/topic/tracked.py), which gives every output row the WAL version of its entry
(`_version`). The rows are cast to Spark's types (spark_jobs/types.py) and written with
pyarrow's Parquet writer; nothing per row crosses into the JVM. The file is committed by
the protocol of spark_jobs/commit.py.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from sqltopic.errors import BackfillError
from sqltopic.spark_jobs import types
from sqltopic.spark_jobs.commit import OutputJob
from sqltopic.spark_jobs.parquet import COMPRESSION
from sqltopic.spark_jobs.pieces import Piece
from sqltopic.spark_jobs.read import piece_runs
from sqltopic.spark_jobs.remote import Remote
from sqltopic.spark_jobs.spec import VERSION
from sqltopic.sql.model import Table
from sqltopic.sql.topic.duck import connect
from sqltopic.sql.topic.evaluate import QueryShape, evaluate
from sqltopic.sql.topic.tracked import split_ids, tracked_sql, with_row_ids

# Input rows evaluated at once: DuckDB's fixed cost per query (~1 ms) vanishes over this
# many rows, and a batch of them stays a few tens of MB.
TASK_BATCH_ROWS = 262_144
# Rows per Parquet row group: readers can skip or split at this grain.
ROW_GROUP_ROWS = 1 << 20


@dataclass(frozen=True)
class LivePlan:
    """What every task of one backfill needs (picklable: shipped to each task)."""

    data_dir: str  # the entries' files (unless read through `remote`)
    remote: Remote | None
    shape: QueryShape
    select_sql: str  # the topic's compiled SELECT (the vnodes' own)
    tables: dict[int, dict[str, Table]]  # vgroup -> name -> the table (tags, name)
    schema: pa.Schema  # the file's columns: the output in Spark's types, then `_version`
    job: OutputJob
    # test-only: the first task to create this file fails after writing part of its
    # output (tests/spark: a retried task leaves no duplicate or partial file)
    fail_once: str | None = None


@dataclass(frozen=True)
class PieceOutput:
    """What a task reports: its piece's committed file ("" when no row matched)."""

    vgroup: int
    seq: int
    rows: int  # output rows written
    input_rows: int  # rows of the topic's tables read
    name: str
    seconds: float  # the task's own time, reading to commit


@dataclass
class _Pending:
    tables: list[Table] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    rows: int = 0

    def add(self, version: int, table: Table, rows: pa.RecordBatch) -> None:
        self.tables.append(table)
        self.batches.append(rows)
        self.versions.append(version)
        self.rows += rows.num_rows


def run_piece(plan: LivePlan, piece: Piece, on_rows: Callable[[int], None]) -> PieceOutput:
    """Evaluate the topic over `piece` and commit its file; `on_rows(n)` is told the
    output rows (Spark's accumulator: the progress bar's rows)."""
    started = time.monotonic()
    attempt = plan.job.attempt_file(piece)
    writer = _Writer(attempt, plan.schema)
    tables = plan.tables.get(piece.vgroup, {})
    pending, read = _Pending(), 0
    try:
        for version, name, rows in piece_runs(plan.data_dir, plan.remote, tables, piece):
            pending.add(version, tables[name], rows)
            read += rows.num_rows
            if pending.rows >= TASK_BATCH_ROWS:
                writer.write(_evaluate(plan, pending))
                pending = _Pending()
        if pending.rows:
            writer.write(_evaluate(plan, pending))
        _maybe_fail(plan, writer)
        writer.close()
    except InjectedFailure:
        raise  # as a killed worker would: its partial attempt file stays behind
    except BaseException:
        writer.close()
        attempt.unlink(missing_ok=True)
        raise
    # a piece with no matching rows wrote no file (the writer opens it at the first row)
    name = plan.job.commit_task(attempt, piece) if writer.rows else ""
    on_rows(writer.rows)
    elapsed = time.monotonic() - started
    return PieceOutput(piece.vgroup, piece.seq, writer.rows, read, name, elapsed)


def _evaluate(plan: LivePlan, pending: _Pending) -> pa.Table:
    """The topic's rows of `pending`, in Spark's types, with `_version`."""
    batch = plan.shape.batch(pending.tables, pending.batches)
    lengths = [b.num_rows for b in pending.batches]
    batch = with_row_ids(batch, pending.versions, lengths)
    own, versions, _indexes = split_ids(
        evaluate(_connection(), tracked_sql(plan.select_sql), batch)
    )
    return types.to_spark(own.cast(plan.shape.out).append_column(VERSION, versions), plan.schema)


class _Writer:
    """The attempt's Parquet file, opened at the first row (a piece with no matching
    rows writes no file, as Spark's writer does)."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self.path, self.schema, compression=COMPRESSION,
                use_dictionary=dictionary_columns(self.schema),
            )  # fmt: skip
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _maybe_fail(plan: LivePlan, writer: _Writer) -> None:
    """The test-only failure: once per job, after part of the output is written."""
    if plan.fail_once is None:
        return
    try:
        fd = os.open(plan.fail_once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    raise InjectedFailure(f"injected task failure (test option fail_once, {writer.rows} rows)")


class InjectedFailure(BackfillError):
    """The test-only failure of `LivePlan.fail_once`."""


_local = threading.local()


def _connection() -> duckdb.DuckDBPyConnection:
    """This worker thread's DuckDB connection, single-threaded: Spark runs a task per
    core, so one query per task keeps every core busy without oversubscribing."""
    con: duckdb.DuckDBPyConnection | None = getattr(_local, "con", None)
    if con is None:
        con = _local.con = connect(threads=1)
    return con


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary encoding: strings (tags, `tbname`, labels repeat)
    and `_version` (one value per entry). Numbers and timestamps rarely repeat, and
    trying a dictionary on them first (the writer's default) halves its speed
    (docs/performance.md, Backfill)."""
    return [f.name for f in schema if pa.types.is_string(f.type) or f.name == VERSION]


def file_schema(out: pa.Schema) -> pa.Schema:
    """A backfill file's columns: the topic's output in Spark's types, then `_version`."""
    return pa.schema([*types.spark_schema(out), pa.field(VERSION, pa.int64())])
