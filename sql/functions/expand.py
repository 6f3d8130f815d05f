"""The translation of a whole tree: TDengine calls, durations and timestamp arithmetic,
innermost first, so that each call's arguments are DuckDB SQL when it is typed."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from sqltopic.sql.functions import expand_call, resolve_duration
from sqltopic.sql.functions.base import Ctx, is_integer, is_timestamp, paren
from sqltopic.sql.functions.catalogue import FUNCTIONS
from sqltopic.sql.functions.ticks import Duration, from_ticks, to_ticks

# Functions whose arguments may be durations: their time units (`timetruncate(ts, 1d)`).
UNIT_FUNCTIONS = frozenset({"timetruncate", "timediff"})

NameOf = Callable[[exp.Func], str]


def translate_tree(
    tree: exp.Expr, ctx: Ctx, name_of: NameOf, *, skip: tuple[type[exp.Expr], ...] = ()
) -> None:
    """Rewrite `tree` in place with TDengine's meaning (children before parents).
    `name_of` gives a call's name as written; nodes of the `skip` classes are not calls."""
    for node in reversed(list(tree.walk())):
        if isinstance(node, Duration):
            parent = node.parent
            unit = isinstance(parent, exp.Func) and name_of(parent) in UNIT_FUNCTIONS
            if not unit:
                resolve_duration(node, ctx)
        elif isinstance(node, (exp.Add, exp.Sub)):
            _timestamp_arithmetic(node, ctx)
        elif isinstance(node, exp.Mod):
            _null_on_zero(node)
        elif isinstance(node, exp.Func) and not isinstance(node, skip):
            name = name_of(node)
            if name in FUNCTIONS:
                new = expand_call(node, name, ctx)
                if new is not node:
                    node.replace(new)


def _timestamp_arithmetic(node: exp.Add | exp.Sub, ctx: Ctx) -> None:
    """`timestamp ± integer` counts ticks of the database precision, as TDengine does
    (`now - 36500d` is NOW less 36500 days)."""
    left, right = node.this, node.expression
    lt, rt = ctx.type_of(left), ctx.type_of(right)
    if is_timestamp(lt) and is_integer(rt):
        ts, n = left, right
    elif isinstance(node, exp.Add) and is_integer(lt) and is_timestamp(rt):
        ts, n = right, left
    else:
        return
    ticks = type(node)(this=to_ticks(ts.copy(), ctx.precision), expression=paren(n.copy()))
    node.replace(exp.Paren(this=from_ticks(ticks, ctx.precision)))


def _null_on_zero(node: exp.Mod) -> None:
    """`MOD(a, b)` and `a % b` are NULL when b is 0 ("Returns NULL if expr2 is 0",
    22-function.md MOD), for every type: DuckDB fails on an integer 0, gives NaN for 0.0."""
    divisor = node.expression
    if isinstance(divisor, exp.Literal) and divisor.is_number and float(divisor.this) != 0:
        return  # `% 7`: never 0
    # NULLIF, not CASE: DuckDB evaluates a CASE's branches for every row, and fails
    node.set("expression", exp.Nullif(this=divisor.copy(), expression=exp.Literal.number(0)))
