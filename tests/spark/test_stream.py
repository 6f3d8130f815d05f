"""The `sqltopic` streaming source (spark_jobs/stream.py) end to end on a real server and
real Spark: a query with a Parquet sink and a checkpoint, stopped and restarted while a
writer keeps inserting, has every matching row exactly once; a backfill's manifest as
`startingOffsets` gives history then live with no gap or duplicate; `failOnDataLoss`
both ways; `maxRowsPerTrigger` bounds a micro-batch; and the source's refusals."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from sqltopic.cli import backfill
from sqltopic.client import Connection, admin
from sqltopic.client.topic_read import read_topic
from sqltopic.errors import ConfigError, NoPermission, OffsetOutOfRange, VgroupUnavailable
from sqltopic.spark_jobs import stream_offsets
from sqltopic.spark_jobs.pieces import Extent
from sqltopic.spark_jobs.source import remote_of
from sqltopic.spark_jobs.stream import NAME, PART_ROWS, VersionRange, plan_stream, split
from tests.cluster.support import Cluster
from tests.live_server import POWER, ServerProcess
from tests.spark.test_handoff import (
    DEADLINE_S,
    METERS,
    SELECT,
    TOPIC,
    VGROUPS,
    Row,
    Writer,
    args_of,
    check_union,
    expected,
    insert,
    normal,
    parquet_rows,
)

pytestmark = pytest.mark.spark

# A processing-time query's trigger: short, so that a test sees several micro-batches.
TRIGGER = "200 milliseconds"


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    insert(live_power, 1_700_000_000_000, 400)
    return live_power


def source(spark: SparkSession, server: ServerProcess, **options: str) -> DataFrame:
    reader = spark.readStream.format(NAME).option("server", server.address)
    reader = reader.option("topic", "hot")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def to_parquet(df: DataFrame, out: Path, checkpoint: Path, *, now: bool) -> StreamingQuery:
    writer = df.writeStream.format("parquet").option("path", str(out))
    writer = writer.option("checkpointLocation", str(checkpoint))
    trigger = writer.trigger(availableNow=True) if now else writer.trigger(processingTime=TRIGGER)
    return trigger.start()


def sink_rows(spark: SparkSession, out: Path) -> Counter[Row]:
    """The rows a Parquet sink committed (Spark reads its `_spark_metadata` log: files of
    a batch a stop interrupted are not among them)."""
    rows = spark.read.parquet(str(out)).select("ts", "voltage", "tbname").collect()
    return Counter((_micros(r.ts), r.voltage, r.tbname) for r in rows)


def _micros(ts: Any) -> int:
    table = pa.table({"ts": pa.array([ts], pa.timestamp("us", tz="UTC"))})
    return int(table["ts"].cast(pa.int64())[0].as_py())


def wait_batches(query: StreamingQuery, count: int) -> None:
    """Until `query` has run `count` micro-batches that read rows."""
    deadline = time.monotonic() + DEADLINE_S
    while sum(1 for p in query.recentProgress if p["numInputRows"]) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"fewer than {count} batches: {query.recentProgress}"
        time.sleep(0.1)


def finish(query: StreamingQuery) -> None:
    """Wait for a query of Trigger.AvailableNow to end, without error."""
    assert query.awaitTermination(int(DEADLINE_S)), "the query did not end"
    assert query.exception() is None, query.exception()


def wait_caught_up(query: StreamingQuery, ends: dict[int, int]) -> None:
    """Until `query` committed a micro-batch ending at `ends`."""
    want = {str(v): e for v, e in ends.items()}
    deadline = time.monotonic() + DEADLINE_S
    while True:
        progress = query.lastProgress
        end = progress["sources"][0]["endOffset"] if progress else None
        if (json.loads(end) if isinstance(end, str) else end) == want:
            return
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"not caught up with {want}: {end}"
        time.sleep(0.1)


def test_a_query_restarted_from_its_checkpoint_has_every_row_once(
    server: ServerProcess, hot: Connection, spark: SparkSession, tmp_path: Path, writer: Writer
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = to_parquet(source(spark, server, startingOffsets="earliest"), out, checkpoint,
                       now=False)  # fmt: skip
    wait_batches(first, 1)
    writer.wait_for_more()
    first.stop()  # mid-stream: the batch under way is cut short
    writer.wait_for_more()  # rows written while no query runs
    again = to_parquet(source(spark, server), out, checkpoint, now=False)  # the checkpoint's
    wait_batches(again, 1)
    writer.wait_for_more()
    writer.stop()
    wait_caught_up(again, {v: r.end for v, r in admin.offset_ranges(hot, "hot", VGROUPS).items()})
    again.stop()
    got = sink_rows(spark, out)
    assert all(n == 1 for n in got.values()), "a row came twice"
    assert got == expected(hot)


def test_history_from_a_backfill_then_live_from_its_manifest(
    server: ServerProcess, hot: Connection, spark: SparkSession, tmp_path: Path
) -> None:
    history = tmp_path / "history"
    assert backfill.run(args_of(server, history), spark=spark) == 0
    insert(hot, 1_800_000_000_000, 200)  # after the backfill: live
    live, checkpoint = tmp_path / "live", tmp_path / "checkpoint"
    manifest = str(history / "_manifest.json")
    query = to_parquet(source(spark, server, startingOffsets=manifest), live, checkpoint,
                       now=True)  # fmt: skip
    finish(query)
    streamed = sink_rows(spark, live)
    check_union(parquet_rows(history), streamed, expected(hot))
    # the two union by name: the same columns and types (the backfill's vgroup from its
    # directories)
    both = spark.read.parquet(str(history)).unionByName(spark.read.parquet(str(live)))
    assert both.count() == sum(expected(hot).values())
    assert dict(both.dtypes) == {"ts": "timestamp", "voltage": "int", "tbname": "string",
                                 "_version": "bigint", "vgroup": "int"}  # fmt: skip


def test_max_rows_per_trigger_bounds_each_micro_batch(
    server: ServerProcess, hot: Connection, spark: SparkSession, tmp_path: Path
) -> None:
    ends = {str(v): r.end for v, r in admin.offset_ranges(hot, "hot", VGROUPS).items()}
    for i in range(10):  # entries of at most 40 rows: a budget of 100 cuts between them
        insert(hot, 1_800_000_000_000 + i * 40, 40)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = source(spark, server, startingOffsets=json.dumps(ends), maxRowsPerTrigger="100")
    query = to_parquet(df, out, checkpoint, now=True)
    finish(query)
    counts = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(counts) >= 4  # 400 WAL rows, at most 100 a batch (about half match)
    assert max(counts) <= 100
    assert sink_rows(spark, out) == normal(hot.query(f"{SELECT} AND ts >= 1800000000000"))


def test_fail_on_data_loss_both_ways(
    server: ServerProcess, hot: Connection, spark: SparkSession, tmp_path: Path
) -> None:
    hot.execute("ALTER DATABASE power WAL_RETENTION_PERIOD 0 WAL_SEGMENT_SIZE 1")
    for i in range(30):
        insert(hot, 1_750_000_000_000 + i * 200, 200)
    deadline = time.monotonic() + DEADLINE_S
    while all(r.begin == 1 for r in admin.offset_ranges(hot, "hot", VGROUPS).values()):
        assert time.monotonic() < deadline, "retention deleted nothing"
        time.sleep(0.1)
    everything = json.dumps(dict.fromkeys(map(str, VGROUPS), 1))
    failing = to_parquet(source(spark, server, startingOffsets=everything), tmp_path / "a",
                         tmp_path / "a_checkpoint", now=True)  # fmt: skip
    with pytest.raises(StreamingQueryException, match=r"versions 1\.\.\d+ were deleted"):
        failing.awaitTermination(int(DEADLINE_S))
    assert "failOnDataLoss" in str(failing.exception())
    df = source(spark, server, startingOffsets=everything, failOnDataLoss="false")
    skipping = to_parquet(df, tmp_path / "b", tmp_path / "b_checkpoint", now=True)
    finish(skipping)
    got = sink_rows(spark, tmp_path / "b")
    # every row once and none made up; the lost ones skipped, so fewer than were written
    written = {row for i in range(30) for row in _hot_rows(1_750_000_000_000 + i * 200, 200)}
    assert all(n == 1 for n in got.values())
    assert set(got) <= written
    assert len(got) < len(written)
    # and every row the vgroups still hold: retention never deleted them, so the stream
    # read them (it may have read more: segments kept going while it ran)
    assert _retained(hot) <= set(got)


def _hot_rows(first: int, count: int) -> set[Row]:
    """The rows of topic hot among what `insert(first, count)` writes."""
    rows = set()
    for m in range(METERS):
        for i in range(m, count, METERS):
            voltage = 215 + (i * 7 + m) % 12
            if voltage > 220:
                rows.add(((first + i) * 1000, voltage, f"d{m}"))
    return rows


def _retained(conn: Connection) -> set[Row]:
    """The topic's rows the vgroups hold now, read again if retention deleted some
    under the read."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        ranges = admin.offset_ranges(conn, "hot", VGROUPS)
        retained: Counter[Row] = Counter()
        try:
            for v in VGROUPS:
                for block in read_topic(conn, "hot", v, ranges[v].begin, ranges[v].end):
                    retained += normal(block.rows) if block.rows is not None else Counter()
        except OffsetOutOfRange:
            assert time.monotonic() < deadline, "retention kept deleting what was read"
            continue
        return set(retained)


