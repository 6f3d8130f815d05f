"""DuckDB connections of the engine: one per thread, and queries split over the cores.

DuckDB 2.0 refuses a connection in use by another thread rather than waiting, so every
thread gets its own. A query over a pyarrow table of many chunks (a topic read: one
chunk per WAL entry) runs at about one core's speed whatever DuckDB's thread count, as
the chunks come one at a time from a single Arrow stream. Splitting such a table into
parts and running each part as its own single-threaded query, the parts at once, uses
every core (bench/engine_bench.py: a 1 %-selective read ~12 % faster on 2 cores).

Ad hoc queries run in a database of their own (`QueryDatabase`), one cursor per query:
its memory is bounded by the server's limit and never spills to disk, so a runaway
query fails instead of taking the memory topic reads need. Every DuckDB database here
reads no files, installs and loads no extensions, and has its configuration locked.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from sqltopic.sql.topic.duck import connect, query

# Parts a split query runs in: one per core, bounded so that a large machine does not
# keep many idle helper threads and DuckDB instances.
SPLIT_PARTS = max(1, min(os.cpu_count() or 1, 8))

# The threads running the parts after the first, shared by every engine of the process
# (they hold nothing but per-pool connections); an executor starts its threads on use.
_HELPERS = ThreadPoolExecutor(max_workers=max(SPLIT_PARTS - 1, 1), thread_name_prefix="duck")


class DuckPool:
    """Per-thread DuckDB connections: `get` with DuckDB's own parallelism, and
    single-threaded ones for the parts of `query_parts`; and the database of ad hoc
    queries (`queries`)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._queries: QueryDatabase | None = None
        self._queries_lock = threading.Lock()

    def queries(self, memory_bytes: int) -> QueryDatabase:
        """The database of ad hoc queries, created at the first call with its memory
        limit (an engine's limits never change)."""
        with self._queries_lock:
            if self._queries is None:
                self._queries = QueryDatabase(memory_bytes)
            return self._queries

    def get(self) -> duckdb.DuckDBPyConnection:
        """This thread's connection (DuckDB picks its thread count)."""
        con: duckdb.DuckDBPyConnection | None = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = connect(threads=None)
        return con

    def serial(self) -> duckdb.DuckDBPyConnection:
        """This thread's single-threaded connection."""
        con: duckdb.DuckDBPyConnection | None = getattr(self._local, "serial", None)
        if con is None:
            con = self._local.serial = connect(threads=1)
        return con

    def query_parts(self, sql: str, name: str, parts: list[pa.Table]) -> list[pa.Table]:
        """`sql` over each of `parts` registered as `name`, in order: the first part on
        this thread, the others at the same time on helper threads."""
        futures = [_HELPERS.submit(self._query_serial, sql, name, part) for part in parts[1:]]
        first = self._query_serial(sql, name, parts[0])
        return [first, *(f.result() for f in futures)]

    def _query_serial(self, sql: str, name: str, part: pa.Table) -> pa.Table:
        return query(self.serial(), sql, name, part)


class QueryDatabase:
    """The DuckDB database of ad hoc queries: at most `memory_bytes` of memory for all of
    them together, nothing spilled to disk. `cursor()` gives each query its own
    connection (an open Arrow reader holds its connection until read out or closed)."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self._con = connect(threads=None, memory_bytes=memory_bytes)
        self._lock = threading.Lock()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the database, with its settings."""
        with self._lock:  # the parent connection is shared by every worker thread
            return self._con.cursor()
