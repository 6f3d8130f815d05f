"""Translation to DuckDB: the SELECT a vnode runs over the batch relation, with
TDengine's meaning given to functions, comparisons and decimal literals, and what could
fail on a row wrapped to yield NULL there instead."""

from __future__ import annotations

import functools
from collections.abc import Callable

from sqlglot import exp

from sqltopic.sql import layout
from sqltopic.sql.topic.compare import COMPARISONS, coerce
from sqltopic.sql.topic.names import Output
from sqltopic.sql.topic.probe import Probe, relation
from sqltopic.sql.topic.rules import PLAIN_NODES
from sqltopic.sql.topic.text import Text, func_name
from sqltopic.sql.types import Precision

# Nodes that can fail on some row (overflow, division by zero), besides functions.
_MAY_FAIL: tuple[type[exp.Expr], ...] = (
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg,
)  # fmt: skip
# Functions that never fail in DuckDB (out-of-domain math gives NaN or infinity); any
# other function (a cast, ABS of the smallest integer, ...) may.
_NEVER_FAIL: tuple[type[exp.Expr], ...] = (
    exp.And, exp.Or, exp.Xor, exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Lower,
    exp.Upper, exp.Trim, exp.Concat, exp.ConcatWs, exp.Length, exp.Replace, exp.Ascii,
    exp.Substring, exp.Sin, exp.Cos, exp.Tan, exp.Asin, exp.Acos, exp.Atan, exp.Sqrt, exp.Ln,
    exp.Log, exp.Exp, exp.Pow, exp.Degrees, exp.Radians, exp.Pi, exp.Sign,
)  # fmt: skip


def batch_select(outputs: list[Output], where: exp.Expr | None) -> exp.Select:
    """`SELECT <outputs> FROM "__batch" [WHERE ...]`."""
    items = [exp.alias_(o.expr, o.name, quoted=True, copy=False) for o in outputs]
    tree = exp.Select(expressions=items).from_(relation(layout.BATCH))
    return tree.where(where) if where is not None else tree


def translate(tree: exp.Select, probe: Probe, precision: Precision, text: Text) -> None:
    """Give `tree` TDengine's meaning in DuckDB (in place)."""
    _guard(tree)
    _map_functions(tree, text)
    for node in reversed(list(tree.find_all(*COMPARISONS, exp.Between, exp.In))):
        coerce(node, probe, precision, text)
    _double_literals(tree)


def _guard(tree: exp.Select) -> None:
    """Wrap what can fail on a row in TRY(...): NULL there instead of a failed poll."""
    for item in tree.expressions:
        if isinstance(item, exp.Alias) and _may_fail(item.this):
            item.set("this", _try(item.this))
    where = tree.args.get("where")
    if where is not None and _may_fail(where.this):
        where.set("this", _try(where.this))


def _may_fail(tree: exp.Expr) -> bool:
    return any(_node_may_fail(node) for node in tree.walk())


def _node_may_fail(node: exp.Expr) -> bool:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return False  # a negative constant
    if isinstance(node, exp.Func):
        return not isinstance(node, _NEVER_FAIL)
    return isinstance(node, _MAY_FAIL)


def _try(tree: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this="TRY", expressions=[tree])


def _map_functions(tree: exp.Expr, text: Text) -> None:
    """TDengine functions whose DuckDB namesake means something else, innermost first."""
    for node in reversed(list(tree.find_all(exp.Func))):
        if isinstance(node, PLAIN_NODES):
            continue
        rewrite = _REWRITES.get(func_name(node, text))
        if rewrite is not None:
            new = rewrite(node)
            if new is not node:
                node.replace(new)


def _log(node: exp.Func) -> exp.Expr:
    """TDengine LOG(x) is ln(x) and LOG(x, b) the log base b; DuckDB's LOG(b, x)."""
    base = node.args.get("expression")
    return exp.Ln(this=node.this) if base is None else exp.Log(this=base, expression=node.this)


def _byte_length(node: exp.Func) -> exp.Expr:
    """TDengine LENGTH counts bytes (DuckDB's LENGTH counts characters)."""
    return exp.Anonymous(this="strlen", expressions=[node.this])


def _char_length(node: exp.Func) -> exp.Expr:
    return exp.Length(this=node.this)


def _concat(node: exp.Func) -> exp.Expr:
    """TDengine CONCAT is NULL when any argument is (DuckDB's skips NULLs); `||` is too."""
    return _pipes([_operand(a) for a in node.expressions])


def _concat_ws(node: exp.Func) -> exp.Expr:
    """CONCAT_WS(sep, a, b) as `a || sep || b`: NULL when any argument is, as TDengine."""
    sep, *args = (_operand(a) for a in node.expressions)
    joined: list[exp.Expr] = []
    for arg in args:
        joined += [sep.copy(), arg] if joined else [arg]
    return _pipes(joined)


def _pipes(args: list[exp.Expr]) -> exp.Expr:
    return functools.reduce(lambda a, b: exp.DPipe(this=a, expression=b), args)


def _operand(arg: exp.Expr) -> exp.Expr:
    atomic = isinstance(arg, (exp.Column, exp.Literal, exp.Func, exp.Paren))
    return arg if atomic else exp.Paren(this=arg)


def _cast(node: exp.Func) -> exp.Expr:
    """TDengine BINARY(n), VARCHAR(n) and NCHAR(n) are strings (DuckDB's BINARY is a BLOB)."""
    to = node.args.get("to")
    if isinstance(to, exp.DataType) and to.this in _STRING_TYPES:
        node.set("to", exp.DataType.build("VARCHAR"))
    return node


_STRING_TYPES = frozenset({
    exp.DataType.Type.BINARY, exp.DataType.Type.VARBINARY, exp.DataType.Type.NCHAR,
    exp.DataType.Type.NVARCHAR, exp.DataType.Type.CHAR, exp.DataType.Type.VARCHAR,
    exp.DataType.Type.TEXT,
})  # fmt: skip
_REWRITES: dict[str, Callable[[exp.Func], exp.Expr]] = {
    "log": _log,
    "length": _byte_length,
    "char_length": _char_length,
    "concat": _concat,
    "concat_ws": _concat_ws,
    "cast": _cast,
}


def _double_literals(tree: exp.Expr) -> None:
    """Decimal literals are DOUBLE in TDengine (DuckDB reads `1.5` as a DECIMAL)."""
    for lit in list(tree.find_all(exp.Literal)):
        decimal = not lit.is_string and any(c in lit.this for c in ".eE")
        if decimal and not isinstance(lit.parent, exp.DataTypeParam):
            lit.replace(exp.Cast(this=lit.copy(), to=exp.DataType.build("DOUBLE")))
