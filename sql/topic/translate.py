"""Translation to DuckDB: the SELECT a vnode runs over the batch relation, with
TDengine's meaning given to functions, comparisons and decimal literals, and what could
fail on a row wrapped to yield NULL there instead."""

from __future__ import annotations

from typing import NoReturn

import pyarrow as pa
from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery
from sqltopic.sql import layout
from sqltopic.sql.functions import Ctx
from sqltopic.sql.functions.expand import translate_tree
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


def translate(
    tree: exp.Select,
    probe: Probe,
    precision: Precision,
    text: Text,
    nchar: frozenset[str] = frozenset(),
) -> None:
    """Give `tree` TDengine's meaning in DuckDB (in place); `nchar`: the NCHAR columns."""
    _guard(tree)
    _map_functions(tree, probe, precision, text, nchar)
    for node in reversed(list(tree.find_all(*COMPARISONS, exp.Between, exp.In))):
        coerce(node, probe, precision, text)
    double_literals(tree)


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
    if _total_call(node):
        return False
    if isinstance(node, exp.Func):
        return not isinstance(node, _NEVER_FAIL)
    return isinstance(node, _MAY_FAIL)


def _total_call(node: exp.Expr) -> bool:
    """TO_ISO8601 of a column and literals: its translation (strftime of a timestamp, or
    integer arithmetic on its ticks) cannot fail, and TRY would cost DuckDB a third of
    the read (docs/sql.md §9.1.1)."""
    if not (isinstance(node, exp.Anonymous) and str(node.this).lower() in _TOTAL_FUNCTIONS):
        return False
    return all(isinstance(a, (exp.Column, exp.Literal)) for a in node.expressions)


# TDengine functions whose translation never fails when the arguments are columns.
_TOTAL_FUNCTIONS = frozenset({"to_iso8601"})


def _try(tree: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this="TRY", expressions=[tree])


def _map_functions(
    tree: exp.Select, probe: Probe, precision: Precision, text: Text, nchar: frozenset[str]
) -> None:
    """TDengine's functions, durations and timestamp arithmetic, innermost first."""

    def type_of(node: exp.Expr) -> pa.DataType | None:
        return probe.types([node], text, node)[0]

    def refuse(message: str, at: exp.Expr | None) -> NoReturn:
        raise text.error(InvalidTopicQuery, message, at)

    ctx = Ctx(precision=precision, type_of=type_of, refuse=refuse, in_topic=True, nchar=nchar)
    translate_tree(tree, ctx, lambda node: func_name(node, text), skip=PLAIN_NODES)


def double_literals(tree: exp.Expr) -> None:
    """Decimal literals are DOUBLE in TDengine (DuckDB reads `1.5` as a DECIMAL)."""
    for lit in list(tree.find_all(exp.Literal)):
        decimal = not lit.is_string and any(c in lit.this for c in ".eE")
        if decimal and not isinstance(lit.parent, exp.DataTypeParam):
            lit.replace(exp.Cast(this=lit.copy(), to=exp.DataType.build("DOUBLE")))
