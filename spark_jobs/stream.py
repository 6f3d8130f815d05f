"""The `sqltopic` Spark streaming source: a query topic read live, micro-batch by
micro-batch, with its offsets in Spark's checkpoint.

    import sqltopic.spark_jobs as sj
    sj.register(spark)
    rows = (spark.readStream.format("sqltopic")
            .option("server", "db1:6030")          # a server, or a cluster's mnode
            .option("topic", "overvoltage")        # the user needs SUBSCRIBE on it
            .option("startingOffsets", "earliest") # or latest, a manifest, JSON
            .load())

Each micro-batch reads, for every vgroup of the topic's database, the versions from the
previous batch's end to the end the driver chose (`latestOffset`), evaluated on the node
hosting the vgroup exactly as a consumer's poll is (`Vnode.ReadTopic`,
client/topic_read.py): the source is a reader, not a group's member. Rows are the
topic's output columns, then `_version` (BIGINT, the row's WAL version) and `vgroup`
(INT): the columns of a backfill's Parquet, so history and live union by name.

Options: `server`, `topic`, `user`, `password`, `tls`, `tlsCa`, `tlsCert`, `tlsKey` (as
the `sqltopic_wal` source's); `startingOffsets` (`latest`, the default as Kafka's;
`earliest`; the path of a backfill's `_manifest.json` or its output directory; a JSON
object of vgroup -> version, -2 earliest, -1 latest); `maxRowsPerTrigger` (WAL data rows
of the topic's database per micro-batch: spark_jobs/stream_offsets.py `limited`);
`failOnDataLoss` (`true`, the default: a batch whose versions retention deleted fails
naming the range; `false`: the gap is logged and skipped). Offsets and data loss:
spark_jobs/stream_offsets.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from sqltopic.errors import ConfigError, OffsetOutOfRange
from sqltopic.spark_jobs import remote, stream_offsets, types
from sqltopic.spark_jobs.commit import PARTITION
from sqltopic.spark_jobs.remote import Remote
from sqltopic.spark_jobs.source import remote_of
from sqltopic.spark_jobs.spec import VERSION, writable_output
from sqltopic.spark_jobs.stream_offsets import Offsets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

NAME = "sqltopic"
# Rows per Arrow batch a task hands Spark: large enough to amortise the per-batch cost,
# small enough that a batch's JVM buffers stay a few MB (the sqltopic_wal source's size).
BATCH_ROWS = 65_536
# WAL rows a task reads, about: ~1-2 s of a task (the server's evaluation and Spark's
# handling of the rows), so that Spark's ~50 ms per task stays small and a long backlog
# still keeps every core busy (20M rows in 4 tasks drained ~30 % faster than in 79).
PART_ROWS = 8_000_000

log = logging.getLogger("sqltopic.spark_jobs.stream")


@dataclass(frozen=True)
class StreamPlan:
    """What every part of a streaming query needs (picklable: shipped to each task)."""

    source: Remote  # with the endpoint of each vgroup
    database: str
    vgroups: tuple[int, ...]
    schema: pa.Schema  # the rows in sqltopic's Arrow types: output, _version, vgroup
    starting: str
    max_rows: int | None
    fail_on_data_loss: bool

    @property
    def spark_schema(self) -> pa.Schema:
        return types.spark_schema(self.schema)


@dataclass(frozen=True)
class VersionRange:
    """One task's versions [start, end) of one vgroup."""

    vgroup: int
    start: int
    end: int


class RangePartition(InputPartition):
    """One task's range (picklable)."""

    def __init__(self, span: VersionRange) -> None:
        super().__init__(span)
        self.span = span


