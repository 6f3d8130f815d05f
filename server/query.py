"""Ad hoc SELECT over a database's retained WAL data, run by DuckDB.

Each table the query names becomes a relation of all its retained rows: a super table
gives every child's rows with the tags and `tbname`; a child table its own rows (tags
and `tbname` may be named, `*` shows the data columns only, as in TDengine).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, get_args

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from sqltopic.errors import SqlError
from sqltopic.server.batches import conform, data_entries, with_context
from sqltopic.server.result import Result, Session
from sqltopic.server.state import State
from sqltopic.sql import statements as st
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import Column, Database
from sqltopic.sql.topic import coerce_timestamp_literals
from sqltopic.sql.types import Precision

# Arrow timestamp units that are database precisions.
PRECISIONS: tuple[str, ...] = get_args(Precision)

_names = itertools.count()


def select(state: State, session: Session, stmt: st.Select) -> Result:
    tree = stmt.tree.copy()
    relations: dict[str, pa.Table] = {}
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        if not table.name or (not table.args.get("db") and table.name.lower() in ctes):
            continue
        name, rel, visible = _relation(state, session, table)
        relations[name] = rel
        _expand_star(table, visible)
        table.replace(exp.Table(this=exp.to_identifier(name), alias=_alias(table)))
    coerce_timestamp_literals(tree, _timestamp_columns(relations.values()))
    sql = tree.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    con = state.duck.get()
    try:
        for name, rel in relations.items():
            con.register(name, rel)
        return Result(con.sql(sql).to_arrow_table())
    except Exception as exc:  # DuckDB's binder and runtime errors are the user's to fix
        raise SqlError(f"query failed: {_first_line(exc)}") from None
    finally:
        for name in relations:
            con.unregister(name)


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


def _relation(state: State, session: Session, table: exp.Table) -> tuple[str, pa.Table, list[str]]:
    """A registered name, the rows, and the columns `*` stands for."""
    db = state.db_of(session, table.args["db"].name.lower() if table.args.get("db") else None)
    name = table.name.lower()
    cat = state.catalog
    stb = cat.stables.get((db.name, name))
    if stb is not None:
        tables = {t.name: t for t in cat.children(db.name, name)}
        rel = _collect(state, db, tables, stb.columns, stb.tags)
        return f"__q{next(_names)}", rel, [c.name for c in (*stb.columns, *stb.tags)]
    tb = cat.table(db.name, name)
    columns = cat.columns_of(db.name, name)
    tags = cat.stables[(db.name, tb.stable)].tags if tb.stable else ()
    rel = _collect(state, db, {name: tb}, columns, tags)
    return f"__q{next(_names)}", rel, [c.name for c in columns]


def _collect(
    state: State, db: Database, tables: dict[str, Any], columns: tuple[Column, ...],
    tags: tuple[Column, ...],
) -> pa.Table:  # fmt: skip
    schema = data_schema(columns, db.precision)
    vgroups = sorted({t.vgroup for t in tables.values()})
    batches, owners = [], []
    for vgroup in vgroups:
        for entry in data_entries(state.vnode(vgroup).reader()):
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


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