def _options(server: ServerProcess, **more: str) -> dict[str, str]:
    return {"server": server.address, "topic": "hot", **more}


def test_refusals(server: ServerProcess, hot: Connection, tmp_path: Path) -> None:
    hot.execute("CREATE TOPIC whole AS STABLE power.meters")
    hot.execute("CREATE TOPIC bound AS SELECT ts, voltage FROM power.meters WHERE tbname = ?")
    hot.execute("CREATE TOPIC clash AS SELECT ts, voltage AS vgroup FROM power.meters")
    hot.execute("CREATE USER nobody PASS 'nobody_pass1'; GRANT READ ON power.* TO nobody")
    for topic, words in [("whole", "stable topic"), ("bound", "has parameters"),
                         ("clash", "output column 'vgroup'")]:  # fmt: skip
        with pytest.raises(ConfigError, match=words):
            plan_stream(_options(server, topic=topic))
    with pytest.raises(NoPermission):
        plan_stream(_options(server, user="nobody", password="nobody_pass1"))
    for key, value, words in [("maxRowsPerTrigger", "0", "at least 1"),
                              ("maxRowsPerTrigger", "x", "not an integer"),
                              ("failOnDataLoss", "maybe", "true or false")]:  # fmt: skip
        with pytest.raises(ConfigError, match=words):
            plan_stream(_options(server, **{key: value}))
    plan = plan_stream(_options(server))
    assert (plan.starting, plan.max_rows, plan.fail_on_data_loss) == ("latest", None, True)
    base = remote_of(_options(server), NAME)

    def starting(option: str) -> dict[int, int]:
        return stream_offsets.starting(option, plan.source, "power", VGROUPS)

    ranges = admin.offset_ranges(hot, "hot", VGROUPS)
    assert starting("earliest") == {v: r.begin for v, r in ranges.items()}
    assert starting("latest") == {v: r.end for v, r in ranges.items()}
    assert starting('{"1": 3, "2": -2}') == {1: 3, 2: ranges[2].begin}
    with pytest.raises(ConfigError, match="exactly the database's vgroups"):
        starting('{"1": 3}')
    with pytest.raises(ConfigError, match="below -2"):
        starting('{"1": 3, "2": -7}')
    with pytest.raises(ConfigError, match="readable backfill manifest"):
        starting(str(tmp_path / "nowhere"))
    other = tmp_path / "_manifest.json"
    other.write_text(json.dumps({"format": 1, "topic": "cold", "database": "power",
                                 "vgroups": [], "schema": []}))  # fmt: skip
    with pytest.raises(ConfigError, match="backfill of topic cold"):
        starting(str(tmp_path))
    assert base.topic == "hot"


