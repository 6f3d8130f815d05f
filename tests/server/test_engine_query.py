"""Ad hoc SELECT over retained WAL data: super tables (tags, tbname, aggregates, GROUP BY,
ORDER BY), child tables (`*` is the data columns) and normal tables, against DuckDB over
the same rows."""

from __future__ import annotations

import pytest

from sqltopic.errors import SqlError
from sqltopic.server.engine import Engine
from sqltopic.server.result import Session
from tests.server.dataset import DATA_NAMES, NORMAL_NAMES, TAG_NAMES, Loaded
from tests.server.support import norm_rows

_DATA = ", ".join(DATA_NAMES)

# (engine SQL, reference SQL over the plain tables, or None for the same text)
QUERIES = [
    pytest.param(
        "SELECT location, count(*) AS n, sum(i) AS s, max(d) AS m, min(f) AS lo FROM meters "
        "GROUP BY location ORDER BY location NULLS FIRST",
        None,
        id="group_by_tag",
    ),
    pytest.param(
        "SELECT tbname, count(*) AS n, count(vc) AS nv FROM meters GROUP BY tbname ORDER BY tbname",
        None,
        id="group_by_tbname",
    ),
    pytest.param(
        "SELECT * FROM meters WHERE groupid = 2 ORDER BY ts",
        f"SELECT {_DATA}, {', '.join(TAG_NAMES)} FROM meters WHERE groupid = 2 ORDER BY ts",
        id="stable_star_has_tags",
    ),
    pytest.param(
        "SELECT ts, tbname, region, abs(i) AS a FROM power.meters "
        "WHERE region IS NOT NULL AND i > 0 ORDER BY ts DESC LIMIT 10",
        "SELECT ts, tbname, region, abs(i) AS a FROM meters "
        "WHERE region IS NOT NULL AND i > 0 ORDER BY ts DESC LIMIT 10",
        id="qualified_limit",
    ),
    pytest.param(
        "SELECT * FROM d1 ORDER BY ts",
        f"SELECT {_DATA} FROM meters WHERE tbname = 'd1' ORDER BY ts",
        id="child_star",
    ),
    pytest.param(
        "SELECT tbname, location, groupid, i FROM d4 ORDER BY ts",
        "SELECT tbname, location, groupid, i FROM meters WHERE tbname = 'd4' ORDER BY ts",
        id="child_tags",
    ),
    pytest.param(
        "SELECT count(*), avg(d), sum(ubi) FROM d0",
        "SELECT count(*), avg(d), sum(ubi) FROM meters WHERE tbname = 'd0'",
        id="child_aggregate",
    ),
    pytest.param(
        "SELECT * FROM ntb ORDER BY ts",
        f"SELECT {', '.join(NORMAL_NAMES)} FROM ntb ORDER BY ts",
        id="normal_star",
    ),
    pytest.param(
        "SELECT c3, count(*) AS n FROM ntb GROUP BY c3 ORDER BY c3 NULLS LAST",
        None,
        id="normal_group",
    ),
    pytest.param(
        "SELECT m.tbname, m.i FROM meters m WHERE m.i BETWEEN -10 AND 10 ORDER BY m.ts",
        "SELECT m.tbname, m.i FROM meters m WHERE m.i BETWEEN -10 AND 10 ORDER BY m.ts",
        id="alias",
    ),
    pytest.param(
        "SELECT groupid, count(*) FROM meters WHERE ts > '2018-10-03 06:38:30' "
        "GROUP BY groupid HAVING count(*) > 1 ORDER BY groupid NULLS FIRST",
        None,
        id="having",
    ),
]


@pytest.mark.parametrize(("sql", "ref_sql"), QUERIES)
def test_select_equals_duckdb(loaded: Loaded, sql: str, ref_sql: str | None) -> None:
    result = loaded.engine.execute(sql)
    reference = loaded.ref.sql(ref_sql or sql)
    assert norm_rows(result.rows) == norm_rows(reference.fetchall())
    assert len(result.columns) == len(reference.columns)
    assert result.rows, "the query selects no rows: it tests nothing"


def test_star_columns(loaded: Loaded) -> None:
    engine = loaded.engine
    assert engine.execute("SELECT * FROM meters LIMIT 1").columns == [*DATA_NAMES, *TAG_NAMES]
    assert engine.execute("SELECT * FROM d0 LIMIT 1").columns == DATA_NAMES
    assert engine.execute("SELECT * FROM ntb LIMIT 1").columns == NORMAL_NAMES


