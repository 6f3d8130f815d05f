"""TDengine's scalar functions, durations and NOW, given TDengine's meaning in DuckDB.

`FUNCTIONS` (in `catalogue`) lists every scalar function of TDengine's SQL reference
with how sqltopic evaluates it or why it refuses it. `expand_calls` rewrites a tree in
place, innermost call first: each TDengine call becomes DuckDB SQL with TDengine's
meaning (`numbers`, `strings`, `times`, `weeks`; time on integer ticks, `ticks`; the
walk over a tree, durations and timestamp arithmetic in `expand`; ad hoc SELECT's
argument types in `adhoc`), marked with a
`/* td:<name> */` comment so that later translations (Spark) can name it. Topics
(`sql/topic/translate.py`) and ad hoc SELECT (`server/core/query.py`) both use it, so a
function means the same on every path.
"""

from __future__ import annotations

import re

from sqlglot import exp

from sqltopic.sql.functions.base import Call, Ctx, TypeOf
from sqltopic.sql.functions.catalogue import FUNCTIONS, MANY_ARGS, Spec
from sqltopic.sql.functions.ticks import Duration, duration_ns, in_ticks, number

__all__ = [
    "FUNCTIONS",
    "MARK",
    "Ctx",
    "Duration",
    "Spec",
    "TypeOf",
    "call_args",
    "expand_call",
    "marked_names",
    "normalize_now",
    "resolve_duration",
]

# The comment a translated call carries: `td:<name>`.
MARK = "td:"
_MARK_RE = re.compile(r"\btd:(\w+)")


def call_args(node: exp.Expr) -> tuple[exp.Expr, ...]:
    """A call's arguments in the order written (sqlglot's classes keep them by role,
    in `arg_types` order for every class the catalogue meets)."""
    if isinstance(node, exp.StrPosition):  # POSITION(needle IN haystack)
        return tuple(a for a in (node.args.get("substr"), node.this) if a is not None)
    found: list[exp.Expr] = []
    for key in node.arg_types:
        value = node.args.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expr) and not isinstance(item, exp.DataType):
                found.append(item)
    return tuple(found)


def expand_call(node: exp.Func, name: str, ctx: Ctx) -> exp.Expr:
    """The DuckDB form of one TDengine call (its arguments already translated); raises
    through `ctx.refuse` when the call is refused or malformed."""
    spec = FUNCTIONS[name]
    args = call_args(node)
    if spec.refused:
        ctx.refuse(f"function {name.upper()} is not supported: {spec.refused}", node)
    if not spec.min_args <= len(args) <= spec.max_args:
        wanted = _arity(spec)
        ctx.refuse(
            f"{name.upper()} takes {wanted} argument(s), got {len(args)}: "
            f"{name.upper()}{spec.args}",
            node,
        )
    assert spec.build is not None
    built = spec.build(Call(name, args, node, ctx))
    if built is node:
        return node
    marked = exp.Paren(this=built)
    marked.add_comments([f"{MARK}{name}"])
    return marked


def _arity(spec: Spec) -> str:
    if spec.min_args == spec.max_args:
        return f"{spec.min_args}"
    if spec.max_args >= MANY_ARGS:
        return f"at least {spec.min_args}"
    return f"{spec.min_args} to {spec.max_args}"


def marked_names(sql: str) -> list[str]:
    """The TDengine functions a translated SQL text calls, by their marks, in order."""
    return _MARK_RE.findall(sql)


def normalize_now(tree: exp.Expr) -> None:
    """Bare `NOW` (TDengine's keyword, unquoted and unqualified) is NOW()."""
    for col in list(tree.find_all(exp.Column)):
        ident = col.this
        if (
            isinstance(ident, exp.Identifier)
            and not ident.quoted
            and not col.table
            and ident.name.lower() == "now"
        ):
            call = exp.Anonymous(this="now", expressions=[])
            call.meta.update(col.meta or ident.meta)
            col.replace(call)


def resolve_duration(node: Duration, ctx: Ctx) -> None:
    """A duration outside a function's time unit argument is integer ticks of the
    database precision (`now - 1d`); one finer than the precision is refused."""
    ticks = in_ticks(duration_ns(node), ctx.precision)
    if ticks is None:
        ctx.refuse(
            f"duration {node.amount}{node.unit} is finer than the database precision "
            f"({ctx.precision}); use a multiple of one tick",
            node,
        )
    node.replace(number(ticks))