@pytest.mark.parametrize(
    ("start", "end", "rows", "expected"),
    [
        # a few big entries: one task
        (1, 11, PART_ROWS // 2, [(1, 11)]),
        # 2.5 parts' worth of rows: three ranges of equal versions
        (1, 301, PART_ROWS * 5 // 2, [(1, 101), (101, 201), (201, 301)]),
        # 10M one-row entries: ceil(10M / PART_ROWS) ranges, not 2,442 of 4,096 versions
        (5, 10_000_005, 10_000_000, [(5, 5_000_005), (5_000_005, 10_000_005)]),
        # more rows than versions can split: one version each
        (7, 9, PART_ROWS * 10, [(7, 8), (8, 9)]),
        # only meta entries (no rows): one range
        (3, 4, 0, [(3, 4)]),
    ],
    ids=["one_task", "equal_parts", "small_entries", "version_each", "no_rows"],
)
def test_a_range_is_split_by_its_rows(
    start: int, end: int, rows: int, expected: list[tuple[int, int]]
) -> None:
    got = split(2, start, end, rows)
    assert [(r.start, r.end) for r in got] == expected
    assert all(isinstance(r, VersionRange) and r.vgroup == 2 for r in got)


def test_a_start_retention_passed_is_reported_at_planning() -> None:
    found = {1: Extent(10, 20), 2: Extent(1, 5)}
    lost = stream_offsets.lost_ranges({1: 4, 2: 0}, {1: 20, 2: 5}, found)
    assert lost == [stream_offsets.Lost(1, 4, 10)]  # version 0 never existed
    with pytest.raises(OffsetOutOfRange, match=r"vgroup 1: versions 4\.\.9 were deleted"):
        stream_offsets.check_lost(lost, "hot", fail=True)
    stream_offsets.check_lost(lost, "hot", fail=False)  # logged only


@pytest.mark.cluster
def test_a_cluster_s_topic_streams_from_its_dnode(spark: SparkSession, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster")
    try:
        dnode = cluster.add_dnode()
        cluster.wait_status(dnode, "ready")
        with cluster.connect() as conn:
            conn.execute(POWER)
            conn.execute(TOPIC)
            insert(conn, 1_700_000_000_000, 200)
            with pytest.raises(VgroupUnavailable):  # the mnode hosts no vgroup: ask the dnode
                list(read_topic(conn, "hot", 1, 0, 0))
            df = (
                spark.readStream.format(NAME).option("server", cluster.mnode.address)
                .option("topic", "hot").option("startingOffsets", "earliest").load()
            )  # fmt: skip
            query = to_parquet(df, tmp_path / "out", tmp_path / "checkpoint", now=True)
            finish(query)
            assert sink_rows(spark, tmp_path / "out") == expected(conn)
    finally:
        cluster.close()
