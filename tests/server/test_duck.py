"""DuckDB connections per thread and queries split into parts (server/core/duck.py), the
locked-down settings of every connection and the bounded database of ad hoc queries, and
the choice of a split for large reads of selective topics (server/core/topic_reader.py)."""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa
import pytest

from sqltopic.server.common.limits import MIB
from sqltopic.server.core import topic_reader
from sqltopic.server.core.duck import DuckPool
from sqltopic.server.core.engine import Engine
from sqltopic.sql.topic.duck import query
from tests.server.support import blocks

SQL = "SELECT i, i * 2 AS twice FROM part WHERE i % 3 = 0"


def numbers(start: int, stop: int) -> pa.Table:
    return pa.table({"i": pa.array(range(start, stop), pa.int64())})


def test_parts_come_back_in_order_and_equal_one_query() -> None:
    pool = DuckPool()
    parts = [numbers(0, 1000), numbers(1000, 1500), numbers(1500, 4000)]
    got = pool.query_parts(SQL, "part", parts)
    assert [t.num_rows for t in got] == [334, 166, 834]
    whole = query(pool.get(), SQL, "part", pa.concat_tables(parts))
    assert pa.concat_tables(got).equals(whole)


def test_a_failing_part_raises_and_leaves_the_connections_usable() -> None:
    pool = DuckPool()
    bad = pa.table({"i": pa.array(["x"])})  # i % 3 on a string: a binder error
    with pytest.raises(duckdb.Error):
        pool.query_parts(SQL, "part", [numbers(0, 10), bad])
    with pytest.raises(duckdb.Error):
        pool.query_parts(SQL, "part", [bad, numbers(0, 10)])
    assert [t.num_rows for t in pool.query_parts(SQL, "part", [numbers(0, 10)] * 2)] == [4, 4]


def test_each_thread_has_its_own_connections_and_parts_run_single_threaded() -> None:
    pool = DuckPool()
    mine = pool.get()
    assert pool.get() is mine
    assert pool.serial() is not mine
    assert pool.serial().sql("SELECT current_setting('threads')").fetchall() == [(1,)]
    other: list[duckdb.DuckDBPyConnection] = []
    thread = threading.Thread(target=lambda: other.append(pool.get()))
    thread.start()
    thread.join()
    assert other[0] is not mine


def test_connections_refuse_files_and_setting_changes() -> None:
    pool = DuckPool()
    for con in (pool.get(), pool.serial(), pool.queries(64 * MIB).cursor()):
        with pytest.raises(duckdb.Error):
            con.sql("SELECT * FROM read_csv('/etc/passwd')").fetchall()
        with pytest.raises(duckdb.Error):
            con.execute("SET threads=4")


def test_large_reads_of_a_selective_topic_are_split(
    power: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first large read runs as one query and records the share of rows it kept; the
    next is split when that share is small, and delivers the same rows."""
    monkeypatch.setattr(topic_reader, "ARROW_EVAL_MAX_ROWS", -1)
    monkeypatch.setattr(topic_reader, "SPLIT_MIN_ROWS", 100)
    monkeypatch.setattr(topic_reader, "SPLIT_PARTS", 2)
    splits: list[int] = []
    query_parts = DuckPool.query_parts

    def counted(self: DuckPool, sql: str, name: str, parts: list[pa.Table]) -> list[pa.Table]:
        splits.append(len(parts))
        return query_parts(self, sql, name, parts)

    monkeypatch.setattr(DuckPool, "query_parts", counted)
    rows = ", ".join(f"({1_700_000_000_000 + n}, 1.0, {n}, 0.5)" for n in range(1000))
    power.execute(f"INSERT INTO d0 USING meters TAGS ('x', 1) VALUES {rows}")
    power.execute("CREATE TOPIC few AS SELECT ts, voltage FROM meters WHERE voltage % 50 = 7")
    vgroup = power.state.catalog.table("power", "d0").vgroup
    reads = [power.read_topic("few", vgroup, 0, 10**6)[0] for _ in range(2)]
    assert splits == [2], "the first read is one query, the second is split in two"
    first, second = (
        [v for b in blocks(items) for v in b.data["voltage"].to_pylist()] for items in reads
    )
    assert first == second == list(range(7, 1000, 50))


def test_no_connection_installs_or_loads_an_extension() -> None:
    pool = DuckPool()
    for con in (pool.get(), pool.serial(), pool.queries(64 * MIB).cursor()):
        with pytest.raises(duckdb.CatalogException, match="sqlite_scanner"):
            con.sql("SELECT * FROM sqlite_scan('x.db', 't')").fetchall()
        off = con.sql(
            "SELECT count(*) FROM duckdb_settings() WHERE value = 'false' AND name IN "
            "('autoinstall_known_extensions', 'autoload_known_extensions', "
            "'allow_community_extensions', 'enable_external_access')"
        ).fetchall()
        assert off == [(4,)]


def test_the_query_database_is_shared_bounded_and_never_spills() -> None:
    """One database for every ad hoc query (its memory limit is for them all), made at
    the first call; over the limit a query fails, as nothing may go to disk."""
    pool = DuckPool()
    db = pool.queries(32 * MIB)
    assert pool.queries(32 * MIB) is db
    con = db.cursor()
    with pytest.raises(duckdb.OutOfMemoryException):
        con.sql("SELECT i FROM range(20000000) t(i) ORDER BY i DESC").fetchall()
    assert con.sql("SELECT count(*) FROM range(20000000)").fetchall() == [(20_000_000,)]
