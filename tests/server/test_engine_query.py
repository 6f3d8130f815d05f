"""Ad hoc SELECT over retained WAL data: super tables (tags, tbname, aggregates, GROUP BY,
ORDER BY), child tables (`*` is the data columns) and normal tables, against DuckDB over
the same rows; the sandbox's refusals with their positions, and the result, memory and
time limits of the embedded engine."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sqltopic.errors import QueryNotAllowed, QueryTimeout, SqlError, TooLarge
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.result import Session
from sqltopic.server.core import query
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.query_run import MESSAGE_CHARS, QueryRun, brief
from sqltopic.sql import statements as st
from sqltopic.sql.parse import parse
from tests.server.dataset import DATA_NAMES, NORMAL_NAMES, TAG_NAMES, Loaded
from tests.server.support import norm_rows

_DATA = ", ".join(DATA_NAMES)
# A thread the test waits for is stuck if it has not got there by then.
WAIT_S = 60.0

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
        ("SELECT abs(vc) FROM meters", "abs(VARCHAR)"),
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


# --- the sandbox and the limits (server/core/sandbox.py, server/core/query_run.py) ----

# Rows of `big` in the limit tests: its cross join with itself (640,000 rows) is far
# beyond the small limits below, and a triple join (512 million) runs for minutes.
BIG_ROWS = 800


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """Engines with some limits set, each on its own directory, holding table `big`."""
    opened: list[Engine] = []

    def factory(**limits: int) -> Engine:
        engine = Engine(tmp_path / f"e{len(opened)}", background=False, limits=Limits(**limits))
        opened.append(engine)
        engine.execute(
            "CREATE DATABASE d; USE d; CREATE TABLE big (ts TIMESTAMP, v INT, s BINARY(40))"
        )
        ts = pa.array([1_700_000_000_000 + i for i in range(BIG_ROWS)], pa.timestamp("ms"))
        values = pa.array(range(BIG_ROWS), pa.int32())
        labels = pa.array([f"row {i:036d}" for i in range(BIG_ROWS)], pa.string())
        engine.write("big", pa.table({"ts": ts, "v": values, "s": labels}))
        return engine

    yield factory
    for engine in opened:
        engine.close()


@pytest.mark.parametrize(
    ("sql", "culprit", "column"),
    [
        ("SELECT * FROM range(10)", "range", 15),
        ("SELECT count(*) FROM meters, generate_series(1, 9) g", "generate_series", 30),
        ("SELECT *\n  FROM duckdb_settings()", "duckdb_settings", 8),
        ("SELECT current_setting('threads')", "current_setting", 8),
        ("SELECT * FROM 'meters.csv'", "meters.csv", 15),
        ("SELECT * FROM information_schema.tables", "information_schema.tables", 15),
        ("SELECT i FROM meters WHERE i IN (SELECT 1 FROM pragma_version())", "pragma_version", 48),
        ("WITH sqlite_master AS (SELECT * FROM sqlite_master) SELECT 1", "sqlite_master", 38),
    ],
)
def test_the_sandbox_names_what_it_refuses_and_where(
    loaded: Loaded, sql: str, culprit: str, column: int
) -> None:
    with pytest.raises(QueryNotAllowed) as info:
        loaded.engine.execute(sql)
    assert culprit in info.value.message
    line = 2 if "\n" in sql else 1
    assert (info.value.line, info.value.column) == (line, column)


def test_the_query_database_is_bounded_and_locked(loaded: Loaded) -> None:
    db = loaded.engine.state.duck.queries(loaded.engine.state.limits.query_memory_bytes)
    cursor = db.cursor()
    settings = dict(
        cursor.sql(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('memory_limit', "
            "'temp_directory', 'enable_external_access', 'lock_configuration', "
            "'autoinstall_known_extensions', 'autoload_known_extensions', "
            "'allow_community_extensions', 'python_enable_replacements')"
        ).fetchall()
    )
    assert settings == {
        "memory_limit": "2.0 GiB",
        "temp_directory": "",
        "enable_external_access": "false",
        "lock_configuration": "true",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "allow_community_extensions": "false",
        "python_enable_replacements": "false",
    }
    cursor.close()


def test_a_result_over_max_result_bytes_is_refused(limited: Callable[..., Engine]) -> None:
    engine = limited(max_result_bytes=64 * 1024)
    assert engine.execute("SELECT count(*) FROM big").rows == [(BIG_ROWS,)]
    with pytest.raises(TooLarge, match="--max-result-bytes") as info:
        engine.execute("SELECT a.v, b.s FROM big a, big b")
    assert "64 KiB" in str(info.value)
    assert engine.execute("SELECT count(*) FROM big").rows == [(BIG_ROWS,)]


def test_a_query_over_query_memory_bytes_is_refused(limited: Callable[..., Engine]) -> None:
    engine = limited(query_memory_bytes=32 * 1024 * 1024)
    with pytest.raises(TooLarge, match="--query-memory-bytes") as info:
        engine.execute("SELECT a.s, b.s, a.v + b.v AS w FROM big a, big b ORDER BY w, a.s")
    assert "32 MiB" in str(info.value)
    assert engine.execute("SELECT max(v) FROM big").rows == [(BIG_ROWS - 1,)]


def test_a_query_past_query_timeout_ms_is_interrupted(limited: Callable[..., Engine]) -> None:
    engine = limited(query_timeout_ms=200)
    with pytest.raises(QueryTimeout, match=r"--query-timeout-ms \(200 ms\)"):
        engine.execute("SELECT count(*) FROM big a, big b, big c WHERE a.v + b.v + c.v = -1")
    assert engine.execute("SELECT count(*) FROM big").rows == [(BIG_ROWS,)]


def test_query_errors_quote_a_bounded_excerpt(loaded: Loaded) -> None:
    long = "x" * 10_000
    with pytest.raises(SqlError) as info:
        loaded.engine.execute(f"SELECT date_part('{long}', ts) FROM meters")
    message = info.value.message
    assert len(message) <= MESSAGE_CHARS
    assert "xxxx…" in message
    assert long not in message


def test_brief_cuts_quotations_and_the_whole_message() -> None:
    quoted = "Conversion Error: Could not convert string '" + "y" * 500 + "' to INT32\nLINE 1: ..."
    assert brief(quoted) == f"Conversion Error: Could not convert string '{'y' * 79}…' to INT32"
    assert len(brief("z" * 1000)) == MESSAGE_CHARS
    assert brief("") == "unknown error"


def test_a_run_closed_from_another_thread_stops_at_once(
    limited: Callable[..., Engine], caplog: pytest.LogCaptureFixture
) -> None:
    """close() interrupts the DuckDB call in flight on a worker (what a cancelled call
    does), and the worker is free again."""
    engine = limited()
    state = engine.state
    stmt = parse("SELECT count(*) FROM big a, big b, big c WHERE a.v + b.v + c.v = -1")[0]
    assert isinstance(stmt, st.Select)
    run = QueryRun(state.limits)
    failure: list[BaseException] = []

    def work() -> None:
        try:
            query.start(state, query.prepare(state, engine.session, stmt), stmt, run)
            run.next_batch()
        except BaseException as exc:  # what the worker ends with
            failure.append(exc)

    worker = threading.Thread(target=work)
    caplog.set_level(logging.INFO, logger="sqltopic.server")
    worker.start()
    deadline = time.monotonic() + WAIT_S
    while not run.in_flight and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.in_flight, "the query did not start"
    run.close()
    worker.join(WAIT_S)
    assert not worker.is_alive(), "the interrupted query still runs"
    assert len(failure) == 1
    assert not isinstance(failure[0], SqlError | TooLarge | QueryTimeout)
    assert "ad hoc query interrupted, its worker free" in caplog.text
