"""The backfill job: retention, the manifest, the source's columns, and every refusal
(unknown topic, a topic it cannot write, SQL the Spark SQL engine cannot run, non-empty
output, no Java) with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from sqltopic.errors import BackfillUnsupported, OutputExists, TopicNotFound
from sqltopic.spark_jobs.backfill import local_ends, prepare, run_backfill
from sqltopic.spark_jobs.manifest import MANIFEST_NAME, Manifest
from sqltopic.spark_jobs.progress import BackfillProgress
from sqltopic.spark_jobs.task import PieceOutput
from tests.spark.conftest import HistoryFactory
from tests.spark.support import backfill_rows, live_rows, non_empty

pytestmark = pytest.mark.spark

METERS = """
CREATE DATABASE power VGROUPS 2 WAL_SEGMENT_SIZE 1 WAL_RETENTION_PERIOD 0;
USE power;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location VARCHAR(16));
"""


def _write(engine_execute: object, start: int, n: int) -> None:
    rows = " ".join(
        f"({1_700_000_000_000 + i}, {i / 4}, {200 + i % 40})" for i in range(start, start + n)
    )
    assert callable(engine_execute)
    engine_execute(f"INSERT INTO d1 USING meters TAGS ('a') VALUES {rows} "
                   f"d2 USING meters TAGS ('b') VALUES {rows}")  # fmt: skip


def test_retention_the_manifest_records_the_real_start(
    spark: SparkSession, make_history: HistoryFactory, tmp_path: Path
) -> None:
    engine = make_history(METERS)
    for batch in range(12):
        _write(engine.execute, batch * 10, 10)
    engine.execute("CREATE TOPIC high AS SELECT ts, voltage, location FROM meters "
                   "WHERE voltage > 220")  # fmt: skip
    firsts = {}
    for vgroup, vnode in engine.state.vnodes.items():
        vnode.wal.maintain()  # 1 KB segments, no retention period: sealed ones go
        firsts[vgroup] = vnode.reader().first_version
    assert all(first > 1 for first in firsts.values()), "retention deleted nothing"

    data_dir = engine.state.data_dir
    ends = local_ends(data_dir, "power")
    manifest = run_backfill(prepare(data_dir, "high"), tmp_path / "out", ends, spark=spark)

    assert {s.vgroup: s.start for s in manifest.vgroups} == firsts
    assert {s.vgroup: s.end for s in manifest.vgroups} == ends
    expected = non_empty(live_rows(engine, "high"))
    assert backfill_rows(tmp_path / "out", ["ts", "voltage", "location"]) == expected
    text = (tmp_path / "out" / MANIFEST_NAME).read_text()
    assert Manifest.from_json(text) == manifest
    assert json.loads(text)["schema"] == [["ts", "TIMESTAMP"], ["voltage", "INT"],
                                          ["location", "VARCHAR(16)"]]  # fmt: skip


def test_ends_bound_the_read_and_parquet_timestamps_are_micros(
    spark: SparkSession, make_history: HistoryFactory, tmp_path: Path
) -> None:
    engine = make_history(METERS)
    _write(engine.execute, 0, 5)
    data_dir = engine.state.data_dir
    ends = local_ends(data_dir, "power")
    _write(engine.execute, 100, 5)  # after the snapshot: not read
    engine.execute("CREATE TOPIC allrows AS SELECT * FROM meters")
    manifest = run_backfill(prepare(data_dir, "allrows"), tmp_path / "out", ends, spark=spark)

    assert sum(s.rows for s in manifest.vgroups) == 10  # 5 rows in each of d1, d2
    table = pq.read_table(tmp_path / "out")
    ts = table.schema.field("ts").type
    assert (ts.unit, ts.tz) == ("us", "UTC")
    parquet_type = pq.ParquetFile(next((tmp_path / "out").rglob("*.parquet"))).schema
    logical = str(parquet_type.column(0).logical_type)
    assert "isAdjustedToUTC=true" in logical, logical
    assert "timeUnit=microseconds" in logical, logical
    assert max(table.column("_version").to_pylist()) < max(ends.values())


def test_the_source_reads_columns_vgroups_and_versions(
    spark: SparkSession, make_history: HistoryFactory
) -> None:
    engine = make_history(METERS)
    _write(engine.execute, 0, 3)
    data_dir = engine.state.data_dir
    df = (
        spark.read.format("sqltopic_wal")
        .option("path", str(data_dir))
        .option("database", "power")
        .option("table", "meters")
        .option("columns", "voltage,tbname,_vgroup,_version")
        .load()
    )
    assert df.columns == ["voltage", "tbname", "_vgroup", "_version"]
    rows = df.collect()
    assert sorted((r.tbname, r.voltage) for r in rows) == [
        (t, v) for t in ("d1", "d2") for v in (200, 201, 202)
    ]
    vgroup_of = {r[0]: r[5] for r in engine.execute("SHOW power.TABLES").rows}
    assert all(r._vgroup == vgroup_of[r.tbname] for r in rows)
    full = spark.read.format("sqltopic_wal").option("path", str(data_dir)).option(
        "database", "power").option("table", "d1").load()  # fmt: skip
    assert full.columns == ["ts", "current", "voltage", "location", "tbname", "_vgroup",
                            "_version"]  # fmt: skip
    assert full.count() == 3


def test_a_prefilter_leaves_out_the_rows_the_topics_condition_rejects(
    spark: SparkSession, make_history: HistoryFactory
) -> None:
    engine = make_history(METERS)
    _write(engine.execute, 0, 40)  # voltage 200..239 in d1 and d2
    engine.execute(
        "CREATE TOPIC hot AS SELECT ts, voltage FROM meters WHERE voltage > 235 AND "
        "location = 'a'; CREATE TOPIC odd AS SELECT ts FROM meters WHERE voltage % 2 = 1; "
        "CREATE TOPIC whole AS STABLE meters"
    )

    def read(prefilter: str) -> DataFrame:
        return (
            spark.read.format("sqltopic_wal").option("path", str(engine.state.data_dir))
            .option("database", "power").option("table", "meters")
            .option("prefilter", prefilter).load()
        )  # fmt: skip

    hot = read("hot").collect()
    assert sorted((r.tbname, r.voltage) for r in hot) == [("d1", v) for v in range(236, 240)]
    assert read("odd").count() == 80  # `%` may fail on a row: left to Spark, all rows come
    with pytest.raises(Exception, match=r"prefilter: whole is not a query topic on power\.meters"):
        read("whole").count()


# --- refusals: clear errors, nothing written ---------------------------------------------


def test_unknown_topic(make_history: HistoryFactory) -> None:
    engine = make_history(METERS)
    with pytest.raises(TopicNotFound, match="'nosuch' does not exist"):
        prepare(engine.state.data_dir, "nosuch")


@pytest.mark.parametrize(
    ("create", "message"),
    [
        ("CREATE TOPIC t AS STABLE meters", "stable topic .* query topics only"),
        ("CREATE TOPIC t WITH META AS DATABASE power", "database topic .* query topics only"),
        ("CREATE TOPIC t AS SELECT ts, voltage AS _version FROM meters", "'_version'"),
    ],
    ids=["stable", "database", "reserved_name"],
)
def test_topics_the_backfill_cannot_write_are_refused_before_spark(
    make_history: HistoryFactory, create: str, message: str
) -> None:
    engine = make_history(METERS)
    engine.execute(create)
    with pytest.raises(BackfillUnsupported, match=message):
        prepare(engine.state.data_dir, "t")


# SQL whose Spark SQL meaning differs from the topic's: the spark_sql engine refuses it,
# the live engine (the vnodes' evaluator) backfills it exactly.
SPARK_SQL_REFUSES = [
    (
        "CREATE TOPIC t AS SELECT ts FROM meters WHERE voltage * 2 > 5 OR current > 1",
        r"voltage\" \* 2 may fail .* under OR",
    ),
    (
        "CREATE TOPIC t AS SELECT ts, CAST(current AS VARCHAR(20)) AS c FROM meters",
        "function CAST has no exact Spark form",
    ),
    ("CREATE TOPIC t AS SELECT ts, voltage << 2 AS v FROM meters", "<< has no exact"),
]


@pytest.mark.parametrize(
    ("create", "message"),
    SPARK_SQL_REFUSES,
    ids=["or_overflow", "float_to_string", "shift"],
)
def test_sql_spark_cannot_run_exactly_is_refused_by_the_spark_sql_engine_only(
    spark: SparkSession, make_history: HistoryFactory, tmp_path: Path, create: str,
    message: str,
) -> None:  # fmt: skip
    engine = make_history(METERS)
    _write(engine.execute, 0, 40)
    engine.execute(create)
    data_dir = engine.state.data_dir
    plan = prepare(data_dir, "t")
    ends = local_ends(data_dir, "power")
    with pytest.raises(BackfillUnsupported, match=message):
        run_backfill(plan, tmp_path / "sql", ends, spark=spark, engine="spark_sql")
    assert not (tmp_path / "sql").exists()

    manifest = run_backfill(plan, tmp_path / "live", ends, spark=spark)
    names = [column for column, _type in manifest.schema]
    assert backfill_rows(tmp_path / "live", names) == non_empty(live_rows(engine, "t"))
    assert sum(s.rows for s in manifest.vgroups) == 80


def test_nanosecond_databases_are_refused(make_history: HistoryFactory) -> None:
    engine = make_history(
        "CREATE DATABASE nano PRECISION 'ns'; USE nano; CREATE TABLE t (ts TIMESTAMP, v INT);"
        "CREATE TOPIC tn AS SELECT * FROM t"
    )
    with pytest.raises(BackfillUnsupported, match="precision is 'ns'"):
        prepare(engine.state.data_dir, "tn")


def test_non_empty_output_is_refused_and_left_alone(
    spark: SparkSession, make_history: HistoryFactory, tmp_path: Path
) -> None:
    engine = make_history(METERS + "CREATE TOPIC t AS SELECT * FROM meters;")
    data_dir = engine.state.data_dir
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    plan = prepare(data_dir, "t")
    with pytest.raises(OutputExists, match="is not empty"):
        run_backfill(plan, out, local_ends(data_dir, "power"), spark=spark)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


MISSING_JAVA = """
import sys
from pathlib import Path
from sqltopic.errors import JavaNotFound
from sqltopic.spark_jobs.backfill import local_ends, prepare, run_backfill
data, out = Path(sys.argv[1]), Path(sys.argv[2])
try:
    run_backfill(prepare(data, "t"), out, local_ends(data, "power"))
