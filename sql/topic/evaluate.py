"""Evaluating a compiled query topic over WAL entries: the one evaluator of topics.

A vnode's read (server/core/topic_reader.py, tracked_reader.py) and a backfill's Spark
task (spark_jobs/task.py) both build the topic's batch with `QueryShape.batch` (the
entries' rows in the table's current columns, plus the tags and `tbname` the SQL names)
and run the compiled SELECT with `evaluate`: pyarrow for small batches of simple topics
(`arrow_eval`), DuckDB otherwise. So a backfill's rows are, by construction, what a
consumer of the topic receives.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.sql import layout
from sqltopic.sql.entries import conform
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import TBNAME, Catalog, Column, Table, Topic
from sqltopic.sql.topic import topic_schema
from sqltopic.sql.topic.arrow_eval import ArrowPlan, arrow_plan
from sqltopic.sql.topic.context import with_context
from sqltopic.sql.topic.duck import query

# Rows up to which a simple topic (sql/topic/arrow_eval.py) runs with pyarrow: DuckDB's
# ~1 ms per query dominates small reads (a consumer keeping up reads a few rows per
# poll); on large ones DuckDB's parallel scan wins.
ARROW_EVAL_MAX_ROWS = 65_536
# The column `each_run` numbers the runs in while it filters them (not a name SQL
# reaches: identifiers cannot hold NUL).
RUN_COLUMN = "\x00run"


@dataclass(frozen=True)
class QueryShape:
    """A query topic's batch and output schemas, derived from the catalog."""

    data: pa.Schema  # the target's data columns now
    tags: tuple[Column, ...]  # the tags the topic's SQL names (only those are added)
    precision: str
    tbname: bool  # the compiled SQL quotes every identifier: `"tbname"` iff it names it
    out: pa.Schema  # the topic's output columns, in their exact types

    @classmethod
    def of(cls, catalog: Catalog, topic: Topic) -> QueryShape:
        db = catalog.database(topic.db)
        return cls(
            data=data_schema(catalog.columns_of(topic.db, topic.target or ""), db.precision),
            tags=used_tags(catalog, topic),
            precision=db.precision,
            tbname=f'"{TBNAME}"' in topic.select_sql,
            out=topic_schema(topic, catalog),
        )

    def batch(self, tables: Sequence[Table], batches: Sequence[pa.RecordBatch]) -> pa.Table:
        """The relation the compiled SQL reads: `batches` (each one table's run of rows,
        in WAL order; `tables` their owners) in the current columns, with context."""
        data = pa.Table.from_batches([conform(b, self.data) for b in batches], schema=self.data)
        lengths = [b.num_rows for b in batches]
        return with_context(data, tables, lengths, self.tags, self.precision, tbname=self.tbname)


def each_run(
    shape: QueryShape, sql: str, tables: Sequence[Table], batches: Sequence[pa.RecordBatch],
    out: pa.Schema | None = None,
) -> list[pa.Table] | None:  # fmt: skip
    """`sql` over each run (`batches[i]`, rows of `tables[i]`) as `evaluate` answers it
    over that run alone, cast to `out` if given, with one evaluation of them all: what
    pyarrow runs (arrow_eval.py) decides each row by that row alone, so a run's rows
    are a slice of the whole's. None when pyarrow cannot run it exactly or the runs are
    over ARROW_EVAL_MAX_ROWS (then evaluate each: they are not this function's)."""
    lengths = [b.num_rows for b in batches]
    plan = cached_plan(sql)
    if plan is None or sum(lengths) > ARROW_EVAL_MAX_ROWS:
        return None
    batch = shape.batch(tables, batches)
    if plan.where is not None:  # which run each kept row is of, in a column of its own
        if RUN_COLUMN in batch.schema.names:
            return None
        runs = [pa.repeat(pa.scalar(i, pa.int32()), n) for i, n in enumerate(lengths)]
        batch = batch.append_column(RUN_COLUMN, pa.chunked_array(runs, pa.int32()))
    data = plan.filter(batch)
    if data is None:
        return None
    whole = plan.project(data)
    if out is not None:
        whole = whole.cast(out)
    kept = lengths if plan.where is None else _per_run(data.column(RUN_COLUMN), len(lengths))
    slices: list[pa.Table] = []
    start = 0
    for n in kept:
        slices.append(whole.slice(start, n))
        start += n
    return slices


def _per_run(runs: pa.ChunkedArray, count: int) -> list[int]:
    """How many rows each of `count` runs kept, from the kept rows' run numbers."""
    kept = [0] * count
    found = pc.value_counts(runs)
    for run, n in zip(found.field("values").to_pylist(), found.field("counts").to_pylist(),
                      strict=True):  # fmt: skip
        kept[run] = n
    return kept


def evaluate(con: duckdb.DuckDBPyConnection, sql: str, batch: pa.Table) -> pa.Table:
    """The compiled SELECT `sql` over `batch`: with pyarrow when the batch is small and
    the topic simple enough to be exact there, else with DuckDB on `con` (one made by
    sql/topic/duck.py's `connect`)."""
    if batch.num_rows <= ARROW_EVAL_MAX_ROWS:
        out = small_evaluation(sql, batch)
        if out is not None:
            return out
    return query(con, sql, layout.BATCH, batch)


def small_evaluation(sql: str, batch: pa.Table) -> pa.Table | None:
    """`sql` over `batch` with pyarrow, or None when pyarrow cannot run it exactly."""
    plan = cached_plan(sql)
    return plan.run(batch) if plan is not None else None


@functools.lru_cache(maxsize=1024)
def cached_plan(select_sql: str) -> ArrowPlan | None:
    return arrow_plan(select_sql)


def used_tags(cat: Catalog, topic: Topic) -> tuple[Column, ...]:
    """The tags the topic's SQL names (only those are added to the batch)."""
    table = cat.tables.get((topic.db, topic.target or ""))
    stable = table.stable if table is not None else topic.target
    stb = cat.stables.get((topic.db, stable or ""))
    if stb is None:
        return ()
    return tuple(t for t in stb.tags if t.name in topic.uses)
