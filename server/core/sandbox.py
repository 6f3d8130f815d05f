"""What an ad hoc SELECT may name, checked on the very SQL DuckDB is about to run.

DuckDB's own parser reads the statement (`json_serialize_sql` parses; it binds and runs
nothing) and every table and function in the tree must be on an allow list:

* tables: the relations the query registered (the catalog's tables it names), CTEs in
  scope, subqueries, joins, VALUES lists, PIVOT, and UNNEST in FROM;
* functions: DuckDB's built-in scalar, aggregate and window functions and scalar macros,
  by their bare name (and SQL's special values, `current_schema`, read as calls), except
  `DENIED` (settings and metadata, state changes, SQL given as text, values of a size an
  argument sets, sleeping), names of DuckDB's internals and catalog (`DENIED_PREFIXES`),
  and macros whose definitions use anything refused.

Everything else is refused with `Refused`, naming it: table functions (`range`,
`read_csv`, `duckdb_settings()`...), files (`FROM 'f.csv'`), DuckDB's catalog and
system views (`information_schema.tables`, `pg_catalog.*`, `sqlite_master`), functions
of extensions (`sqlite_scan`), and any statement but one SELECT. The lists come from
DuckDB itself, once per process, on a connection configured as the query database.
"""

from __future__ import annotations

import functools
import json
import string
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from sqltopic.sql.topic.duck import connect

_SETTINGS = "reads the server's settings or DuckDB's state"
_STATE = "changes DuckDB's state"
_SQL_TEXT = "reads or runs SQL given as text"
_UNBOUNDED = (
    "builds one value of a size its argument sets, which the query memory limit "
    "(--query-memory-bytes) does not cover"
)
_SLEEP = "holds a thread while doing nothing"

