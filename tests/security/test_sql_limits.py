"""The cost of SQL text is bounded: one call carries at most --max-sql-bytes of it and
1,000 statements, a statement other than INSERT at most 20,000 tokens. Each refusal is
a clear error before any statement runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import SqlSyntaxError, TooLarge
from sqltopic.sql.parse import MAX_STATEMENT_TOKENS, MAX_STATEMENTS
from tests.live_server import ServerProcess


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Connection]:
    proc = ServerProcess(tmp_path / "data", extra=("--max-sql-bytes", "64KiB"))
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute("CREATE DATABASE d; CREATE TABLE d.t (ts TIMESTAMP, v INT)")
            yield conn
    finally:
        proc.kill()


def test_sql_text_over_max_sql_bytes_is_refused(small: Connection) -> None:
    values = " ".join(f"({i}, {i})" for i in range(10_000))  # ~130 KB
    with pytest.raises(TooLarge, match=r"over the server's --max-sql-bytes \(65536\)"):
        small.execute(f"INSERT INTO d.t VALUES {values}")
    assert small.execute("SELECT count(*) FROM d.t").rows == [(0,)]
    values = " ".join(f"({i}, {i})" for i in range(2_000))  # ~25 KB: within
    assert small.execute(f"INSERT INTO d.t VALUES {values}").affected_rows == 2_000


def test_a_statement_of_too_many_tokens_is_refused(live_power: Connection) -> None:
    items = ",".join(["1"] * MAX_STATEMENT_TOKENS)
    with pytest.raises(SqlSyntaxError, match=f"more than {MAX_STATEMENT_TOKENS} tokens"):
        live_power.execute(f"SELECT count(*) FROM power.meters WHERE voltage IN ({items})")
    items = ",".join(["1"] * 5_000)
    assert live_power.execute(
        f"SELECT count(*) FROM power.meters WHERE voltage IN ({items})"
    ).rows == [(0,)]
    columns = ", ".join(f"c{i} INT" for i in range(4095))  # TDengine's widest super table
    live_power.execute(f"CREATE STABLE wide (ts TIMESTAMP, {columns}) TAGS (t INT)")


def test_too_many_statements_in_one_call_are_refused(live_power: Connection) -> None:
    with pytest.raises(SqlSyntaxError, match=f"at most {MAX_STATEMENTS}: send them in several"):
        live_power.execute("CREATE TABLE IF NOT EXISTS power.x (ts TIMESTAMP, v INT);" * 1001)
    assert "x" not in [r[0] for r in live_power.execute("SHOW power.TABLES").rows]  # none ran
