"""The ad hoc SELECT sandbox against a real server: every DuckDB table function, file,
system view, settings or metadata function, extension function and non-SELECT statement
is refused with its class and a message naming it, before DuckDB runs anything; queries
over the database's tables, CTEs, subqueries and ordinary functions still work."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from sqltopic import errors as e
from sqltopic.client import Connection, connect
from sqltopic.server.core.sandbox import DENIED
from tests.live_server import POWER, ServerProcess

# TDengine's sample rows (docs/sql.md §8), in database `power`.
ROWS = """
INSERT INTO d1001 USING meters TAGS ('California.SanFrancisco', 2)
    VALUES ('2018-10-03 14:38:05.000', 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, 218, 0.33)
    d1002 USING meters TAGS ('California.SanFrancisco', 3)
    VALUES ('2018-10-03 14:38:16.650', 10.3, 218, 0.25)
    d1003 USING meters TAGS ('California.LosAngeles', 2)
    VALUES ('2018-10-03 14:38:05.500', 11.8, 221, 0.28)
"""
QNA = e.QueryNotAllowed
UNSUPPORTED = e.UnsupportedStatement
SYNTAX = e.SqlSyntaxError

# (statement, the error it gets, what its message names)
REFUSED = [
    # DuckDB table functions, in FROM and anywhere else
    ("SELECT * FROM range(60000000)", QNA, "range"),
    ("SELECT * FROM generate_series(1, 3)", QNA, "generate_series"),
    ("SELECT count(*) FROM meters, range(1000) r", QNA, "range"),
    ("SELECT * FROM meters m JOIN LATERAL range(m.voltage) r ON true", QNA, "range"),
    ("SELECT * FROM read_csv('/etc/passwd')", QNA, "read_csv"),
    ("SELECT * FROM read_csv_auto('data.csv')", QNA, "read_csv_auto"),
    ("SELECT * FROM read_parquet('data.parquet')", QNA, "read_parquet"),
    ("SELECT * FROM read_json('data.json')", QNA, "read_json"),
    ("SELECT * FROM read_text('/etc/passwd')", QNA, "read_text"),
    ("SELECT * FROM read_blob('/etc/passwd')", QNA, "read_blob"),
    ("SELECT * FROM glob('/etc/*')", QNA, "glob"),
    ("SELECT * FROM duckdb_settings()", QNA, "duckdb_settings"),
    ("SELECT * FROM duckdb_tables()", QNA, "duckdb_tables"),
    ("SELECT * FROM duckdb_extensions()", QNA, "duckdb_extensions"),
    ("SELECT * FROM duckdb_secrets()", QNA, "duckdb_secrets"),
    ("SELECT * FROM pragma_version()", QNA, "pragma_version"),
    ("SELECT * FROM pragma_table_info('meters')", QNA, "pragma_table_info"),
    ("SELECT * FROM query('SELECT 42')", QNA, "query"),
    ("SELECT * FROM query_table('meters')", QNA, "query_table"),
    ("SELECT * FROM json_execute_serialized_sql('{}')", QNA, "json_execute_serialized_sql"),
    ("SELECT * FROM which_secret('s3://b/k', 's3')", QNA, "which_secret"),
    ("SELECT (SELECT count(*) FROM duckdb_settings()) AS n", QNA, "duckdb_settings"),
    ("SELECT ts FROM meters WHERE voltage IN (SELECT * FROM range(300))", QNA, "range"),
    ("WITH s AS (SELECT * FROM duckdb_settings()) SELECT name FROM s", QNA, "duckdb_settings"),
    ("SELECT 1 WHERE EXISTS (FROM duckdb_databases())", QNA, "duckdb_databases"),
    # extension functions: refused before DuckDB could try to install anything
    ("SELECT * FROM sqlite_scan('x.db', 't')", QNA, "sqlite_scan"),
    ("SELECT * FROM postgres_scan('host=x', 'public', 't')", QNA, "postgres_scan"),
    ("SELECT st_point(1, 2)", QNA, "st_point"),
    # strings as tables: files, to DuckDB
    ("SELECT * FROM 'data.csv'", QNA, "data.csv"),
    ("SELECT * FROM '/etc/passwd'", QNA, "/etc/passwd"),
    # DuckDB's catalog and system views
    ("SELECT * FROM information_schema.tables", QNA, "information_schema.tables"),
    ("SELECT * FROM information_schema.columns", QNA, "information_schema.columns"),
    ("SELECT * FROM pg_catalog.pg_settings", QNA, "pg_catalog.pg_settings"),
    ("SELECT * FROM pg_tables", QNA, "pg_tables"),
    ("SELECT * FROM sqlite_master", QNA, "sqlite_master"),
    ("SELECT * FROM duckdb_settings", QNA, "duckdb_settings"),
    ("SELECT * FROM system.main.duckdb_settings", QNA, "system.main.duckdb_settings"),
    ("SELECT * FROM memory.main.meters", QNA, "memory.main.meters"),
    ("WITH sqlite_master AS (SELECT * FROM sqlite_master) SELECT 1", QNA, "sqlite_master"),
    ("SELECT * FROM (WITH pg_tables AS (SELECT 1) SELECT 1), pg_tables", QNA, "pg_tables"),
    # settings and metadata functions, state changes, SQL as text, unbounded values
    ("SELECT current_setting('threads')", QNA, "current_setting"),
    ("SELECT getvariable('x')", QNA, "getvariable"),
    ("SELECT version()", QNA, "version"),
    ("SELECT current_database()", QNA, "current_database"),
    ("SELECT current_schemas(true)", QNA, "current_schemas"),
    ("SELECT current_catalog()", QNA, "current_catalog"),  # DuckDB SQL: CURRENT_CATALOG
    ("SELECT current_schema", QNA, "current_schema"),  # a bare name DuckDB calls
    ("SELECT current_query()", QNA, "current_query"),
    ("SELECT pg_get_viewdef(1)", QNA, "pg_get_viewdef"),
    ("SELECT get_block_size('memory')", QNA, "get_block_size"),
    ("SELECT txid_current()", QNA, "txid_current"),
    ("SELECT nextval('s')", QNA, "nextval"),
    ("SELECT setseed(0.5)", QNA, "setseed"),
    ("SELECT write_log('x')", QNA, "write_log"),
    ("SELECT json_serialize_sql('SELECT 1')", QNA, "json_serialize_sql"),
    ("SELECT sleep_ms(100000)", QNA, "sleep_ms"),
    ("SELECT pg_sleep(100)", QNA, "pg_sleep"),
    ("SELECT unnest(range(60000000))", QNA, "range"),
    ("SELECT len(generate_series(1, 60000000))", QNA, "generate_series"),
    ("SELECT length(repeat('x', 1000000000)) FROM meters", QNA, "repeat"),
    ("SELECT list_resize([], 100000000)", QNA, "list_resize"),
    ("SELECT main.abs(-1)", QNA, "main.abs"),
    ("SELECT abs(current_setting('threads')::INT) FROM meters", QNA, "current_setting"),
    # statements other than SELECT: the parser's refusal, before any query runs
    ("SET threads = 1", UNSUPPORTED, "SET"),
    ("SET GLOBAL memory_limit = '1TB'", UNSUPPORTED, "memory_limit"),
    ("RESET threads", UNSUPPORTED, "RESET"),
    ("PRAGMA version", UNSUPPORTED, "PRAGMA"),
    ("PRAGMA enable_profiling", UNSUPPORTED, "PRAGMA"),
    ("ATTACH 'other.db' AS other", UNSUPPORTED, "ATTACH"),
    ("DETACH other", UNSUPPORTED, "DETACH"),
    ("COPY meters TO 'out.csv'", UNSUPPORTED, "COPY"),
    ("INSTALL sqlite", UNSUPPORTED, "INSTALL"),
    ("FORCE INSTALL sqlite", UNSUPPORTED, "INSTALL"),
    ("LOAD sqlite", UNSUPPORTED, "LOAD"),
    ("CALL pragma_version()", UNSUPPORTED, "CALL"),
    ("EXPLAIN ANALYZE SELECT 1", UNSUPPORTED, "EXPLAIN"),
    ("SUMMARIZE meters", UNSUPPORTED, "SUMMARIZE"),
    ("PIVOT meters ON location USING count(*)", UNSUPPORTED, "PIVOT"),
    ("CHECKPOINT", UNSUPPORTED, "CHECKPOINT"),
    ("BEGIN", UNSUPPORTED, "BEGIN"),
    ("UPDATE d1001 SET voltage = 1", UNSUPPORTED, "UPDATE"),
    ("DELETE FROM d1001", UNSUPPORTED, "DELETE"),
    ("WITH x AS (SELECT 1) INSERT INTO d1001 SELECT * FROM x", UNSUPPORTED, "WITH"),
    ("CREATE MACRO m(x) AS x + 1", SYNTAX, "CREATE"),
    ("CREATE VIEW v AS SELECT 1", SYNTAX, "CREATE"),
    ("CREATE SECRET s (TYPE s3)", SYNTAX, "CREATE"),
    ("CREATE SEQUENCE s", SYNTAX, "CREATE"),
    ("CREATE OR REPLACE FUNCTION f(x) AS x", SYNTAX, "CREATE"),
    ("SELECT count(*) FROM meters; SET threads = 1", UNSUPPORTED, "SET"),
]

# (query, its rows): the database's tables, CTEs, subqueries and DuckDB's functions
ALLOWED = [
    ("SELECT count(*) FROM meters", [(4,)]),
    ("SELECT count(*) FROM power.d1001", [(2,)]),
    (
        "WITH hv AS (SELECT tbname, voltage FROM meters WHERE voltage > 218) "
        "SELECT tbname, max(voltage) FROM hv GROUP BY tbname ORDER BY tbname",
        [("d1001", 219), ("d1003", 221)],
    ),
    (
        "SELECT tbname FROM (SELECT tbname, avg(current) AS c FROM meters GROUP BY tbname) "
        "WHERE c > 11 ORDER BY tbname",
        [("d1001",), ("d1003",)],
    ),
    ("SELECT count(*) FROM meters WHERE groupid IN (SELECT 2 UNION SELECT 3)", [(4,)]),
    ("SELECT v * 2 FROM (VALUES (1), (2)) t(v) ORDER BY v", [(2,), (4,)]),
    (
        "SELECT DISTINCT unnest(string_split(location, '.')) AS part FROM meters ORDER BY part",
        [("California",), ("LosAngeles",), ("SanFrancisco",)],
    ),
    ("SELECT count(*) FROM d1001, unnest([1, 2, 3]) u(i)", [(6,)]),
    (
        "SELECT upper(tbname), round(current, 0)::INT, abs(-voltage), "
        "strftime(ts, '%H:%M:%S') FROM d1001 ORDER BY ts LIMIT 1",
        [("D1001", 10, 219, "14:38:05")],
    ),
    (
        "SELECT tbname, row_number() OVER (PARTITION BY location ORDER BY ts) AS n "
        "FROM meters WHERE location LIKE '%Francisco' ORDER BY ts",
        [("d1001", 1), ("d1001", 2), ("d1002", 3)],
    ),
    (
        "SELECT time_bucket(INTERVAL '10 seconds', ts) AS b, count(*) FROM meters "
        "GROUP BY b ORDER BY b",
        [(datetime(2018, 10, 3, 14, 38, 0), 2), (datetime(2018, 10, 3, 14, 38, 10), 2)],
    ),
    ("SELECT list_sum([voltage, 1]) FROM d1003", [(222,)]),
    ("SELECT [x * 2 FOR x IN [1, 2]]", [([2, 4],)]),
    ("SELECT geomean(voltage) > 0, any_value(pg_typeof(voltage)) FROM d1003", [(True, "integer")]),
    ("SELECT count(*) FROM meters AS range", [(4,)]),
]


@pytest.fixture(scope="module")
def power(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connection]:
    """One server for the module (every case reads; none may change anything), with the
    sample rows in `power`."""
    proc = ServerProcess(tmp_path_factory.mktemp("sandbox") / "data")
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(POWER + ROWS)
            yield conn
    finally:
        proc.kill()


@pytest.mark.parametrize(("sql", "error", "culprit"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_its_class_naming_the_culprit(
    power: Connection, sql: str, error: type[e.SqlError], culprit: str
) -> None:
    with pytest.raises(e.SqlError) as info:
        power.execute(sql)
    assert type(info.value) is error, info.value
    assert culprit.lower() in info.value.message.lower()
    assert info.value.line is not None
    assert len(info.value.message) < 300
    assert power.execute("SELECT count(*) FROM meters").rows == [(4,)]


@pytest.mark.parametrize(("sql", "rows"), ALLOWED, ids=[a[0] for a in ALLOWED])
def test_allowed_queries_still_work(power: Connection, sql: str, rows: list[tuple[object]]) -> None:
    assert power.execute(sql).rows == rows


def test_a_refusal_points_at_the_culprit(power: Connection) -> None:
    with pytest.raises(e.QueryNotAllowed) as info:
        power.execute("SELECT ts,\n       current_setting('threads') FROM meters")
    assert (info.value.line, info.value.column) == (2, 8)
    assert "current_setting reads the server's settings" in info.value.message


def test_files_are_neither_read_nor_written(power: Connection, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    for sql in (
        f"COPY (SELECT * FROM meters) TO '{target}'",
        f"SELECT * FROM read_csv('{target}')",
        f"ATTACH '{tmp_path / 'x.db'}' AS x",
    ):
        with pytest.raises(e.SqlError):
            power.execute(sql)
    assert list(tmp_path.iterdir()) == []


def test_every_denied_function_is_refused(power: Connection) -> None:
    """DENIED is the documented list (docs/sql.md §8): each name is refused, and no call
    of it runs."""
    for name in sorted(DENIED):
        errors = []
        for call in (f"{name}(1)", f"{name}()", f"{name}(1, 1)"):  # sqlglot checks arity
            with pytest.raises(e.SqlError) as info:
                power.execute(f"SELECT {call}")
            errors.append(info.value)
        assert any(type(err) is e.QueryNotAllowed and name in err.message for err in errors), name


def test_a_cte_folded_outside_ascii_does_not_uncover_system_views(power: Connection) -> None:
    """DuckDB folds names in ASCII only: a CTE named with the Kelvin sign (K) does not
    cover `duckdb_views`, which would then be DuckDB's own view."""
    for view in ("duckdb_views", "duckdb_tables", "duckdb_databases"):
        kelvin = view.replace("k", "\u212a")
        with pytest.raises(e.QueryNotAllowed, match=view):
            power.execute(f"WITH `{kelvin}` AS (SELECT 1 AS x) SELECT * FROM {view}")


def test_a_query_cannot_pass_for_an_interrupted_one(power: Connection) -> None:
    """error() with the words of DuckDB's interrupt is the query's own error, not a
    stopped query (which once answered INTERNAL)."""
    with pytest.raises(e.SqlError, match=r"query failed: .*INTERRUPT Error"):
        power.execute("SELECT * FROM meters WHERE error('INTERRUPT Error') IS NULL")
    assert power.execute("SELECT count(*) FROM meters").rows == [(4,)]