def test_select_reports_arrow_types(loaded: Loaded) -> None:
    table = loaded.engine.execute("SELECT ts, ti, ubi, nc FROM meters LIMIT 1").to_arrow()
    assert [str(t) for t in table.schema.types] == ["timestamp[ms]", "int8", "uint64", "string"]


def test_select_needs_a_database(loaded: Loaded) -> None:
    session = Session()
    with pytest.raises(SqlError, match="no database selected"):
        loaded.engine.execute("SELECT count(*) FROM meters", session)
    assert loaded.engine.execute("SELECT count(*) FROM power.meters", session).rows == [
        (sum(1 for t, _ in loaded.data.all_rows() if t != "ntb"),)
    ]


def test_select_without_a_table(loaded: Loaded) -> None:
    assert loaded.engine.execute("SELECT 1 + 1 AS two, upper('x') AS u").rows == [(2, "X")]


@pytest.mark.parametrize(
    ("sql", "names"),
    [
        ("SELECT nosuch FROM meters", "nosuch"),
        ("SELECT count(*) FROM meters GROUP BY nosuch", "nosuch"),
        ("SELECT sum(vc) FROM meters", "sum"),
        ("SELECT i FROM meters WHERE i = 'abc'", "abc"),
        ("SELECT CAST(vc AS INT) FROM meters", "vc"),
    ],
)
def test_query_errors_are_plain_sql_errors(loaded: Loaded, sql: str, names: str) -> None:
    with pytest.raises(SqlError) as info:
        loaded.engine.execute(sql)
    err = info.value
    assert type(err) is SqlError or isinstance(err, SqlError)
    assert "\n" not in err.message
    assert names.lower() in err.message.lower()
    assert (err.line, err.column) == (1, 1)


def test_syntax_error_message_is_plain(loaded: Loaded) -> None:
    with pytest.raises(SqlError) as info:
        loaded.engine.execute("SELECT 1 + FROM meters")
    assert "<class" not in info.value.message
    assert "sqlglot" not in info.value.message


def test_query_sees_only_this_databases_tables(loaded: Loaded) -> None:
    engine = loaded.engine
    session = Session()
    engine.execute("CREATE DATABASE IF NOT EXISTS side; USE side", session)
    engine.execute("CREATE TABLE IF NOT EXISTS meters (ts TIMESTAMP, i INT)", session)
    assert engine.execute("SELECT count(*) FROM meters", session).rows == [(0,)]
    assert engine.execute("SELECT count(*) FROM power.ntb", session).rows == [
        (sum(1 for t, _ in loaded.data.all_rows() if t == "ntb"),)
    ]


@pytest.mark.parametrize("precision", ["ms", "us", "ns"])
def test_timestamps_compare_with_integers_and_date_times(engine: Engine, precision: str) -> None:
    scale = {"ms": 1, "us": 1_000, "ns": 1_000_000}[precision]
    engine.execute(f"CREATE DATABASE p PRECISION '{precision}'; USE p")
    engine.execute("CREATE TABLE t (ts TIMESTAMP, v INT)")
    base = 1_538_548_685_000  # 2018-10-03 06:38:05 UTC, in ms
    engine.execute(
        "INSERT INTO t VALUES " + " ".join(f"({(base + i * 1000) * scale}, {i})" for i in range(5))
    )
    cases = {
        f"ts >= {(base + 2000) * scale}": [2, 3, 4],
        f"{(base + 1000) * scale} >= ts": [0, 1],
        "ts > '2018-10-03 06:38:07'": [3, 4],
        "ts BETWEEN '2018-10-03 06:38:06' AND '2018-10-03T06:38:07Z'": [1, 2],
        f"ts IN ({base * scale}, '2018-10-03 14:38:09+08:00')": [0, 4],
        f"t.ts = {(base + 3000) * scale}": [3],
    }
    for where, expected in cases.items():
        rows = engine.execute(f"SELECT v FROM t WHERE {where} ORDER BY v").rows
        assert [v for (v,) in rows] == expected, where
    with pytest.raises(SqlError, match="'yesterday' is not a timestamp"):
        engine.execute("SELECT v FROM t WHERE ts > 'yesterday'")
