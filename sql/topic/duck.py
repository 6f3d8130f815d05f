"""DuckDB for topics: a locked-down in-memory database, and one query over an Arrow table.

Every evaluator of a topic (the vnode's reads, server/core/duck.py's pools; the backfill's
Spark tasks, spark_jobs/task.py) runs its compiled SQL on connections made here, so each
runs it with the same settings: UTC, no file access, no extensions, no setting changes.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

# Settings every database starts with. Python variables are never tables (only the
# relations we register are); extensions are neither installed nor loaded on demand;
# no memory limit unless asked (DuckDB's default, 80 % of RAM, per database).
_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "python_enable_replacements": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}
# Applied after connecting, in this order: no file access (which also freezes the temp
# directory, so it comes after it) and no setting changes by any query, last.
_LOCKDOWN = (
    "SET TimeZone='UTC'",
    "SET enable_external_access=false",
    "SET lock_configuration=true",
)


def connect(threads: int | None, memory_bytes: int | None = None) -> duckdb.DuckDBPyConnection:
    """A new in-memory database, locked down: `threads` (None: DuckDB's choice), and at
    most `memory_bytes` of memory with nothing spilled to disk (None: DuckDB's default)."""
    config = dict(_CONFIG)
    if threads is not None:
        config["threads"] = threads
    if memory_bytes is not None:
        # over the limit a query fails with DuckDB's out-of-memory error: with no temp
        # directory nothing is offloaded to disk
        config |= {"memory_limit": f"{memory_bytes}B", "temp_directory": ""}
    con = duckdb.connect(config=config)
    for statement in _LOCKDOWN:
        con.execute(statement)
    return con


def query(con: duckdb.DuckDBPyConnection, sql: str, name: str, table: pa.Table) -> pa.Table:
    """`sql` with `table` registered as `name` for the query's duration."""
    con.register(name, table)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister(name)