# Functions DuckDB lists as scalar or aggregate that a query may not call, and why.
DENIED: dict[str, str] = {
    **dict.fromkeys(
        (
            "current_setting", "getvariable", "version", "current_connection_id",
            "current_query", "current_query_id", "current_transaction_id", "txid_current",
            "current_database", "current_catalog", "current_schema", "current_schemas",
            "in_search_path", "stats", "index_key",
        ),
        _SETTINGS,
    ),
    **dict.fromkeys(("nextval", "currval", "setval", "setseed", "write_log"), _STATE),
    **dict.fromkeys(
        ("json_serialize_sql", "json_deserialize_sql", "json_serialize_plan"), _SQL_TEXT
    ),
    **dict.fromkeys(
        ("range", "generate_series", "repeat", "list_resize", "array_resize"), _UNBOUNDED
    ),
    "sleep_ms": _SLEEP,
}  # fmt: skip
# Name prefixes refused: DuckDB's internal functions, and its catalog and pragma ones.
DENIED_PREFIXES: dict[str, str] = {
    "__": "is internal to DuckDB",
    "duckdb_": _SETTINGS,
    "pragma_": _SETTINGS,
}
# Functions the parser produces for syntax rather than calls of a catalog function:
# `unnest(list)` in the select list (a table function by DuckDB's list).
SYNTAX_FUNCTIONS = frozenset({"unnest", "unlist"})
# Bare names DuckDB's binder reads as a call when no column has the name (SQL's special
# values), and the function each calls: `current_catalog` is `current_database()`.
SQL_VALUES: dict[str, str] = {
    "current_catalog": "current_database", "current_schema": "current_schema",
    "current_user": "current_user", "current_role": "current_role",
    "session_user": "session_user", "user": "user", "current_date": "current_date",
    "current_time": "get_current_time", "current_timestamp": "get_current_timestamp",
    "localtime": "current_localtime", "localtimestamp": "current_localtimestamp",
}  # fmt: skip
# The only table functions a FROM may hold: they expand a list value, reading nothing.
TABLE_FUNCTIONS = frozenset({"unnest"})
# Table references that read no table themselves (their parts are checked).
_SAFE_REFS = frozenset({"JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "EMPTY_FROM", "PIVOT"})
_NOT_SELECT = (
    "is not one plain SELECT (DuckDB's PIVOT and UNPIVOT statements, even in a subquery, "
    "are not run: use the PIVOT clause of a SELECT)"
)
# How a refused kind of table reference is named in the message.
_REF_NAMES = {"SHOW_REF": "DESCRIBE, SHOW or SUMMARIZE", "COLUMN_DATA": "a result set"}
_NOT_A_TABLE = "is not a table of the database: a query reads the database's tables only"
_TABLE_FUNCTION = "is a DuckDB table function: a query reads the database's tables only"
_NOT_ALLOWED = (
    "is not a function queries may call (DuckDB's built-in scalar, aggregate and window "
    "functions only, docs/sql.md §8)"
)
_QUALIFIED = (
    "is a qualified name or a method call: call functions by their bare name, f(x) "
    "(DuckDB's catalog and schemas are not readable)"
)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(name: str) -> str:
    """`name` as DuckDB compares table and CTE names: case-folded in ASCII only (Python's
    `lower` folds more, e.g. the Kelvin sign to `k`, so a CTE named with it would seem to
    cover a system view that DuckDB then binds instead)."""
    return name.translate(_ASCII_LOWER)


class Refused(Exception):
    """`name`, as DuckDB reads it, may not be used: `why`."""

    def __init__(self, name: str, why: str, *, function: bool) -> None:
        super().__init__(f"{name} {why}")
        self.name = name
        self.why = why
        self.function = function


@dataclass(frozen=True)
class Allowed:
    """The functions a query may call, and DuckDB's own table and view names (which
    an unknown table of a query is refused as, rather than reported missing)."""

    functions: frozenset[str]
    denied: dict[str, str]
    system_names: frozenset[str]

    def why_not(self, name: str) -> str | None:
        """Why `name` may not be called, or None when it may."""
        if name in self.functions:
            return None
        return self.denied.get(name) or _NOT_ALLOWED


@functools.cache
def allowed() -> Allowed:
    """The allow list of this process's DuckDB (built-in functions only: extensions are
    never loaded), derived once."""
    con = connect(threads=1)
    try:
        return _derive(con)
    finally:
        con.close()


def check(con: duckdb.DuckDBPyConnection, sql: str, tables: Collection[str]) -> None:
    """Raise `Refused` unless `sql` is one SELECT that reads only `tables` (and its own
    CTEs) and calls only allowed functions; `con` parses it (nothing runs)."""
    tree = _parse(con, sql)
    statements = tree.get("statements") or []
    if len(statements) != 1:
        raise Refused("the statement", _NOT_SELECT, function=False)
    walker = _Walker(allowed(), frozenset(fold(t) for t in tables))
    walker.walk(statements[0].get("node"), frozenset())


def _parse(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, Any]:
    rows = con.sql("SELECT json_serialize_sql($1)", params=[sql]).fetchall()
    tree: dict[str, Any] = json.loads(rows[0][0])
    if tree.get("error"):
        # json_serialize_sql refuses all but SELECT; a parse error is DuckDB's to report
        message = str(tree.get("error_message") or "")
        if "Only SELECT" in message:
            raise Refused("the statement", _NOT_SELECT, function=False)
        raise duckdb.ParserException(message)
    return tree


class _Walker:
    """A walk over DuckDB's parse tree with the CTE names in scope."""

    def __init__(self, allow: Allowed, tables: frozenset[str]) -> None:
        self._allow = allow
        self._tables = tables

    def walk(self, node: Any, scope: frozenset[str]) -> None:
        if isinstance(node, list):
            for item in node:
                self.walk(item, scope)
        elif isinstance(node, dict):
            self._dict(node, scope)

    def _dict(self, node: dict[str, Any], scope: frozenset[str]) -> None:
        kind = node.get("type")
        if "cte_map" in node:
            scope = self._ctes(node["cte_map"], scope)
            self._children(node, scope, skip="cte_map")
        elif node.get("class") in ("FUNCTION", "WINDOW"):
            self._function(node)
            self._children(node, scope)
        elif node.get("class") == "COLUMN_REF":
            self._column(node)
        elif isinstance(kind, str) and "sample" in node and "class" not in node:
            self._table_ref(node, scope)
        else:
            self._children(node, scope)

    def _children(self, node: dict[str, Any], scope: frozenset[str], skip: str = "") -> None:
        for key, value in node.items():
            if key != skip and isinstance(value, list | dict):
                self.walk(value, scope)

    def _ctes(self, cte_map: dict[str, Any], scope: frozenset[str]) -> frozenset[str]:
        """Walk each CTE's query seeing the CTEs before it (and itself when recursive,
        as DuckDB does: a plain CTE naming itself reads the catalog's object); the names
        of them all for the query that owns them."""
        for entry in cte_map.get("map") or []:
            name = fold(str(entry["key"]))
            body = entry.get("value") or {}
            recursive = (body.get("query_node") or {}).get("type") == "RECURSIVE_CTE_NODE"
            self.walk(body, scope | {name} if recursive else scope)
            scope = scope | {name}
        return scope

    def _function(self, node: dict[str, Any]) -> None:
        name = str(node.get("function_name") or "").lower()
        qualifier = [str(node.get(k) or "") for k in ("catalog", "schema")]
        if any(qualifier):
            raise Refused(".".join([*filter(None, qualifier), name]), _QUALIFIED, function=True)
        if name in SYNTAX_FUNCTIONS:
            return
        why = self._allow.why_not(name)
        if why is not None:
            raise Refused(name, why, function=True)

    def _column(self, node: dict[str, Any]) -> None:
        """A bare name that DuckDB may bind as a call of a refused function."""
        names = node.get("column_names") or []
        called = SQL_VALUES.get(str(names[0]).lower()) if len(names) == 1 else None
        why = self._allow.why_not(called) if called is not None else None
        if why is not None:
            raise Refused(str(names[0]).lower(), why, function=True)

    def _table_ref(self, node: dict[str, Any], scope: frozenset[str]) -> None:
        kind = node["type"]
        if kind == "BASE_TABLE":
            self._base_table(node, scope)
        elif kind == "TABLE_FUNCTION":
            function = node.get("function") or {}
            name = str(function.get("function_name") or "").lower()
            if name not in TABLE_FUNCTIONS or function.get("schema") or function.get("catalog"):
                raise Refused(name or "a table function", _TABLE_FUNCTION, function=True)
            self._children(function, scope)
        elif kind in _SAFE_REFS:
            self._children(node, scope)
        else:
            raise Refused(_REF_NAMES.get(kind, kind.lower()), _NOT_A_TABLE, function=False)

    def _base_table(self, node: dict[str, Any], scope: frozenset[str]) -> None:
        name = str(node.get("table_name") or "")
        parts = [str(node.get(k) or "") for k in ("catalog_name", "schema_name")]
        if any(parts):
            raise Refused(".".join([*filter(None, parts), name]), _NOT_A_TABLE, function=False)
        if fold(name) not in self._tables and fold(name) not in scope:
            raise Refused(name, _NOT_A_TABLE, function=False)
        self._children(node, scope)


# --- deriving the lists from DuckDB ---------------------------------------------------


def _derive(con: duckdb.DuckDBPyConnection) -> Allowed:
    rows = con.sql(
        "SELECT DISTINCT function_name, function_type, macro_definition FROM duckdb_functions()"
    ).fetchall()
    callable_types = ("scalar", "aggregate", "window", "macro")
    names = {str(n).lower() for n, kind, _ in rows if kind in callable_types}
    denied = {n: why for n in names if (why := _denied(n)) is not None}
    macros: dict[str, list[str]] = {}
    for name, kind, definition in rows:
        if kind == "macro" and definition:
            macros.setdefault(str(name).lower(), []).append(str(definition))
    allow = Allowed(frozenset(names - denied.keys()), denied, _system_names(con, rows))
    return _without_bad_macros(con, allow, macros)


def _denied(name: str) -> str | None:
    if name in DENIED:
        return DENIED[name]
    return next((why for p, why in DENIED_PREFIXES.items() if name.startswith(p)), None)


def _without_bad_macros(
    con: duckdb.DuckDBPyConnection, allow: Allowed, macros: dict[str, list[str]]
) -> Allowed:
    """`allow` without the macros whose definitions call a refused function or read a
    table (`get_block_size`, `pg_get_viewdef`...), until no more drop out (a macro may
    call another)."""
    while True:
        dropped = dict(_bad_macros(con, allow, macros))
        if not dropped:
            return allow
        allow = Allowed(
            allow.functions - dropped.keys(), allow.denied | dropped, allow.system_names
        )


def _bad_macros(
    con: duckdb.DuckDBPyConnection, allow: Allowed, macros: dict[str, list[str]]
) -> Iterator[tuple[str, str]]:
    for name, definitions in macros.items():
        if name not in allow.functions:
            continue
        for definition in definitions:
            try:
                tree = _parse(con, f"SELECT ({definition})")
                _Walker(allow, frozenset()).walk(tree["statements"], frozenset())
            except (Refused, duckdb.Error) as exc:
                culprit = exc.name if isinstance(exc, Refused) else "SQL DuckDB cannot check"
                yield name, f"is a macro that uses {culprit}, which queries may not"
                break


def _system_names(
    con: duckdb.DuckDBPyConnection, functions: list[tuple[Any, ...]]
) -> frozenset[str]:
    """Names of DuckDB's own objects: table and pragma functions, views, schemas and
    databases (`information_schema`, `sqlite_master`, `pg_tables`, `memory`...)."""
    kinds = ("table", "table_macro", "pragma")
    names = {str(n).lower() for n, kind, _ in functions if kind in kinds}
    for query in (
        "SELECT view_name FROM duckdb_views()",
        "SELECT schema_name FROM duckdb_schemas()",
        "SELECT database_name FROM duckdb_databases()",
    ):
        names |= {str(row[0]).lower() for row in con.sql(query).fetchall()}
    return frozenset(names)
