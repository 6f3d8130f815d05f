"""Ad hoc SELECT over a database's retained WAL data, run by DuckDB, sandboxed.

Each table the query names becomes a relation of all its retained rows: a super table
gives every child's rows with the tags and `tbname`; a child table its own rows (tags
and `tbname` may be named, `*` shows the data columns only, as in TDengine). The SQL
DuckDB is to run is checked against the allow list of server/core/sandbox.py before anything
runs, and runs in the query database (server/core/duck.py) as a `QueryRun`
(server/core/query_run.py): its result is read a batch at a time, under the server's result,
memory and time limits.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn, get_args

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from sqltopic.errors import NotFoundError, QueryNotAllowed, SqlError
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core import adhoc_sql, info_schema, sandbox
from sqltopic.server.core.batches import data_entries
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.query_run import QueryRun, brief
from sqltopic.server.core.state import State
from sqltopic.sql import statements as st
from sqltopic.sql.entries import conform
from sqltopic.sql.functions.adhoc import mark_nchar, relation_columns, translate_select
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import Column, Database
from sqltopic.sql.parse import position
from sqltopic.sql.topic import coerce_timestamp_literals, double_literals
from sqltopic.sql.topic.context import with_context
from sqltopic.sql.topic.text import Text, func_name
from sqltopic.sql.types import Precision

# Arrow timestamp units that are database precisions.
PRECISIONS: tuple[str, ...] = get_args(Precision)
# A table in FROM written as a string, which DuckDB would read as a file.
_FILE_TABLE = "in FROM would read a file: a query reads the database's tables only"
_SYSTEM_TABLE = "is DuckDB's own catalog, not a table of the database"

_names = itertools.count()


@dataclass(frozen=True)
class Prepared:
    """A SELECT ready for DuckDB: its SQL and the relations it reads, by name."""

    sql: str
    relations: dict[str, pa.Table]


def select(state: State, session: Session, stmt: st.Select) -> Result:
    """The rows of `stmt` at once (the embedded engine, and a call's statements before
    its last), under the server's limits; the caller holds the shared lock."""
    run = QueryRun(state.limits)
    try:
        start(state, prepare(state, session, stmt), stmt, run)
        return Result(run.read_all())
    finally:
        run.close()


def open_select(state: State, session: Session, stmt: st.Select, run: QueryRun) -> None:
    """Start `stmt` in `run`, its rows to be read a batch at a time: the tables are
    read under the shared lock, DuckDB runs after it (the relations hold the rows)."""
    with state.lock.shared():
        prepared = _placed(stmt, lambda: prepare(state, session, stmt))
    start(state, prepared, stmt, run)


def start(state: State, prepared: Prepared, stmt: st.Select, run: QueryRun) -> None:
    """Run `prepared` in `run`, on a cursor of the query database."""
    run.place(stmt.sql, stmt.pos.line, stmt.pos.column)
    cursor = state.duck.queries(state.limits.query_memory_bytes).cursor()
    run.start(cursor, prepared.sql, prepared.relations)


