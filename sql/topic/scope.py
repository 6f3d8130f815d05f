"""Which tables a query topic can deliver rows of, from its WHERE alone.

A query topic's compiled WHERE is an AND of conjuncts. Those that read only `tbname` and
tags (and constants) have the same value for every row of one table, so a table for which
one of them is not TRUE contributes no row, whatever its data. `table_condition` returns
the AND of those conjuncts as DuckDB SQL over the tags relation (`sql/layout.py`), for
server/core/topic_tables.py: the vnode then reads and evaluates a topic only over the tables it can
deliver (docs/architecture.md, "The shared pass"), and evaluates their rows with the rest
of the WHERE only (`row_select`). Only conjuncts built from node types
that cannot depend on the moment of evaluation qualify (no NOW(), no RANDOM()): a table
left out is left out for good, until the catalog changes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp, parse_one

# Expression nodes a table condition may hold: columns, constants, comparisons and boolean
# logic. Anything else (functions above all, whose value may change with the clock) keeps
# its conjunct for the row filter only.
_SAFE: tuple[type[exp.Expr], ...] = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Tuple,
    exp.And, exp.Or, exp.Not, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In,
    exp.Between, exp.Is, exp.Like, exp.ILike, exp.Neg, exp.Cast, exp.DataType,
    exp.DataTypeParam, exp.Var,
)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def table_condition(select_sql: str, table_columns: frozenset[str]) -> str | None:
    """The conjuncts of `select_sql`'s WHERE that read only `table_columns` (`tbname`
    and the tags, lower-case), ANDed, as DuckDB SQL; None when there is none."""
    tree = parse_one(select_sql, read="duckdb")
    where = tree.args.get("where")
    if where is None:
        return None
    parts = [_unwrapped(c) for c in conjuncts(where.this)]
    kept = [c for c in parts if _per_table(c, table_columns)]
    if not kept:
        return None
    return " AND ".join(f"({c.sql(dialect='duckdb')})" for c in kept)


@functools.lru_cache(maxsize=4096)
def row_select(select_sql: str, table_columns: frozenset[str]) -> str:
    """`select_sql` without the conjuncts `table_condition` takes out of its WHERE (and
    without a WHERE when nothing else is left): what decides a row of a table for which
    the table condition holds, as DuckDB SQL; `select_sql` itself when none qualifies."""
    tree = parse_one(select_sql, read="duckdb")
    where = tree.args.get("where")
    if where is None:
        return select_sql
    parts = [_unwrapped(c) for c in conjuncts(where.this)]
    rest = [c for c in parts if not _per_table(c, table_columns)]
    if len(rest) == len(parts):
        return select_sql
    if rest:
        tree.set("where", exp.Where(this=exp.and_(*(exp.Paren(this=c) for c in rest))))
    else:
        tree.set("where", None)
    return str(tree.sql(dialect="duckdb"))


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The top-level AND conjuncts of a condition (through parentheses around ANDs; a
    conjunct keeps its own parentheses)."""
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    if isinstance(node, exp.Paren) and isinstance(node.this, (exp.And, exp.Paren)):
        return conjuncts(node.this)
    return [node]