class TopicStream(DataSource):
    """`spark.readStream.format("sqltopic")`: see the module docstring for the options."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._plan: StreamPlan | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def plan(self) -> StreamPlan:
        if self._plan is None:
            self._plan = plan_stream(self.options)
        return self._plan

    def schema(self) -> str:
        return types.ddl(self.plan().schema)

    def streamReader(self, schema: StructType) -> TopicStreamReader:
        return TopicStreamReader(self.plan())


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver's side (offsets, partitions) and the tasks' (`read`)."""

    def __init__(self, plan: StreamPlan) -> None:
        self.plan = plan
        self._target: Offsets | None = None  # Trigger.AvailableNow: read up to here
        self._latest: Offsets | None = None

    def initialOffset(self) -> dict[str, int]:
        p = self.plan
        found = stream_offsets.starting(p.starting, p.source, p.database, p.vgroups)
        return stream_offsets.to_spark(found)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.plan.max_rows is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.plan.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        found = remote.extents(self.plan.source, self.plan.vgroups)
        self._target = {v: e.next_version for v, e in found.items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = stream_offsets.from_spark(start, self.plan.vgroups)
        found = remote.extents(self.plan.source, self.plan.vgroups)
        ends = {v: e.next_version for v, e in found.items()}
        self._latest = ends
        if self._target is not None:
            ends = {v: min(e, self._target[v]) for v, e in ends.items()}
        # a start below the first retained version reads from there (partitions() says
        # what was lost); an end never goes back
        begin = {v: max(s, found[v].first) for v, s in begin.items()}
        ends = {v: max(e, begin[v]) for v, e in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = stream_offsets.limited(self.plan.source, begin, ends, limit.max_rows)
        return stream_offsets.to_spark({v: max(e, int(start[str(v)])) for v, e in ends.items()})

    def reportLatestOffset(self) -> dict[str, int] | None:
        return None if self._latest is None else stream_offsets.to_spark(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        p = self.plan
        begin = stream_offsets.from_spark(start, p.vgroups)
        stop = stream_offsets.from_spark(end, p.vgroups)
        moving = tuple(v for v in p.vgroups if begin[v] < stop[v])
        if not moving:
            return []
        found = remote.extents(p.source, moving)
        lost = stream_offsets.lost_ranges(begin, stop, found)
        stream_offsets.check_lost(lost, p.source.topic, p.fail_on_data_loss)
        for gap in lost:
            begin[gap.vgroup] = gap.first
        reading = {v: begin[v] for v in moving if begin[v] < stop[v]}
        rows = remote.rows_between(p.source, reading, {v: stop[v] for v in reading})
        return [RangePartition(r) for v in reading for r in split(v, begin[v], stop[v], rows[v])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        span: VersionRange = partition.span  # type: ignore[attr-defined]
        return read_range(self.plan, span)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not on the server."""


def split(vgroup: int, start: int, end: int, rows: int) -> list[VersionRange]:
    """[start, end), which holds `rows` WAL rows, in ranges of about PART_ROWS rows (by
    the range's mean rows per version): a long backlog is read by several tasks at
    once, and a backlog of small entries is not cut into thousands of tiny tasks."""
    versions = end - start
    parts = max(1, min(versions, -(-rows // PART_ROWS)))
    step = -(-versions // parts)
    return [
        VersionRange(vgroup, first, min(first + step, end)) for first in range(start, end, step)
    ]


def read_range(plan: StreamPlan, span: VersionRange) -> Iterator[pa.RecordBatch]:
    """The topic's rows of `span`, read on the node hosting the vgroup, as Spark's Arrow
    batches (in a task). Versions retention deleted meanwhile fail the task when
    failOnDataLoss, else are logged and skipped."""
    from sqltopic.client.topic_read import read_topic  # noqa: PLC0415 - in the worker

    target = plan.spark_schema
    vgroup = pa.scalar(span.vgroup, pa.int32())
    at = span.start
    with plan.source.connect(span.vgroup) as conn:
        while at < span.end:
            try:
                for block in read_topic(conn, plan.source.topic, span.vgroup, at, span.end):
                    at = block.next_version
                    if block.rows is not None:
                        yield from _batches(block.rows, vgroup, target)
            except OffsetOutOfRange as gone:
                at = _after_loss(plan, span, at, gone)


def _batches(rows: pa.Table, vgroup: pa.Scalar, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    table = rows.append_column(PARTITION, pa.repeat(vgroup, rows.num_rows))
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        yield types.to_spark(batch, target)


def _after_loss(plan: StreamPlan, span: VersionRange, at: int, gone: OffsetOutOfRange) -> int:
    """Where a task goes on after retention deleted versions from `at` while it read
    (raises when failOnDataLoss)."""
    first = gone.begin
    if first is None or first <= at:
        raise gone
    gap = stream_offsets.Lost(span.vgroup, at, first)
    if plan.fail_on_data_loss:
        raise OffsetOutOfRange(gap.message(plan.source.topic), begin=first) from None
    log.warning("%s; skipped (failOnDataLoss false)", gap.describe(plan.source.topic))
    return min(first, span.end)


def plan_stream(options: Any) -> StreamPlan:
    """The checked plan of a stream: the topic (a query topic without parameters, whose
    columns do not clash with `_version` and `vgroup`), its vgroups' nodes and the
    options. TopicNotFound, NoPermission, ConfigError."""
    base = remote_of(options, NAME)
    catalog = remote.catalog(base)
    topic = catalog.topic(base.topic)
    output = writable_output(catalog, topic, f"the {NAME} source", "stream", ConfigError)
    schema = pa.schema([*output, pa.field(VERSION, pa.int64()), pa.field(PARTITION, pa.int32())])
    types.spark_schema(schema)  # refuses what Spark cannot hold (ns timestamps) now
    return StreamPlan(
        source=base.located(topic.db),
        database=topic.db,
        vgroups=tuple(catalog.database(topic.db).vgroups),
        schema=schema,
        starting=options.get("startingOffsets") or "latest",
        max_rows=_max_rows(options.get("maxRowsPerTrigger")),
        fail_on_data_loss=_flag(options.get("failOnDataLoss"), "failOnDataLoss", True),
    )


def _max_rows(text: str | None) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option maxRowsPerTrigger: {text!r} is not an integer") from None
    if value < 1:
        raise ConfigError(f"option maxRowsPerTrigger must be at least 1, got {value}")
    return value


def _flag(text: str | None, key: str, default: bool) -> bool:
    if text is None or text == "":
        return default
    if text.lower() not in ("true", "false"):
        raise ConfigError(f"option {key} is true or false, got {text!r}")
    return text.lower() == "true"


def register(spark: SparkSession) -> None:
    """Make `spark.readStream.format("sqltopic")` available in `spark`."""
    spark.dataSource.register(TopicStream)
