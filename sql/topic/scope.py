"""Which tables a query topic can deliver rows of, from its WHERE alone.

A query topic's compiled WHERE is an AND of conjuncts. Those that read only `tbname` and
tags (and constants) have the same value for every row of one table, so a table for which
one of them is not TRUE contributes no row, whatever its data. `table_condition` returns
the AND of those conjuncts as DuckDB SQL over the tags relation (`sql/layout.py`), for
server/topic_tables.py: the vnode then reads and evaluates a topic only over the tables it can
deliver (docs/architecture.md, "The shared pass"). Only conjuncts built from node types
that cannot depend on the moment of evaluation qualify (no NOW(), no RANDOM()): a table
left out is left out for good, until the catalog changes.
"""

from __future__ import annotations

import functools

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
    kept = [c for c in _conjuncts(where.this) if _per_table(c, table_columns)]
    if not kept:
        return None
    return " AND ".join(f"({c.sql(dialect='duckdb')})" for c in kept)


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return [*_conjuncts(node.left), *_conjuncts(node.right)]
    return [node]


def _per_table(node: exp.Expr, table_columns: frozenset[str]) -> bool:
    """True when `node` reads at least one table column, no data column, and holds only
    safe nodes."""
    columns = list(node.find_all(exp.Column))
    if not columns or any(c.name.lower() not in table_columns for c in columns):
        return False
    return all(isinstance(n, _SAFE) for n in node.walk())
