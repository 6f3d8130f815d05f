"""What a function translation works with: the call (its arguments in written order),
the context (database precision, argument types, where refusals point), and small
helpers building DuckDB expressions."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import pyarrow as pa
import sqlglot
from sqlglot import exp

from sqltopic.sql.types import Precision

# The type of an expression over the relation, or None when it cannot be told.
TypeOf = Callable[[exp.Expr], pa.DataType | None]
# Raise an error about a node (or the call when None) with its position.
Refuse = Callable[[str, exp.Expr | None], NoReturn]


@dataclass(frozen=True, slots=True)
class Ctx:
    """Where a call is translated: a topic or an ad hoc SELECT."""

    precision: Precision
    type_of: TypeOf
    refuse: Refuse
    in_topic: bool
    # The NCHAR columns and tags (lower-case names): TDengine's LENGTH counts 4 bytes a
    # character of an NCHAR (UCS-4), and sqltopic stores every string as UTF-8.
    nchar: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Call:
    """One TDengine function call: its name as written, its arguments in written order,
    and the node it replaces."""

    name: str
    args: tuple[exp.Expr, ...]
    node: exp.Expr
    ctx: Ctx

    def refuse(self, why: str, at: exp.Expr | None = None) -> NoReturn:
        self.ctx.refuse(f"{self.name.upper()}: {why}", self.node if at is None else at)

    def type(self, index: int) -> pa.DataType | None:
        return self.ctx.type_of(self.args[index])


Builder = Callable[[Call], exp.Expr]


# --- argument kinds ----------------------------------------------------------------


def is_null(node: exp.Expr) -> bool:
    return isinstance(node, exp.Null)


def int_literal(node: exp.Expr) -> int | None:
    """The value of an integer literal (`3`, `-3`), else None."""
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Paren):
        return int_literal(inner.this)
    if isinstance(inner, exp.Literal) and inner.is_int:
        return -int(inner.this) if negative else int(inner.this)
    return None


def string_literal(node: exp.Expr) -> str | None:
    return node.this if isinstance(node, exp.Literal) and node.is_string else None


def is_string(dtype: pa.DataType | None) -> bool:
    return dtype is not None and (pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def is_integer(dtype: pa.DataType | None) -> bool:
    return dtype is not None and pa.types.is_integer(dtype)


def is_number(dtype: pa.DataType | None) -> bool:
    return dtype is not None and (
        pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)
    )


def is_timestamp(dtype: pa.DataType | None) -> bool:
    return dtype is not None and pa.types.is_timestamp(dtype)


# --- building ----------------------------------------------------------------------


def paren(node: exp.Expr) -> exp.Expr:
    atomic = isinstance(node, (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Null))
    return node if atomic else exp.Paren(this=node)


def null_if_any_null(args: list[exp.Expr], value: exp.Expr) -> exp.Expr:
    """`value`, NULL when any of `args` is NULL (DuckDB's GREATEST skips NULLs)."""
    nulls = [exp.Is(this=paren(a.copy()), expression=exp.Null()) for a in args]
    if not nulls:
        return value
    cond: exp.Expr = nulls[0]
    for more in nulls[1:]:
        cond = exp.Or(this=cond, expression=more)
    return exp.Case(ifs=[exp.If(this=cond, true=exp.Null())], default=value)


def case(whens: list[tuple[exp.Expr, exp.Expr]], default: exp.Expr | None = None) -> exp.Expr:
    ifs = [exp.If(this=cond, true=then) for cond, then in whens]
    return exp.Case(ifs=ifs, default=default)


@functools.cache
def _parsed(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read="duckdb")


def template(sql: str, **args: exp.Expr) -> exp.Expr:
    """DuckDB SQL with the columns named `args` replaced by those expressions (each use a
    copy): longer translations read as SQL."""
    tree = _parsed(sql).copy()
    for col in list(tree.find_all(exp.Column)):
        if col.name in args and not col.table:
            col.replace(paren(args[col.name].copy()))
    return tree


def cast(node: exp.Expr, to: str) -> exp.Expr:
    return exp.Cast(this=paren(node), to=exp.DataType.build(to, dialect="duckdb"))
