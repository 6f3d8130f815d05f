"""The topic compiler: CREATE TOPIC statements to the catalog's `Topic` records.

This package owns TDengine's rules for what a topic may contain, the errors that refuse
the rest (each with the line and column in the user's text), and the translation of a
topic into what a vnode runs with DuckDB:

* A query topic's SELECT becomes `Topic.select_sql`, run over the batch relation of
  `sql/layout.py` (WAL entries of the topic's table only: every child of a super table,
  or the one child or normal table) on a connection with `TimeZone='UTC'`::

      SELECT <expr> AS "<name>", ... FROM "__batch"
      [WHERE <condition>]

  Rows come out in batch (WAL) order. The output columns are fixed at creation:
  `Topic.output`, and their exact Arrow types from `topic_schema`.
* A stable topic's tag condition becomes `Topic.filter_sql`, a boolean over the tags
  relation; `matching_tables` evaluates it.

TDengine semantics that DuckDB lacks are translated: its scalar functions, durations
and NOW by `sql/functions` (LOG(x) is the natural log, LENGTH counts bytes, CONCAT is NULL
when any argument is, NOW is read at each read, ...); BINARY(n)/NCHAR(n) are strings; decimal
literals are DOUBLE; a timestamp compares with an integer in the database precision or a
date-time string (UTC unless it names an offset); a string compares with a number as a
number (NULL when it is not one). An expression that could fail on a row (overflow,
`% 0`, a cast out of range) yields NULL there instead, so that one bad row can never
wedge a subscription.

This module is the public API. The modules beneath it, each importing only those listed
before it: `text` (positions and errors), `rules` (TDengine's rules, as data, and the
expression rules), `probe` (DuckDB), `target` (the table a topic reads), `shape` (the
SELECT's clauses and FROM), `names` (output columns and column binding), `compare`
(comparisons), `params` (parameterized topics: `?` in the WHERE, bindings and their
keys), `translate` (translation to DuckDB), `schema` (output types), `compile` (each kind
of topic). Beside them, `arrow_eval` runs the simplest compiled topics with pyarrow
instead of DuckDB (small reads, where DuckDB's fixed cost per query dominates),
`partition` splits one evaluation of a parameterized topic among its bindings, and
`tracked` adds to a topic's SELECT the id (WAL version, index in the entry) of each
output row's input row, by which shared groups lease and acknowledge rows.

A parameterized topic's `select_sql` is its *shared form*: the SELECT without the
parameter conditions, the parameters' columns as hidden outputs after its own
(`topic_schema` and `Topic.output` leave them out).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqltopic.errors import SqlError
from sqltopic.sql import layout
from sqltopic.sql.model import TBNAME, Catalog, Topic
from sqltopic.sql.statements import CreateTopic, Statement
from sqltopic.sql.topic.compare import coerce_timestamp_literals
from sqltopic.sql.topic.compile import COMPILERS, tag_filter
from sqltopic.sql.topic.rules import (
    SCALAR_FUNCTIONS,
    STATEFUL_FUNCTIONS,
    TBNAME_LENGTH,
    UNKNOWN_STRING_LENGTH,
)
from sqltopic.sql.topic.schema import schema_of
from sqltopic.sql.topic.target import find_target
from sqltopic.sql.topic.text import Text
from sqltopic.sql.topic.translate import double_literals

__all__ = [
    "coerce_timestamp_literals",
    "SCALAR_FUNCTIONS",
    "STATEFUL_FUNCTIONS",
    "TBNAME_LENGTH",
    "UNKNOWN_STRING_LENGTH",
    "compile_tag_condition",
    "compile_topic",
    "double_literals",
    "matching_tables",
    "tables_matching",
    "topic_schema",
]


def compile_topic(
    stmt: CreateTopic, catalog: Catalog, *, current_db: str | None, owner: str, now_us: int
) -> Topic:
    """The catalog record of a CREATE TOPIC statement; raises `SqlError` with a position."""
    text = Text.of(stmt)
    compiled = COMPILERS[stmt.kind](stmt, catalog, current_db, text)
    return Topic(
        name=stmt.name,
        db=compiled.db,
        kind=stmt.kind,
        sql=stmt.sql,
        meta=stmt.meta,
        target=compiled.target,
        output=compiled.output,
        output_schema=compiled.output_schema,
        select_sql=compiled.select_sql,
        filter_sql=compiled.filter_sql,
        uses=compiled.uses,
        params=compiled.params,
        owner=owner,
        create_us=now_us,
    )


def topic_schema(topic: Topic, catalog: Catalog) -> pa.Schema:
    """The exact Arrow schema of a query topic's output columns, as DuckDB gives them from
    `select_sql`; cheap after the first call."""
    if topic.kind != "query" or topic.target is None:
        raise SqlError(f"topic {topic.name!r} is not a query topic; it has no fixed schema")
    target = find_target(catalog, topic.db, topic.target)
    schema = schema_of(topic.select_sql, target.batch_schema())
    # a parameterized topic's shared form ends with its hidden parameter columns
    return pa.schema(list(schema)[: len(schema) - len(topic.params)])


def matching_tables(topic: Topic, tags: pa.Table, con: duckdb.DuckDBPyConnection) -> list[str]:
    """The child tables (`tbname`s of `tags`, a `layout.tags_schema` table) that a stable
    topic delivers, in the order of `tags`. `con` is the calling thread's cursor."""
    if topic.filter_sql is None:
        return [str(name) for name in tags.column(TBNAME).to_pylist()]
    try:
        return tables_matching(topic.filter_sql, tags, con)
    except duckdb.Error as err:
        raise SqlError(f"the tag condition of topic {topic.name!r} failed: {err}") from None


def tables_matching(filter_sql: str, tags: pa.Table, con: duckdb.DuckDBPyConnection) -> list[str]:
    """The `tbname`s of `tags` (a `layout.tags_schema` table) whose row meets a compiled
    tag condition, in order; raises duckdb.Error when the condition fails."""
    query = f'SELECT "{TBNAME}" FROM "{layout.TAGS}" WHERE {filter_sql}'
    con.register(layout.TAGS, tags)
    try:
        rows = con.sql(query).to_arrow_table()
    finally:
        con.unregister(layout.TAGS)
    return [str(name) for name in rows.column(0).to_pylist()]


def compile_tag_condition(
    stmt: Statement, catalog: Catalog, db: str, stable: str, condition: exp.Expr
) -> tuple[str, tuple[str, ...]]:
    """A tag condition on super table `db.stable` (GRANT ... WITH) as DuckDB SQL over the
    tags relation, and the tags it reads: the rules of a stable topic's WHERE (tags,
    `tbname`, constants and scalar functions). SqlError with a position otherwise."""
    return tag_filter(condition.copy(), find_target(catalog, db, stable), Text.of(stmt))