def prepare(state: State, session: Session, stmt: st.Select) -> Prepared:
    """`stmt` as DuckDB SQL over relations of the tables it names, checked against the
    sandbox's allow list (QueryNotAllowed names what it refuses)."""
    tree = stmt.tree.copy()
    adhoc_sql.name_items(tree, Text.of(stmt))
    adhoc_sql.system_functions(tree, session)
    relations: dict[str, pa.Table] = {}
    ctes = {sandbox.fold(cte.alias_or_name) for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not table.name or (not table.args.get("db") and sandbox.fold(table.name) in ctes):
            continue
        name, rel, visible = _resolved(state, session, stmt, table)
        relations[name] = rel
        _expand_star(table, visible)
        table.replace(exp.Table(this=exp.to_identifier(name), alias=_alias(table)))
    _tdengine_functions(stmt, tree, relations)
    double_literals(tree)
    coerce_timestamp_literals(tree, _timestamp_columns(relations.values()))
    try:
        sql = tree.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise SqlError(f"the query has no DuckDB equivalent: {brief(str(exc))}") from None
    _check(state, stmt, sql, relations)
    return Prepared(sql, relations)


def _tdengine_functions(stmt: st.Select, tree: exp.Expr, relations: dict[str, pa.Table]) -> None:
    """TDengine's scalar functions, durations and NOW with TDengine's meaning, as in a
    topic (sql/functions); the precision is the first queried table's."""
    text = Text.of(stmt)
    columns, precision = relation_columns(list(relations.values()))

    def refuse(message: str, at: exp.Expr | None) -> NoReturn:
        raise text.error(SqlError, message, at)

    translate_select(tree, columns, precision, lambda node: func_name(node, text), refuse)


def _check(state: State, stmt: st.Select, sql: str, relations: dict[str, pa.Table]) -> None:
    try:
        sandbox.check(state.duck.serial(), sql, relations)
    except sandbox.Refused as refused:
        offset = _locate(stmt.sql, refused.name, function=refused.function)
        raise _not_allowed(stmt, f"{brief(refused.name)} {refused.why}", offset) from None
    except duckdb.Error as exc:  # DuckDB's parser on SQL sqlglot wrote: the user's to fix
        raise SqlError(f"query failed: {brief(str(exc))}") from None


def _resolved(
    state: State, session: Session, stmt: st.Select, table: exp.Table
) -> tuple[str, pa.Table, list[str]]:
    """`_relation` of a table, or why it is refused when it is not the database's: a
    string (a file, to DuckDB) or a name of DuckDB's own catalog."""
    try:
        return _relation(state, session, table)
    except NotFoundError:
        parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p]
        offset = parts[0].meta.get("start") if parts else None
        full = ".".join(p.name for p in parts)
        if offset is not None and stmt.sql[offset : offset + 1] == "'":
            raise _not_allowed(stmt, f"'{brief(full)}' {_FILE_TABLE}", offset) from None
        if any(p.name.lower() in sandbox.allowed().system_names for p in parts):
            views = ", ".join(sorted(info_schema.VIEWS))
            why = _SYSTEM_TABLE
            if _in_info_schema(table):
                why = f"is not one of sqltopic's information_schema views ({views})"
            raise _not_allowed(stmt, f"{brief(full)} {why}", offset) from None
        raise


def _not_allowed(stmt: st.Select, message: str, offset: int | None) -> QueryNotAllowed:
    """QueryNotAllowed at `offset` of the statement (its start when unknown)."""
    if offset is None:
        return QueryNotAllowed(message, sql=stmt.sql, line=stmt.pos.line, column=stmt.pos.column)
    at = position(stmt.sql, offset)
    line = stmt.pos.line + at.line - 1
    column = stmt.pos.column + at.column - 1 if at.line == 1 else at.column
    return QueryNotAllowed(message, sql=stmt.sql, line=line, column=column)


def _locate(sql: str, name: str, *, function: bool) -> int | None:
    """Where `name` first appears in the user's text: a function followed by `(`, a
    table after FROM, JOIN or a comma; else anywhere (a CTE of a table's name comes
    first, a function may be a bare SQL value such as `current_schema`)."""
    last = re.escape(name.rsplit(".", maxsplit=1)[-1])
    if function:
        patterns = [rf"(?<![\w$])({last})\s*\(", rf"(?<![\w$])({last})(?![\w$])"]
    else:
        patterns = [rf"(?:\bfrom|\bjoin|,)\s+({last})(?![\w$])", rf"(?<![\w$])({last})(?![\w$])"]
    for pattern in patterns:
        found = re.search(pattern, sql, re.IGNORECASE)
        if found:
            return found.start(1)
    return None


def _placed(stmt: st.Select, prepare_it: Callable[[], Prepared]) -> Prepared:
    """`prepare_it()`, its SqlError placed at the statement (as Engine.run does)."""
    try:
        return prepare_it()
    except SqlError as err:
        raise err.at(stmt.sql, stmt.pos.line, stmt.pos.column) from None


