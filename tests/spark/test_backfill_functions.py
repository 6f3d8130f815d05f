"""TDengine's scalar functions in a backfill: the rows Spark writes equal what consuming
the topic from `earliest` delivers (DuckDB on the vnode), value for value; a function
Spark could not align would be refused by its TDengine name.

Meanings: docs/en/14-reference/03-taos-sql/22-function.md (taosdata/TDengine); the
pure-Python meaning of each is tested in tests/sql/test_functions_property.py."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from sqltopic.errors import BackfillUnsupported
from sqltopic.spark_jobs.backfill import local_ends, prepare, run_backfill
from sqltopic.spark_jobs.transpile import transpile
from tests.server.dataset import DB, Loaded
from tests.spark.support import backfill_rows, live_rows, non_empty

pytestmark = pytest.mark.spark

# (id, the topic's SELECT): each case bundles many functions, a backfill costs seconds.
# The topic's SELECT: every function in one topic, since a backfill costs seconds.
SELECT = (
    "SELECT ts, greatest(i, ti, si) AS g, least(d, f) AS l, truncate(d, 1) AS t1, "
    "truncate(f, 0) AS t0, truncate(i, -1) AS ti1, ln(d) AS lnd, sqrt(d) AS sq, "
    "greatest(vc, bn) AS gs, substring(vc, 0) AS s0, substring(vc, -3, 2) AS s1, "
    "substr(nc, 2) AS s2, substring(vc, 2, -1) AS s3, position('a' IN vc) AS p, "
    "ascii(nc) AS a, to_base64(nc) AS b64, trim(both 'b' FROM bn) AS tb, "
    "trim(leading 'a' FROM vc) AS tl, substring_index(vc, 'a', 2) AS sx, "
    "substring_index(nc, '京', -1) AS sx2, char(ti, 77, si) AS ch, "
    "timetruncate(ts, 1s) AS tt1, timetruncate(ts, 1d) AS tt2, "
    "timediff(ts, '2018-10-03 00:00:00', 1m) AS d1, timediff(ts, 1538548685000) AS d2, "
    "weekday(ts) AS wd, dayofweek(ts) AS dw, weekofyear(ts) AS wy, ts + 1s AS later, "
    "week(ts) AS w0, week(ts, 7) AS w7, timezone() AS tz, to_iso8601(ts) AS iso, "
    "to_iso8601(ts, '-05:30') AS iso2 "
    "FROM meters WHERE ts > now - 36500d AND ts < now() + 1d"
)


def _backfill(spark: SparkSession, loaded: Loaded, tmp: Path, topic: str) -> None:
    data_dir = loaded.engine.state.data_dir
    plan = prepare(data_dir, topic)
    manifest = run_backfill(plan, tmp / "out", local_ends(data_dir, DB), spark=spark)
    names = [column for column, _type in manifest.schema]
    expected = non_empty(live_rows(loaded.engine, topic))
    assert backfill_rows(tmp / "out", names) == expected
    assert sum(len(r) for r in expected.values()) > 0, "the case selects nothing"


def test_backfill_of_functions_equals_consuming(
    spark: SparkSession, loaded_history: Loaded, tmp_path: Path
) -> None:
    topic = "bff_functions"
    loaded_history.engine.execute(f"USE {DB}; CREATE TOPIC IF NOT EXISTS {topic} AS {SELECT}")
    _backfill(spark, loaded_history, tmp_path, topic)


def test_a_function_spark_cannot_align_is_refused_by_name() -> None:
    """A translated call carries its TDengine name (`/* td:name */`): a function the
    catalogue marks as Spark-refused (`Spec.spark`, RAND) is refused by that name."""
    sql = 'SELECT (RANDOM()) /* td:rand */ AS "x" FROM "__batch"'
    with pytest.raises(BackfillUnsupported, match="function RAND has no exact Spark form"):
        transpile(
            "t",
            sql,
            pa.schema([pa.field("ts", pa.timestamp("ms"))]),
            pa.schema([pa.field("x", pa.float64())]),
            "src",
        )