def _unwrapped(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _per_table(node: exp.Expr, table_columns: frozenset[str]) -> bool:
    """True when `node` reads at least one table column, no data column, and holds only
    safe nodes."""
    columns = list(node.find_all(exp.Column))
    if not columns or any(c.name.lower() not in table_columns for c in columns):
        return False
    return all(isinstance(n, _SAFE) for n in node.walk())


def simple_mask(condition: str, tags: pa.Table) -> pa.ChunkedArray | None:
    """The rows of `tags` that `condition` (a table condition) keeps, as a boolean
    mask, when it is made only of `col = literal`, `col IN (literals)`, AND, OR and
    parentheses over string and integer columns: pyarrow does that in microseconds,
    where DuckDB plans IN lists slowly. None for anything else (DuckDB decides)."""

    def member(name: str, value_set: pa.Array) -> pa.ChunkedArray:
        column = tags.column(name)
        hits = pc.is_in(column, value_set=value_set)
        return pc.if_else(pc.is_null(column), pa.scalar(None, pa.bool_()), hits)  # SQL's NULL

    def both(left: pa.ChunkedArray, right: pa.ChunkedArray, conjunction: bool) -> Any:
        return (pc.and_kleene if conjunction else pc.or_kleene)(left, right)

    mask = _fold(_parsed(condition), tags.schema, member, both)
    return None if mask is None else pc.fill_null(mask, False)


T = TypeVar("T")

# A simple condition decided for one table from its tags (`{tbname: ..., tag: value}`):
# True, False, or None (SQL's unknown).
Predicate = Callable[[Mapping[str, object]], bool | None]


@functools.lru_cache(maxsize=65536)
def simple_predicate(condition: str, schema: pa.Schema) -> Predicate | None:
    """What `simple_mask` decides for the rows of a tags relation of `schema`, as a
    function of one row: for a few tables (those a catalog change added), a mask's
    kernel calls cost a thousand times what the row does. None where `simple_mask`
    would be None."""

    def member(name: str, value_set: pa.Array) -> Predicate:
        allowed = frozenset(value_set.to_pylist())
        return lambda row: None if (value := row.get(name)) is None else value in allowed

    return _fold(_parsed(condition), schema, member, _kleene)


@functools.lru_cache(maxsize=65536)
def _parsed(condition: str) -> exp.Expr:
    return parse_one(condition, read="duckdb")


def _fold(
    node: exp.Expr, schema: pa.Schema, leaf: Callable[[str, pa.Array], T],
    both: Callable[[T, T, bool], T],
) -> T | None:  # fmt: skip
    """A simple condition folded: `leaf(column, values)` for each `col = literal` or
    `col IN (literals)` (the values in the column's type), `both(left, right, True)`
    for an AND (False: an OR); None when a node is not simple."""
    if isinstance(node, exp.Paren):
        return _fold(node.this, schema, leaf, both)
    if isinstance(node, exp.And | exp.Or):
        left, right = _fold(node.left, schema, leaf, both), _fold(node.right, schema, leaf, both)
        if left is None or right is None:
            return None
        return both(left, right, isinstance(node, exp.And))
    if isinstance(node, exp.EQ | exp.In) and isinstance(node.this, exp.Column):
        name = node.this.name
        if name not in schema.names:
            return None
        value_set = _value_set(node, schema.field(name).type)
        return None if value_set is None else leaf(name, value_set)
    return None


def _value_set(node: exp.EQ | exp.In, type_: pa.DataType) -> pa.Array | None:
    """The literals `col = literal` or `col IN (literals)` compares with, in the
    column's type; None when it is not simple: another kind of item, or a value out of
    the type's range (DuckDB decides)."""
    items = [node.expression] if isinstance(node, exp.EQ) else node.expressions
    values = [_literal(item, type_) for item in items]
    if not values or any(v is _NOT_SIMPLE for v in values):
        return None
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, OverflowError):
        return None


_NOT_SIMPLE = object()


def _kleene(left: Predicate, right: Predicate, conjunction: bool) -> Predicate:
    """AND (or OR) in three-valued logic: a False (True) side decides alone."""
    decisive = not conjunction

    def both(row: Mapping[str, object]) -> bool | None:
        a = left(row)
        if a is decisive:
            return decisive
        b = right(row)
        if b is decisive:
            return decisive
        return None if a is None or b is None else not decisive

    return both


def _literal(node: exp.Expr, type_: pa.DataType) -> object:
    """A literal's value in the column's type, or _NOT_SIMPLE (another kind of node,
    or a value whose comparison would need a cast)."""
    if not isinstance(node, exp.Literal):
        return _NOT_SIMPLE
    if node.is_string and (pa.types.is_string(type_) or pa.types.is_large_string(type_)):
        return node.this
    if not node.is_string and pa.types.is_integer(type_):
        try:
            return int(node.this)
        except ValueError:
            return _NOT_SIMPLE
    return _NOT_SIMPLE
