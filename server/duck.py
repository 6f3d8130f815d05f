"""DuckDB connections of the engine: one per thread, and queries split over the cores.

DuckDB 2.0 refuses a connection in use by another thread rather than waiting, so every
thread gets its own. A query over a pyarrow table of many chunks (a topic read: one
chunk per WAL entry) runs at about one core's speed whatever DuckDB's thread count, as
the chunks come one at a time from a single Arrow stream. Splitting such a table into
parts and running each part as its own single-threaded query, the parts at once, uses
every core (bench/engine_bench.py: a 1 %-selective read ~12 % faster on 2 cores).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

# Parts a split query runs in: one per core, bounded so that a large machine does not
# keep many idle helper threads and DuckDB instances.
SPLIT_PARTS = max(1, min(os.cpu_count() or 1, 8))

# The threads running the parts after the first, shared by every engine of the process
# (they hold nothing but per-pool connections); an executor starts its threads on use.
_HELPERS = ThreadPoolExecutor(max_workers=max(SPLIT_PARTS - 1, 1), thread_name_prefix="duck")


class DuckPool:
    """Per-thread DuckDB connections: `get` with DuckDB's own parallelism, and
    single-threaded ones for the parts of `query_parts`."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self) -> duckdb.DuckDBPyConnection:
        """This thread's connection (DuckDB picks its thread count)."""
        con: duckdb.DuckDBPyConnection | None = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = _connect(threads=None)
        return con

    def serial(self) -> duckdb.DuckDBPyConnection:
        """This thread's single-threaded connection."""
        con: duckdb.DuckDBPyConnection | None = getattr(self._local, "serial", None)
        if con is None:
            con = self._local.serial = _connect(threads=1)
        return con

    def query_parts(self, sql: str, name: str, parts: list[pa.Table]) -> list[pa.Table]:
        """`sql` over each of `parts` registered as `name`, in order: the first part on
        this thread, the others at the same time on helper threads."""
        futures = [_HELPERS.submit(self._query_serial, sql, name, part) for part in parts[1:]]
        first = self._query_serial(sql, name, parts[0])
        return [first, *(f.result() for f in futures)]

    def _query_serial(self, sql: str, name: str, part: pa.Table) -> pa.Table:
        return query(self.serial(), sql, name, part)


def query(con: duckdb.DuckDBPyConnection, sql: str, name: str, table: pa.Table) -> pa.Table:
    """`sql` with `table` registered as `name` for the query's duration."""
    con.register(name, table)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister(name)


def _connect(threads: int | None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    if threads is not None:
        con.execute(f"SET threads={threads}")
    # only relations we register may be named in a query, never Python variables, and
    # no query (ad hoc SELECT included) may touch files or load extensions
    con.execute("SET python_enable_replacements=false")
    con.execute("SET enable_external_access=false")
    con.execute("SET lock_configuration=true")
    return con