except JavaNotFound as exc:
    print(exc)
    sys.exit(3)
"""


def test_missing_java_is_a_clear_error_before_anything_is_written(
    make_history: HistoryFactory, tmp_path: Path
) -> None:
    engine = make_history(METERS + "CREATE TOPIC t AS SELECT * FROM meters;")
    _write(engine.execute, 0, 3)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "empty-bin")  # no java on it
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", MISSING_JAVA, str(engine.state.data_dir), str(out)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "Spark needs Java 17" in done.stdout
    assert not out.exists()


# --- the live engine's tasks: retries, the commit protocol, progress -----------------------


def test_a_task_failing_once_is_retried_and_leaves_no_duplicate_or_partial_file(
    spark: SparkSession, make_history: HistoryFactory, tmp_path: Path
) -> None:
    """The test-only `fail_once`: the first task fails after writing part of its file,
    leaving it behind as a killed worker would; Spark runs the task again. The output
    holds one complete file per piece with rows, and every row once."""
    engine = make_history(METERS)
    for batch in range(8):
        _write(engine.execute, batch * 10, 10)
    engine.execute("CREATE TOPIC high AS SELECT ts, voltage, location FROM meters "
                   "WHERE voltage > 220")  # fmt: skip
    data_dir = engine.state.data_dir
    out, marker = tmp_path / "out", tmp_path / "failed-once"
    tasks: list[PieceOutput] = []
    progress: list[BackfillProgress] = []
    manifest = run_backfill(
        prepare(data_dir, "high"), out, local_ends(data_dir, "power"), spark=spark,
        fail_once=marker, on_tasks=tasks.extend, progress=progress.append,
    )  # fmt: skip

    assert marker.exists(), "no task failed: the injection did not run"
    assert len(tasks) > 2, "one piece only: the test needs several tasks"
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    expected_files = sorted(t.name for t in tasks if t.name)
    assert written == sorted([MANIFEST_NAME, *expected_files])
    assert len(set(expected_files)) == len(expected_files)
    for name in expected_files:  # each complete: a footer, and the rows its task reported
        rows = pq.ParquetFile(out / name).metadata.num_rows
        assert rows == next(t.rows for t in tasks if t.name == name)
    names = [column for column, _type in manifest.schema]
    expected = non_empty(live_rows(engine, "high"))
    assert backfill_rows(out, names) == expected
    assert sum(s.rows for s in manifest.vgroups) == sum(len(r) for r in expected.values())
    # the progress bar's figures: every piece done, and the rows of the retried task once
    last = [p for p in progress if p.tasks][-1]
    assert (last.tasks_done, last.tasks) == (len(tasks), len(tasks))
    assert last.rows == sum(s.rows for s in manifest.vgroups)