def _timestamp_columns(relations: Iterable[pa.Table]) -> dict[str, Precision]:
    """Timestamp columns of the queried relations by name, with their precision."""
    found: dict[str, Precision] = {}
    for rel in relations:
        for field in rel.schema:
            if pa.types.is_timestamp(field.type) and field.type.unit in PRECISIONS:
                found[field.name.lower()] = field.type.unit
    return found


def _alias(table: exp.Table) -> exp.TableAlias:
    alias = table.args.get("alias")
    return alias if alias is not None else exp.TableAlias(this=exp.to_identifier(table.name))


def _in_info_schema(table: exp.Table) -> bool:
    schema = table.args.get("db")
    return schema is not None and schema.name.lower() == info_schema.SCHEMA


def _relation(state: State, session: Session, table: exp.Table) -> tuple[str, pa.Table, list[str]]:
    """A registered name, the rows, and the columns `*` stands for."""
    if _in_info_schema(table):
        rel = info_schema.relation(state, session, table.name.lower())
        return f"__q{next(_names)}", rel, list(rel.column_names)
    db = state.db_of(session, table.args["db"].name.lower() if table.args.get("db") else None)
    name = table.name.lower()
    cat = state.catalog
    rights = Rights(state, session.user)
    rights.require("read", db, name, "SELECT")  # (NotFoundError when it may not see it)
    stb = cat.stables.get((db.name, name))
    if stb is not None:
        # a READ WITH a tag condition covers only the child tables it picks
        tables = {t.name: t for t in rights.children("read", db, stb)}
        rel = _nchar(_collect(state, db, tables, stb.columns, stb.tags), (*stb.columns, *stb.tags))
        return f"__q{next(_names)}", rel, [c.name for c in (*stb.columns, *stb.tags)]
    tb = cat.table(db.name, name)
    columns = cat.columns_of(db.name, name)
    tags = cat.stables[(db.name, tb.stable)].tags if tb.stable else ()
    rel = _nchar(_collect(state, db, {name: tb}, columns, tags), (*columns, *tags))
    return f"__q{next(_names)}", rel, [c.name for c in columns]


def _nchar(rel: pa.Table, columns: tuple[Column, ...]) -> pa.Table:
    """`rel` naming its NCHAR columns (TDengine's LENGTH counts 4 bytes a character)."""
    return mark_nchar(rel, [c.name for c in columns if c.type.name == "NCHAR"])


def _collect(
    state: State, db: Database, tables: dict[str, Any], columns: tuple[Column, ...],
    tags: tuple[Column, ...],
) -> pa.Table:  # fmt: skip
    schema = data_schema(columns, db.precision)
    vgroups = sorted({t.vgroup for t in tables.values()})
    batches, owners = [], []
    for vgroup in vgroups:
        for entry in data_entries(state.view(vgroup).reader(), keep=tables):
            tb = tables.get(entry.table.name)
            if tb is None or tb.vgroup != vgroup or not entry.table.is_of(tb):
                continue  # another table's, or an earlier table's of the same name
            batches.append(conform(entry.batch, schema))
            owners.append(tb)
    data = pa.Table.from_batches(batches, schema=schema)
    lengths = [b.num_rows for b in batches]
    return with_context(data, owners, lengths, tags, db.precision, tbname=True)


def _expand_star(table: exp.Table, visible: list[str]) -> None:
    """Replace `*` in the SELECT that reads only `table` by its visible columns."""
    select = table.find_ancestor(exp.Select)
    if select is None or len(list(select.find_all(exp.Table))) != 1:
        return
    expanded: list[exp.Expression] = []
    for e in select.expressions:
        if isinstance(e, exp.Star):
            expanded += [exp.column(c, quoted=True) for c in visible]
        else:
            expanded.append(e)
    select.set("expressions", expanded)
