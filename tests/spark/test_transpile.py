"""The transpiler, table-driven and without Spark: what each construct becomes in Spark
SQL, and what is refused with a clear error (the differential tests check the meaning)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest

from sqltopic.errors import BackfillUnsupported
from sqltopic.server.core.engine import Engine
from sqltopic.spark_jobs.transpile import transpile
from sqltopic.sql.topic import topic_schema
from sqltopic.sql.topic.target import find_target
from tests.conftest import FakeClock

DDL = """
CREATE DATABASE db VGROUPS 1; USE db;
CREATE STABLE m (ts TIMESTAMP, ti TINYINT, i INT, u INT UNSIGNED, ub BIGINT UNSIGNED,
    f FLOAT, d DOUBLE, s VARCHAR(10), b BOOL) TAGS (loc VARCHAR(10));
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with Engine(tmp_path_factory.mktemp("t"), clock=FakeClock(), background=False) as e:
        e.execute(DDL)
        yield e


def spark_sql(engine: Engine, select: str) -> str:
    name = f"t{zlib.crc32(select.encode())}"
    engine.execute(f"CREATE TOPIC IF NOT EXISTS {name} AS {select}")
    cat = engine.state.catalog
    topic = cat.topic(name)
    target = find_target(cat, topic.db, topic.target or "")
    out = topic_schema(topic, cat)
    return transpile(name, topic.select_sql, target.batch_schema(), out, "src").sql


# (SELECT, fragments the Spark SQL must contain)
TRANSLATED = [
    ("SELECT ts, i FROM m", ["CAST(`ts` AS TIMESTAMP) AS `ts`", "FROM `src`"]),
    ("SELECT ts, ti + 1 AS x FROM m", ["TRY_ADD(`ti`, 1) BETWEEN -128 AND 127"]),
    ("SELECT ts, u + 1 AS x FROM m", ["BETWEEN 0 AND 4294967295", "AS BIGINT"]),
    (
        "SELECT ts, ub * 2 AS x FROM m",
        ["TRY_MULTIPLY", "18446744073709551615", "DECIMAL(20, 0)"],
    ),
    ("SELECT ts, -i AS x FROM m", ["TRY_SUBTRACT(0, `i`)"]),
    ("SELECT ts, i % 3 AS x FROM m", ["TRY_MOD(`i`, 3)"]),
    ("SELECT ts, i / 2 AS x FROM m", ["TRY_DIVIDE(", "CAST('Infinity' AS DOUBLE)"]),
    ("SELECT ts, f * 2 AS x FROM m", ["CAST(`f` * 2 AS FLOAT)"]),
    (
        "SELECT ts, length(s) AS x, char_length(s) AS y FROM m",
        ["OCTET_LENGTH(`s`)", "LENGTH(`s`)"],
    ),
    ("SELECT ts, concat(s, loc) AS x FROM m", ["`s` || `loc`"]),
    ("SELECT ts, log(d) AS x FROM m", ["CAST('-Infinity' AS DOUBLE)", "LN(`d`)"]),
    ("SELECT ts, cast(i AS double) AS x FROM m", ["AS DOUBLE)"]),
    ("SELECT ts, ceil(d) AS x FROM m", ["4503599627370496", "CEIL(`d`)"]),
    ("SELECT ts, s FROM m WHERE s > 3", ["TRY_CAST(`s` AS DOUBLE) > 3"]),
    (
        "SELECT ts FROM m WHERE ts > '2020-01-01 00:00:00'",
        ["`ts` > CAST('2020-01-01 00:00:00.000' AS TIMESTAMP)"],
    ),
    ("SELECT ts, i FROM m WHERE i * 2 > 5 AND d > 1", ["TRY_MULTIPLY(`i`, 2)"]),
    ("SELECT ts, CASE WHEN d > 0 THEN i * 2 ELSE 0 END AS x FROM m", ["TRY_MULTIPLY"]),
]


@pytest.mark.parametrize(("select", "fragments"), TRANSLATED, ids=[t[0] for t in TRANSLATED])
def test_translation(engine: Engine, select: str, fragments: list[str]) -> None:
    sql = spark_sql(engine, select)
    for fragment in fragments:
        assert fragment in sql, sql
    assert "TRY(" not in sql.upper().replace("TRY_", "")


REFUSED = [
    ("SELECT ts, cast(d AS bigint) AS x FROM m", "function CAST has no exact Spark form"),
    ("SELECT ts FROM m WHERE i * 2 > 5 OR d > 1", "under OR"),
    ("SELECT ts, coalesce(i + 1, 0) AS x FROM m", "under COALESCE"),
    ("SELECT ts, (i + 1) IS NULL AS x FROM m", "under IS"),
    ("SELECT ts, CASE WHEN i * 2 > 0 THEN 1 ELSE 0 END AS x FROM m", "under IF"),
    ("SELECT ts, cast(d AS varchar(20)) AS x FROM m", "function CAST has no exact Spark form"),
    ("SELECT ts, cast(s AS int) AS x FROM m", "function CAST has no exact Spark form"),
    ("SELECT ts, i >> 1 AS x FROM m", ">> has no exact"),
    ("SELECT ts, ~u AS x FROM m", "unsigned"),
]


@pytest.mark.parametrize(("select", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refusal(engine: Engine, select: str, message: str) -> None:
    with pytest.raises(BackfillUnsupported, match="cannot be backfilled with Spark") as info:
        spark_sql(engine, select)
    assert message in str(info.value)
