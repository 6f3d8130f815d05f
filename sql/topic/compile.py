"""Compilation of each kind of topic (query, stable, database) into the pieces of its
catalog record: the target, the output columns and schema, and the DuckDB SQL."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery, NotFoundError, SqlError
from sqltopic.sql import layout
from sqltopic.sql.functions import normalize_now
from sqltopic.sql.model import TBNAME, Catalog, Column, Param
from sqltopic.sql.statements import CreateTopic
from sqltopic.sql.topic.names import Scope, bind_columns, outputs
from sqltopic.sql.topic.params import (
    add_hidden,
    bind_params,
    refuse_in_condition,
    refuse_outside_where,
    take_params,
)
from sqltopic.sql.topic.probe import Probe, duckdb_sql, quoted, relation
from sqltopic.sql.topic.rules import check_parts
from sqltopic.sql.topic.schema import fix_output_types, output_columns, remember_schema
from sqltopic.sql.topic.shape import check_from, check_root, parts
from sqltopic.sql.topic.target import Target, resolve_target
from sqltopic.sql.topic.text import Text
from sqltopic.sql.topic.translate import batch_select, translate


@dataclass(frozen=True, slots=True)
class Compiled:
    """What a topic compiles to: the fields of its `Topic` not copied from the statement."""

    db: str
    target: str | None
    output: tuple[Column, ...] = ()
    output_schema: pa.Schema | None = None
    select_sql: str = ""
    filter_sql: str | None = None
    uses: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()


def _database_topic(
    stmt: CreateTopic, catalog: Catalog, current_db: str | None, text: Text
) -> Compiled:
    name = stmt.db or ""
    if name not in catalog.databases:
        raise text.error(
            NotFoundError,
            f"database {name!r} does not exist; create it first, or check SHOW DATABASES",
            text.after("DATABASE"),
        )
    return Compiled(db=name, target=None)


# --- stable topics ------------------------------------------------------------------------


def _stable_topic(
    stmt: CreateTopic, catalog: Catalog, current_db: str | None, text: Text
) -> Compiled:
    ref, at = stmt.target, text.after("STABLE")
    if ref is None:
        raise text.error(SqlError, "a stable topic needs a super table: AS STABLE db.stb", at)
    target = resolve_target(catalog, ref.db, ref.name, current_db, text, at=at)
    if target.kind != "super":
        raise text.error(
            InvalidTopicQuery,
            f"Only super tables can be subscribed with AS STABLE: {target} is a {target.kind} "
            f"table; subscribe to it with CREATE TOPIC ... AS SELECT * FROM {target}",
            at,
        )
    if stmt.where is None:
        return Compiled(db=target.db, target=target.name)
    filter_sql, uses = tag_filter(stmt.where.copy(), target, text)
    return Compiled(db=target.db, target=target.name, filter_sql=filter_sql, uses=uses)


def tag_filter(cond: exp.Expr, target: Target, text: Text) -> tuple[str, tuple[str, ...]]:
    """A stable topic's (or a privilege's) condition as DuckDB SQL over the tags
    relation, and the tags used."""
    refuse_in_condition(cond, text)
    normalize_now(cond)
    check_parts([cond], text)
    used = bind_columns(cond, Scope(target, frozenset({target.name}), tags_only=True), text)
    tree = exp.Select(expressions=[quoted(TBNAME)]).from_(relation(layout.TAGS)).where(cond)
    with closing(Probe(layout.TAGS, layout.tags_schema(target.tags, target.precision))) as p:
        translate(tree, p, target.precision, text, _nchar(target.tags))
        condition = tree.args["where"].this
        p.types([condition], text, condition)
        p.check(tree, text)
    return duckdb_sql(condition, text), target.in_order(used)


# --- query topics -------------------------------------------------------------------------


def _query_topic(
    stmt: CreateTopic, catalog: Catalog, current_db: str | None, text: Text
) -> Compiled:
    if stmt.query is None:
        raise text.error(InvalidTopicQuery, "a query topic needs AS SELECT ... FROM table", None)
    select = check_root(stmt.query.copy(), text)
    normalize_now(select)
    table = check_from(select, text)
    refuse_outside_where(select, text)
    written = take_params(select, text)  # a parameterized topic: its shared form
    check_parts(parts(select), text)
    db, name = table.text("db").lower() or None, table.name.lower()
    target = resolve_target(catalog, db, name, current_db, text, at=table)
    alias = table.alias.lower()
    scope = Scope(target, frozenset({name, alias} - {""}))
    params, param_uses = bind_params(written, scope, text)
    outs, used = outputs(select, scope, text)
    where = select.args.get("where")
    tree = batch_select(outs, where.this if where is not None else None)
    with closing(Probe(layout.BATCH, target.batch_schema())) as probe:
        translate(tree, probe, target.precision, text, _nchar((*target.columns, *target.tags)))
        schema = fix_output_types(tree, outs, probe, target.precision, text)
        full = schema
        if params:
            add_hidden(tree, params)
            full = probe.check(tree, text)
    select_sql = duckdb_sql(tree, text)
    remember_schema(select_sql, target.batch_schema(), full)
    return Compiled(
        db=target.db,
        target=target.name,
        output=output_columns(outs, schema, target.precision),
        output_schema=schema,
        select_sql=select_sql,
        uses=target.in_order(used | param_uses),
        params=params,
    )


COMPILERS: dict[str, Callable[[CreateTopic, Catalog, str | None, Text], Compiled]] = {
    "query": _query_topic,
    "stable": _stable_topic,
    "database": _database_topic,
}


def _nchar(columns: tuple[Column, ...]) -> frozenset[str]:
    """The NCHAR columns' names (LENGTH counts 4 bytes a character of them)."""
    return frozenset(c.name.lower() for c in columns if c.type.name == "NCHAR")
