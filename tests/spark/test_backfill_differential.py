"""Differential: for query topics over every column type, the rows a backfill writes
equal what consuming the topic from `earliest` delivers (the engine's `read_topic`, the
vnode's own evaluation in DuckDB): per vgroup, in WAL order, value for value; and the
two engines of the backfill (the live evaluator in Spark tasks, and the topic transpiled
to Spark SQL over the `sqltopic_wal` source) write the same rows in the same Parquet
types."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sqltopic.spark_jobs.backfill import local_ends, prepare, run_backfill
from tests.server.dataset import DB, Loaded
from tests.spark.support import backfill_rows, live_rows, non_empty

pytestmark = pytest.mark.spark

_ALL = "ts, b, ti, si, i, bi, uti, usi, ui, ubi, f, d, vc, bn, nc"

# (id, the topic's SELECT): filters, projections, scalar functions, tags, tbname, NULLs,
# every column type, and the expressions whose DuckDB and Spark meanings differ.
CASES = [
    ("star", "SELECT * FROM meters"),
    ("every_type", f"SELECT {_ALL}, tbname, location, groupid, region FROM meters"),
    (
        "filters",
        "SELECT ts, i, f, d, tbname FROM meters WHERE i > 0 AND f < 50.5 OR d BETWEEN -10 AND 10",
    ),
    (
        "strings",
        "SELECT ts, vc, bn, nc FROM meters "
        "WHERE nc = '北京' OR bn LIKE 'b%' OR vc = 'it''s' OR vc IS NULL",
    ),
    (
        "timestamps",
        "SELECT ts, i FROM meters WHERE ts > '2018-10-03 06:38:30.000' AND ts <= 1538548735000",
    ),
    (
        "arithmetic",
        "SELECT ts, i + ti AS s1, bi - si AS s2, d * 2 AS s3, f / 2 AS s4, "
        "ui + 1 AS s5, ubi + uti AS s6, i % 7 AS s7, -si AS s8, i * 1000 AS s9, "
        "d * 1.5 AS s10, usi - 1 AS s12, ti + 1 AS s13, i / ti AS s14, "
        "d % 0 AS s15, f * 3 AS s16 FROM meters",
    ),
    ("arithmetic_filter", "SELECT ts, i, ti FROM meters WHERE i * 2 + ti > 100 AND ti <> 0"),
    (
        "math",
        "SELECT ts, abs(i) AS a1, abs(f) AS a2, round(d) AS r1, round(f) AS r2, "
        "sqrt(abs(d)) AS q, log(abs(d) + 1) AS lg, log(abs(f) + 1, 2) AS lg2, "
        "ceil(d) AS c1, floor(f) AS f1, sign(d) AS sg, ln(ti) AS l0, "
        "pow(f, 2) AS p2, exp(ti) AS ex FROM meters",
    ),
    (
        "string_functions",
        "SELECT ts, lower(vc) AS lo, upper(nc) AS up, concat(vc, bn) AS cc, "
        "concat_ws('-', vc, nc) AS cw, length(nc) AS lb, "
        "char_length(nc) AS lc, substr(vc, 2, 3) AS sb, "
        "replace(bn, 'b', 'B') AS rp, ltrim(vc) AS lt FROM meters "
        "WHERE char_length(nc) >= 1",
    ),
    (
        "conditionals",
        "SELECT ts, CASE WHEN i > 100 THEN 'big' WHEN i IS NULL THEN 'none' "
        "ELSE 'small' END AS sz, coalesce(vc, bn, 'x') AS co, "
        "ifnull(groupid, -1) AS g, nullif(ti, 0) AS nz, "
        "CASE groupid WHEN 2 THEN location ELSE tbname END AS who FROM meters",
    ),
    (
        "casts",
        "SELECT ts, cast(i AS binary(12)) AS c1, cast(i AS bigint) AS c2, "
        "cast(ti AS double) AS c3, cast(ti AS int) AS c4, cast(b AS int) AS c5 "
        "FROM meters",
    ),
    ("tags", "SELECT ts, tbname, region, i FROM meters WHERE groupid = 2 OR location = 'SF'"),
    ("child", "SELECT ts, i, location, tbname FROM d1"),
    ("normal", "SELECT *, tbname FROM ntb WHERE c1 > -20"),
]


@pytest.mark.parametrize(("name", "select"), CASES, ids=[c[0] for c in CASES])
def test_backfill_equals_consuming_from_earliest(
    spark: SparkSession, loaded_history: Loaded, tmp_path: Path, name: str, select: str
) -> None:
    engine = loaded_history.engine
    topic = f"bf_{name}"
    engine.execute(f"USE {DB}; CREATE TOPIC IF NOT EXISTS {topic} AS {select}")
    data_dir = engine.state.data_dir
    plan = prepare(data_dir, topic)
    ends = local_ends(data_dir, DB)
    live = run_backfill(plan, tmp_path / "live", ends, spark=spark)
    spark_sql = run_backfill(plan, tmp_path / "sql", ends, spark=spark, engine="spark_sql")

    names = [column for column, _type in live.schema]
    expected = non_empty(live_rows(engine, topic))
    assert sum(len(r) for r in expected.values()) > 0, "the case selects nothing"
    assert backfill_rows(tmp_path / "live", names) == expected
    assert backfill_rows(tmp_path / "sql", names) == expected
    assert live == spark_sql
    assert {s.vgroup: s.rows for s in live.vgroups if s.rows} == {
        v: len(r) for v, r in expected.items()
    }
    assert _file_schema(tmp_path / "live") == _file_schema(tmp_path / "sql")


def _file_schema(out: Path) -> list[tuple[str, str]]:
    """The Parquet columns of a backfill's first file, as (name, Arrow type)."""
    first = sorted(out.glob("vgroup=*/*.parquet"))[0]
    return [(f.name, str(f.type)) for f in pq.read_schema(first)]
