"""A query topic's SQL as Spark SQL, with the meaning the vnode gives it in DuckDB.

The input is the topic's compiled form, `Topic.select_sql`: DuckDB SQL over the batch
relation, where TDengine's semantics are already explicit (LOG, LENGTH, CONCAT, decimal
literals as DOUBLE, timestamp literals, and `TRY(...)` around what could fail on a row).
sqlglot parses it, the nodes whose Spark namesake means something else are rewritten
(below), and sqlglot generates Spark SQL, refusing anything it cannot say.

What differs, and how it is bridged:

* Failures. DuckDB's `TRY(e)` makes the whole `e` NULL when any part of it fails
  (integer overflow, `% 0`, a cast out of range). Spark has no TRY; its `try_add`,
  `try_subtract`, `try_multiply`, `try_mod` and `try_cast` make the failing node NULL.
  The two agree when NULL propagates from that node to the top of `e` — through
  arithmetic, comparisons, functions, NOT, a CASE's result — and, in a WHERE, through
  AND (a NULL or FALSE condition drops the row alike). A node that may fail under OR,
  COALESCE, IS NULL, a CASE condition ... is refused (`BackfillUnsupported`).
* Types. DuckDB computes in the operand types (`ti + 1` is a TINYINT and overflows at
  127) while Spark widens (`ti + 1` is an INT; unsigned columns are wider signed types,
  see `types`). Each integer result is checked against the range of its DuckDB type
  (NULL outside it), and each FLOAT result is rounded to FLOAT, so values agree.
* Functions. DuckDB follows IEEE 754 where Spark gives NULL: `x / 0` is ±inf or NaN,
  `ln(0)` is -inf, `ln(-1)` and `x % 0.0` NaN. CAST of a float to an integer rounds half
  to even (Spark truncates); CEIL and FLOOR of a double stay DOUBLE (Spark's are BIGINT); SIGN is
  a TINYINT with SIGN(NaN) = 0; SUBSTRING from position 0 takes one character less.
  STRLEN (TDengine's LENGTH, bytes) is Spark's octet_length.
* Refused: shifts, `//`, `~` on unsigned values, casts from strings to integers or
  timestamps and from floats or timestamps to strings (the two engines format and parse
  them differently), and any function not listed in `_FUNCTIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from sqltopic.errors import BackfillUnsupported
from sqltopic.spark_jobs.types import INTEGER_RANGES, spark_sql_type
from sqltopic.sql.functions import FUNCTIONS, marked_names

Types = dict[int, pa.DataType]  # id(node) -> the DuckDB type of that node


@dataclass(frozen=True)
class SparkQuery:
    """A topic's SELECT in Spark SQL over relation `relation`, output in Spark types."""

    sql: str
    relation: str


def transpile(
    topic_name: str,
    select_sql: str,
    batch: pa.Schema,
    output: pa.Schema,
    relation: str,
    extra: dict[str, str] | None = None,
) -> SparkQuery:
    """`select_sql` (DuckDB, over `__batch` of schema `batch`) as Spark SQL over
    `relation`, each output column cast to the Spark form of its type in `output`, then
    the `extra` columns of `relation` (output name -> column) as they are."""
    try:
        tree = sqlglot.parse_one(select_sql, read="duckdb")
    except SqlglotError as err:
        raise _refuse(topic_name, f"its compiled SQL does not parse: {err}") from None
    if not isinstance(tree, exp.Select):
        raise _refuse(topic_name, "it is not a SELECT")
    _refuse_marked(topic_name, select_sql)
    nodes, types = _probe(tree, batch)
    small = frozenset(id(n) for n in tree.walk() if _small(n))
    ctx = _Context(topic_name, types, nodes, small)
    ctx.check_failure_paths(tree)
    _rewrite(tree, ctx)
    _finish(tree, output, relation, extra or {})
    try:
        sql = tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as err:
        raise _refuse(topic_name, f"sqlglot cannot say it in Spark SQL: {err}") from None
    return SparkQuery(sql, relation)


def _refuse(topic: str, why: str) -> BackfillUnsupported:
    return BackfillUnsupported(f"topic {topic!r} cannot be backfilled with Spark: {why}")


def _refuse_marked(topic: str, select_sql: str) -> None:
    """Refuse, by its TDengine name, a function the compiler marked (`/* td:name */`)
    that Spark cannot evaluate exactly (`Spec.spark` says why)."""
    for name in marked_names(select_sql):
        spec = FUNCTIONS.get(name)
        if spec is not None and spec.spark:
            raise _refuse(
                topic,
                f"function {name.upper()} has no exact Spark form: {spec.spark}; consume the "
                "topic from earliest instead, or backfill a topic without it",
            )


# --- DuckDB types of the nodes --------------------------------------------------------

# Nodes whose DuckDB type the rewrite needs.
_TYPED: tuple[type[exp.Expr], ...] = (
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Cast, exp.TryCast, exp.Abs,
    exp.Ceil, exp.Floor, exp.Sign, exp.Column, exp.BitwiseNot, exp.Round, exp.UnixToTime,
    exp.IntDiv, exp.Paren, exp.Case, exp.Func,
)  # fmt: skip


def _probe(tree: exp.Select, batch: pa.Schema) -> tuple[list[exp.Expr], Types]:
    """The nodes of `_TYPED` kinds and the DuckDB type of each, in one query over no rows."""
    nodes = [n for n in tree.walk() if isinstance(n, _TYPED) and not _in_type(n)]
    if not nodes:
        return nodes, {}
    items = [exp.alias_(n.copy(), f"_{i}", quoted=True) for i, n in enumerate(nodes)]
    query = exp.Select(expressions=items).from_(exp.to_table('"__batch"', dialect="duckdb"))
    with closing(duckdb.connect()) as con:
        con.execute("SET TimeZone='UTC'")
        con.register("__batch", batch.empty_table())
        schema = con.sql(query.sql(dialect="duckdb")).to_arrow_table().schema
    return nodes, {id(n): t for n, t in zip(nodes, schema.types, strict=True)}


def _in_type(node: exp.Expr) -> bool:
    return isinstance(node.parent, (exp.DataType, exp.DataTypeParam))


# --- failures: where a NULL-on-failure node may sit ------------------------------------


@dataclass
class _Context:
    topic: str
    types: Types
    # every node `types` names (and every node a rewrite replaced), kept alive so that
    # no id in `types` is reused by a new node
    keep: list[exp.Expr]
    # integer nodes `_small` before the rewrite: they cannot overflow, so they stay plain
    # (range checks nested in range checks grow exponentially)
    small: frozenset[int] = frozenset()

    def type_of(self, node: exp.Expr) -> pa.DataType | None:
        return self.types.get(id(node))

    def refuse(self, why: str) -> BackfillUnsupported:
        return _refuse(self.topic, why)

    def may_fail(self, node: exp.Expr) -> bool:
        """Whether DuckDB can fail on this node for some row (Spark then gives NULL)."""
        if isinstance(node, (exp.Neg, exp.Cast)) and isinstance(node.this, exp.Literal):
            return False  # a constant: the compiler checked it
        dtype = self.type_of(node)
        integer = dtype is not None and pa.types.is_integer(dtype)
        if isinstance(node, (exp.Mod, exp.IntDiv)) and _safe_divisor(node.expression):
            return False  # `% 1000`: neither division by zero nor MIN / -1
        if _small(node):
            return False  # calendar arithmetic (WEEK): far from any overflow
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Abs, exp.Mod)):
            return integer
        if isinstance(node, exp.IntDiv):
            return integer
        return (
            isinstance(node, exp.Cast)
            and not isinstance(node, exp.TryCast)
            and not _widening(self.type_of(node.this), dtype)
        )

    def check_failure_paths(self, tree: exp.Select) -> None:
        for node in tree.walk():
            if self.may_fail(node):
                _check_path(node, self)


# Functions whose integer results are small (calendar fields, day counts between dates).
_SMALL_FUNCTIONS: tuple[type[exp.Expr], ...] = (
    exp.Year, exp.Month, exp.Day, exp.DayOfWeek, exp.DayOfWeekIso, exp.WeekOfYear,
    exp.DateDiff,
)  # fmt: skip
# Literals up to this size keep sums and products of small values far from overflow.
_SMALL_LITERAL = 10**6


def _small(node: exp.Expr) -> bool:
    """Whether an integer expression stays within a few million whatever the row: built
    of calendar functions, small literals, + - * % // and CASE over them."""
    if isinstance(node, exp.Literal):
        return node.is_int and abs(int(node.this)) <= _SMALL_LITERAL
    if isinstance(node, (exp.Paren, exp.Neg)):
        return _small(node.this)
    if isinstance(node, _SMALL_FUNCTIONS):
        return True
    if isinstance(node, (exp.Add, exp.Sub, exp.Mod, exp.IntDiv)):
        return _small(node.this) and _small(node.expression)
    if isinstance(node, exp.Mul):  # one factor a literal: a bounded product
        sides = (node.this, node.expression)
        return all(_small(x) for x in sides) and any(isinstance(x, exp.Literal) for x in sides)
    if isinstance(node, exp.Case):
        branches = [i.args["true"] for i in node.args.get("ifs") or []]
        default = node.args.get("default")
        return all(_small(b) for b in [*branches, *([default] if default else [])])
    return False


def _safe_divisor(node: exp.Expr) -> bool:
    """An integer literal other than 0 and -1."""
    return isinstance(node, exp.Literal) and node.is_int and int(node.this) not in (0, -1)


def _widening(source: pa.DataType | None, target: pa.DataType | None) -> bool:
    """Whether a CAST from `source` to `target` never fails: a number to DOUBLE, a
    signed integer to BIGINT, a timestamp to its day, a type to itself."""
    if source is None or target is None:
        return False
    if source == target or (pa.types.is_timestamp(source) and pa.types.is_date32(target)):
        return True
    signed = bool(pa.types.is_signed_integer(source))
    if pa.types.is_float64(target):
        return bool(pa.types.is_integer(source) or pa.types.is_floating(source))
    return signed and bool(pa.types.is_int64(target))


def _check_path(node: exp.Expr, ctx: _Context) -> None:
    """Refuse `node` unless NULL propagates from it to its TRY (or the WHERE's top)."""
    child, parent = node, node.parent
    while parent is not None and not _is_try(parent):
        if isinstance(parent, exp.Where):
            return
        if isinstance(parent, exp.And) and _and_chain_to_where(parent):
            return
        if not _strict(parent, child):
            raise ctx.refuse(
                f"{node.sql(dialect='duckdb')} may fail on some rows (overflow, division by "
                f"zero, a cast out of range), and under {parent.key.upper()} Spark cannot "
                "give DuckDB's NULL for the whole expression; CAST the operands to a wider "
                "type (e.g. BIGINT or DOUBLE) so that it cannot fail"
            )
        child, parent = parent, parent.parent


def _is_try(node: exp.Expr) -> bool:
    return isinstance(node, exp.Try)


def _and_chain_to_where(node: exp.Expr) -> bool:
    """Whether `node` reaches the WHERE through AND and parentheses (and a TRY) only."""
    while isinstance(node, (exp.And, exp.Paren)) or _is_try(node):
        if node.parent is None:
            return False
        node = node.parent
    return isinstance(node, exp.Where)


_NON_STRICT: tuple[type[exp.Expr], ...] = (
    exp.And, exp.Or, exp.Xor, exp.Coalesce, exp.Is, exp.In, exp.NullSafeEQ, exp.NullSafeNEQ,
)  # fmt: skip


def _strict(parent: exp.Expr, child: exp.Expr) -> bool:
    """Whether `parent` is NULL whenever `child` is."""
    if isinstance(parent, _NON_STRICT):
        return False
    if isinstance(parent, exp.If):  # a CASE branch: strict in its result, not its condition
        return child is not parent.this
    if isinstance(parent, exp.Case):
        return child is not parent.this  # `CASE x WHEN ...` compares x
    if isinstance(parent, exp.Nullif):
        return child is parent.this
    if isinstance(parent, exp.Between):
        return child is parent.this
    return True


# --- rewriting -----------------------------------------------------------------------


def _rewrite(tree: exp.Select, ctx: _Context) -> None:
    """Every node in its Spark form, innermost first; TRY(...) unwrapped."""
    for node in reversed(list(tree.walk(bfs=False))):
        if _in_type(node) or isinstance(node, (exp.DataType, exp.DataTypeParam)):
            continue
        new = _spark_form(node, ctx)
        if new is not node:
            node.replace(new)
            ctx.keep.append(node)
            if id(node) in ctx.types:  # the parent's rule asks for its operand's type
                ctx.types[id(new)] = ctx.types[id(node)]


def _spark_form(node: exp.Expr, ctx: _Context) -> exp.Expr:
    if isinstance(node, exp.Try):
        inner: exp.Expr = node.this
        return inner
    rule = _RULES.get(type(node))
    if rule is not None:
        return rule(node, ctx)
    if isinstance(node, _PLAIN):
        return node
    if isinstance(node, exp.Anonymous) and node.name.lower() == "list_slice":
        return _list_slice(node, ctx)
    if isinstance(node, exp.Anonymous):
        spark_name = _ANONYMOUS.get(node.name.lower())
        if spark_name is not None:
            return exp.Anonymous(this=spark_name, expressions=node.expressions)
        raise ctx.refuse(
            f"function {node.name.upper()} has no Spark translation here{_within(node)}"
        )
    raise ctx.refuse(f"{node.sql(dialect='duckdb')} has no Spark translation here{_within(node)}")


def _within(node: exp.Expr) -> str:
    """`, in TDengine's NAME(...)` when `node` is part of a marked translation."""
    at: exp.Expr | None = node
    while at is not None:
        names = marked_names(" ".join(at.comments or []))
        if names:
            return f" (it evaluates TDengine's {names[0].upper()} in this database)"
        at = at.parent
    return ""


# DuckDB functions (that sqlglot leaves unparsed) and their Spark namesakes: TDengine's
# LENGTH (bytes), and the clock and ticks of TDengine's time functions (sql/functions).
_ANONYMOUS = {
    "strlen": "octet_length",
    "epoch_us": "unix_micros",
    "get_current_timestamp": "current_timestamp",
}

# Nodes whose Spark meaning is DuckDB's as they are.
_PLAIN: tuple[type[exp.Expr], ...] = (
    exp.Select, exp.From, exp.Table, exp.Where, exp.Alias, exp.Identifier, exp.Column,
    exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.Not, exp.And, exp.Or, exp.EQ,
    exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is,
    exp.In, exp.Between, exp.Like, exp.ILike, exp.DPipe, exp.Case, exp.If, exp.Coalesce,
    exp.Nullif, exp.Lower, exp.Upper, exp.Trim, exp.Length, exp.Replace, exp.Repeat,
    exp.Ascii, exp.Sin, exp.Cos, exp.Tan, exp.Asin, exp.Acos, exp.Atan, exp.Sqrt, exp.Exp,
    exp.Pow, exp.Degrees, exp.Radians, exp.Pi, exp.BitwiseAnd, exp.BitwiseOr,
    exp.BitwiseXor, exp.DataType, exp.DataTypeParam, exp.Var, exp.Greatest, exp.Least,
    exp.StrPosition, exp.RegexpReplace, exp.ToBase64, exp.Encode, exp.WeekOfYear,
    exp.Split, exp.ArrayToString, exp.Reverse, exp.Chr, exp.Pad, exp.Year, exp.Month,
    exp.Day, exp.DateFromParts,
)  # fmt: skip

# --- helpers building Spark expressions ----------------------------------------------


def _fn(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _cast(node: exp.Expr, to: str) -> exp.Expr:
    return exp.Cast(this=node, to=exp.DataType.build(to, dialect="spark"))


def _try_cast_to(node: exp.Expr, to: str) -> exp.Expr:
    """TRY_CAST (sqlglot writes a plain CAST for Spark unless `safe` is set, which would
    fail under ANSI mode)."""
    return exp.TryCast(this=node, to=exp.DataType.build(to, dialect="spark"), safe=True)


def _double(value: str) -> exp.Expr:
    """A DOUBLE constant Spark has no literal for: 'NaN', 'Infinity', '-Infinity'."""
    return _cast(exp.Literal.string(value), "DOUBLE")


def _case(*whens: tuple[exp.Expr, exp.Expr], default: exp.Expr | None = None) -> exp.Expr:
    case = exp.Case()
    for cond, then in whens:
        case = case.when(cond, then)
    return case.else_(default) if default is not None else case


def _in_range(value: exp.Expr, dtype: pa.DataType | None) -> exp.Expr:
    """`value` where it lies in the range of integer type `dtype`, else NULL; a FLOAT
    `dtype` rounds it to FLOAT."""
    if dtype is None:
        return value
    if pa.types.is_float32(dtype):
        return _cast(value, "FLOAT")
    bounds = INTEGER_RANGES.get(dtype)
    if bounds is None:
        return value
    low, high = (exp.Literal.number(b) for b in bounds)
    inside = exp.Between(this=value.copy(), low=low, high=high)
    return _case((inside, _cast(value, spark_sql_type(dtype))))


def _is_float(dtype: pa.DataType | None) -> bool:
    return dtype is not None and pa.types.is_floating(dtype)


def _is_int(dtype: pa.DataType | None) -> bool:
    return dtype is not None and pa.types.is_integer(dtype)


def _operands(node: exp.Expr) -> tuple[exp.Expr, exp.Expr]:
    return node.this, node.args["expression"]


# --- rules ---------------------------------------------------------------------------


def _arith(spark_fn: str) -> Callable[[exp.Expr, _Context], exp.Expr]:
    def rule(node: exp.Expr, ctx: _Context) -> exp.Expr:
        dtype = ctx.type_of(node)
        if id(node) in ctx.small:
            return node
        if not _is_int(dtype):
            return _in_range(node, dtype)  # floats: IEEE in both, rounded to FLOAT
        return _in_range(_fn(spark_fn, *_operands(node)), dtype)

    return rule


def _neg(node: exp.Expr, ctx: _Context) -> exp.Expr:
    dtype = ctx.type_of(node)
    if isinstance(node.this, exp.Literal) or not _is_int(dtype) or id(node) in ctx.small:
        return node
    return _in_range(_fn("try_subtract", exp.Literal.number(0), node.this), dtype)


def _div(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """IEEE division in DOUBLE: x / 0 is ±inf, 0 / 0 and NaN / 0 are NaN."""
    a, b = (_cast(x, "DOUBLE") for x in _operands(node))
    ieee = _case(
        (exp.Is(this=a.copy(), expression=exp.Null()), exp.Null()),
        (exp.Is(this=b.copy(), expression=exp.Null()), exp.Null()),
        (exp.EQ(this=b.copy(), expression=exp.Literal.number(0)), _zero_div(a.copy())),
        default=_fn("try_divide", a, b),
    )
    return _in_range(ieee, ctx.type_of(node))


def _zero_div(a: exp.Expr) -> exp.Expr:
    return _case(
        (_fn("isnan", a.copy()), _double("NaN")),
        (exp.GT(this=a.copy(), expression=exp.Literal.number(0)), _double("Infinity")),
        (exp.LT(this=a.copy(), expression=exp.Literal.number(0)), _double("-Infinity")),
        default=_double("NaN"),
    )


def _mod(node: exp.Expr, ctx: _Context) -> exp.Expr:
    dtype = ctx.type_of(node)
    a, b = _operands(node)
    if id(node) in ctx.small:
        return node
    if _is_int(dtype):
        return _in_range(_fn("try_mod", a, b), dtype)
    nan_on_zero = _case(
        (exp.Is(this=a.copy(), expression=exp.Null()), exp.Null()),
        (exp.EQ(this=b.copy(), expression=exp.Literal.number(0)), _double("NaN")),
        default=_fn("try_mod", a, b),
    )
    return _in_range(nan_on_zero, dtype)


def _abs(node: exp.Expr, ctx: _Context) -> exp.Expr:
    dtype = ctx.type_of(node)
    if not _is_int(dtype):
        return node
    x = node.this
    negated = _fn("try_subtract", exp.Literal.number(0), x.copy())
    below = exp.LT(this=x.copy(), expression=exp.Literal.number(0))
    return _in_range(_case((below, negated), default=x), dtype)


def _ln(node: exp.Expr, ctx: _Context) -> exp.Expr:
    return _ieee_ln(node.this)


def _ieee_ln(x: exp.Expr) -> exp.Expr:
    """ln(0) = -inf and ln(x < 0) = NaN, as DuckDB (Spark gives NULL)."""
    return _case(
        (exp.EQ(this=x.copy(), expression=exp.Literal.number(0)), _double("-Infinity")),
        (exp.LT(this=x.copy(), expression=exp.Literal.number(0)), _double("NaN")),
        default=exp.Ln(this=x),
    )


def _log(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's LOG(b, x) is ln(x) / ln(b), IEEE throughout."""
    base, x = node.this, node.args.get("expression")
    if x is None:
        raise ctx.refuse("LOG with one argument is the base-10 log in DuckDB: not expected")
    ratio = exp.Div(this=exp.Paren(this=_ieee_ln(x)), expression=exp.Paren(this=_ieee_ln(base)))
    return _div(ratio, _Context(ctx.topic, {id(ratio): pa.float64()}, [ratio]))


def _round_float_to_int(x: exp.Expr, to: str) -> exp.Expr:
    """DuckDB rounds a float cast to an integer half to even (Spark truncates): BROUND."""
    return _try_cast_to(_fn("bround", x), to)


def _cast_rule(node: exp.Expr, ctx: _Context) -> exp.Expr:
    source, target = ctx.type_of(node.this), ctx.type_of(node)
    to = node.args["to"]
    if target is None or (source is None and not isinstance(node.this, exp.Literal)):
        raise ctx.refuse(f"{node.sql(dialect='duckdb')}: the types are unknown")
    if source is None:  # a literal: timestamp literals of the compiler, constants
        return _literal_cast(node, target, ctx)
    return _convert(node.this, source, target, to, ctx)


def _literal_cast(node: exp.Expr, target: pa.DataType, ctx: _Context) -> exp.Expr:
    if pa.types.is_timestamp(target) or pa.types.is_floating(target):
        return exp.Cast(this=node.this, to=exp.DataType.build(spark_sql_type(target)))
    if pa.types.is_string(target) or pa.types.is_boolean(target):
        return exp.Cast(this=node.this, to=exp.DataType.build(spark_sql_type(target)))
    if _is_int(target) and _fits(node.this, target):
        return exp.Cast(this=node.this, to=exp.DataType.build(spark_sql_type(target)))
    raise ctx.refuse(f"{node.sql(dialect='duckdb')} has no Spark translation here")


def _fits(literal: exp.Expr, target: pa.DataType) -> bool:
    """Whether an integer literal lies in the range of integer type `target`."""
    negative = isinstance(literal, exp.Neg)
    inner = literal.this if negative else literal
    if not (isinstance(inner, exp.Literal) and inner.is_int):
        return False
    value = -int(inner.this) if negative else int(inner.this)
    low, high = INTEGER_RANGES.get(target, (0, -1))
    return low <= value <= high


def _convert(
    x: exp.Expr, source: pa.DataType, target: pa.DataType, to: exp.Expr, ctx: _Context
) -> exp.Expr:
    """CAST(x AS to) from `source` to `target` (DuckDB types), NULL where DuckDB fails."""
    what = f"CAST from {source} to {target}"
    if pa.types.is_string(target):
        if _is_float(source) or pa.types.is_timestamp(source):
            raise ctx.refuse(f"{what}: DuckDB and Spark format these values differently")
        return _cast(x, "STRING")
    if _is_int(target):
        if _is_float(source):
            return _in_range(_round_float_to_int(x, "DECIMAL(38,0)"), target)
        if _is_int(source) or pa.types.is_boolean(source):
            return _in_range(_try_cast_to(x, "DECIMAL(38,0)"), target)
        raise ctx.refuse(f"{what}: DuckDB and Spark parse these values differently")
    if _is_float(target):
        if pa.types.is_string(source):
            return _in_range(_try_cast_to(x, "DOUBLE"), target)
        if _is_int(source) or _is_float(source) or pa.types.is_boolean(source):
            return _cast(x, spark_sql_type(target))
    if pa.types.is_boolean(target) and (_is_int(source) or pa.types.is_boolean(source)):
        return _cast(x, "BOOLEAN")
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(source):
        return x
    if pa.types.is_date32(target) and pa.types.is_timestamp(source):
        return _cast(x, "DATE")  # the UTC day in both (the session's zone is UTC)
    raise ctx.refuse(f"{what} has no exact Spark translation")


def _try_cast(node: exp.Expr, ctx: _Context) -> exp.Expr:
    source, target = ctx.type_of(node.this), ctx.type_of(node)
    if source is not None and pa.types.is_string(source) and _is_float(target):
        return _in_range(_try_cast_to(node.this, "DOUBLE"), target)
    raise ctx.refuse(f"{node.sql(dialect='duckdb')} has no exact Spark translation")


def _ceil_floor(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB keeps a float's type (Spark's CEIL/FLOOR are BIGINT): beyond 2^52 every
    double is whole already (NaN and infinity too: Spark orders NaN above all)."""
    dtype, x = ctx.type_of(node), node.this
    if not _is_float(dtype):
        return node  # an integer: DuckDB and Spark both return it as it is
    big = exp.GTE(this=exp.Abs(this=x.copy()), expression=exp.Literal.number(2**52))
    whole = _cast(type(node)(this=x.copy()), "DOUBLE")
    return _in_range(_case((big, x), default=whole), dtype)


def _sign(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """A TINYINT; SIGN(NaN) = 0 as in DuckDB."""
    x, source = node.this, ctx.type_of(node.this)
    whens = [] if not _is_float(source) else [(_fn("isnan", x.copy()), exp.Literal.number(0))]
    whens += [
        (exp.GT(this=x.copy(), expression=exp.Literal.number(0)), exp.Literal.number(1)),
        (exp.LT(this=x.copy(), expression=exp.Literal.number(0)), exp.Literal.number(-1)),
        (exp.EQ(this=x.copy(), expression=exp.Literal.number(0)), exp.Literal.number(0)),
    ]
    return _cast(_case(*whens), "TINYINT")


def _round(node: exp.Expr, ctx: _Context) -> exp.Expr:
    return _in_range(node, ctx.type_of(node))


def _substring(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's SUBSTRING(s, 0, n) takes n - 1 characters (Spark's takes n)."""
    start, length = node.args.get("start"), node.args.get("length")
    if length is None or start is None:
        return node
    s = node.this
    zero = exp.EQ(this=start.copy(), expression=exp.Literal.number(0))
    shorter = exp.Substring(
        this=s.copy(),
        start=exp.Literal.number(1),
        length=exp.Sub(this=length.copy(), expression=exp.Literal.number(1)),
    )
    return _case((zero, shorter), default=node)


def _bitwise_not(node: exp.Expr, ctx: _Context) -> exp.Expr:
    dtype = ctx.type_of(node)
    if dtype is not None and pa.types.is_unsigned_integer(dtype):
        raise ctx.refuse("~ of an unsigned value has no Spark translation (no unsigned types)")
    return node


def _unix_to_time(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's EPOCH_MS is both ways (sqlglot reads it as UnixToTime): a timestamp to
    milliseconds (a BIGINT result) or milliseconds to a timestamp; MAKE_TIMESTAMP is
    microseconds to a timestamp."""
    scale = node.args.get("scale")
    millis = isinstance(scale, exp.Literal) and scale.this == "3"
    if _is_int(ctx.type_of(node)):
        return _fn("unix_millis" if millis else "unix_micros", node.this)
    return _fn("timestamp_millis" if millis else "timestamp_micros", node.this)


def _int_div(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """Integer `//` truncates toward zero in both (Spark's DIV); floats are refused."""
    dtype = ctx.type_of(node)
    if not _is_int(dtype):
        raise ctx.refuse("integer division // of non-integers has no exact Spark translation")
    if id(node) in ctx.small:
        return node
    return _in_range(exp.IntDiv(this=node.this, expression=node.expression), dtype)


def _day_of_week(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's DAYOFWEEK is 0 = Sunday, Spark's 1 = Sunday."""
    return exp.Sub(this=exp.DayOfWeek(this=node.this), expression=exp.Literal.number(1))


def _iso_day_of_week(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's ISODOW is 1 = Monday; Spark's WEEKDAY is 0 = Monday."""
    return exp.Paren(this=exp.Add(this=_fn("weekday", node.this), expression=exp.Literal.number(1)))


# DuckDB's strftime format of TO_ISO8601 (sql/functions/times.py) in Spark's pattern
# language: the only format sqltopic writes, so the only one translated.
_ISO_SECONDS = ("%Y-%m-%dT%H:%M:%S", "yyyy-MM-dd'T'HH:mm:ss")


# TO_ISO8601's one-strftime form at or after 1970: the fraction in ms or us, then the
# zone as written (`+0000`, `Z`, `+00:00`: quoted in Spark's pattern).
_ISO_FRACTIONS = {"%g": "SSS", "%f": "SSSSSS"}
_ISO_ZONE = re.compile(r"[-+:0-9Z]*")


def _time_to_str(node: exp.Expr, ctx: _Context) -> exp.Expr:
    fmt = node.args.get("format")
    text = fmt.this if isinstance(fmt, exp.Literal) else None
    if text == _ISO_SECONDS[0]:
        return _fn("date_format", node.this, exp.Literal.string(_ISO_SECONDS[1]))
    head = _ISO_SECONDS[0] + "."
    if (
        text is not None
        and text.startswith(head)
        and text[len(head) : len(head) + 2] in _ISO_FRACTIONS
    ):
        zone = text[len(head) + 2 :]
        if _ISO_ZONE.fullmatch(zone):
            quoted = f"'{zone}'" if zone else ""
            pattern = f"{_ISO_SECONDS[1]}.{_ISO_FRACTIONS[text[len(head) : len(head) + 2]]}{quoted}"
            return _fn("date_format", node.this, exp.Literal.string(pattern))
    raise ctx.refuse(f"{node.sql(dialect='duckdb')}: only TO_ISO8601's format is translated")


def _date_diff(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's DATE_DIFF('day', a, b) of two dates (WEEK) is Spark's DATEDIFF(b, a)."""
    unit = node.args.get("unit")
    if unit is None or unit.name.lower() != "day":
        raise ctx.refuse(f"{node.sql(dialect='duckdb')} has no Spark translation here")
    return _fn("datediff", node.this, node.expression)


def _list_slice(node: exp.Expr, ctx: _Context) -> exp.Expr:
    """DuckDB's LIST_SLICE(l, 1, n) (SUBSTRING_INDEX) is Spark's SLICE(l, 1, n)."""
    args = node.expressions
    if len(args) != 3 or not (isinstance(args[1], exp.Literal) and args[1].this == "1"):
        raise ctx.refuse(f"{node.sql(dialect='duckdb')} has no Spark translation here")
    return _fn("slice", *args)


def _refused(what: str) -> Callable[[exp.Expr, _Context], exp.Expr]:
    def rule(node: exp.Expr, ctx: _Context) -> exp.Expr:
        raise ctx.refuse(f"{what} has no exact Spark translation")

    return rule


_RULES: dict[type[exp.Expr], Callable[[exp.Expr, _Context], exp.Expr]] = {
    exp.Add: _arith("try_add"),
    exp.Sub: _arith("try_subtract"),
    exp.Mul: _arith("try_multiply"),
    exp.Neg: _neg,
    exp.Div: _div,
    exp.Mod: _mod,
    exp.Abs: _abs,
    exp.Ln: _ln,
    exp.Log: _log,
    exp.TryCast: _try_cast,
    exp.Cast: _cast_rule,
    exp.Ceil: _ceil_floor,
    exp.Floor: _ceil_floor,
    exp.Sign: _sign,
    exp.Round: _round,
    exp.Substring: _substring,
    exp.BitwiseNot: _bitwise_not,
    exp.IntDiv: _int_div,
    exp.UnixToTime: _unix_to_time,
    exp.DayOfWeek: _day_of_week,
    exp.DayOfWeekIso: _iso_day_of_week,
    exp.BitwiseLeftShift: _refused("<<"),
    exp.BitwiseRightShift: _refused(">>"),
    exp.TimeToStr: _time_to_str,
    exp.DateDiff: _date_diff,
}


# --- the outer SELECT ----------------------------------------------------------------


def _finish(tree: exp.Select, output: pa.Schema, relation: str, extra: dict[str, str]) -> None:
    """Read `relation`; each output column in the Spark type of its topic type."""
    tree.set("from_", exp.From(this=exp.to_table(f"`{relation}`", dialect="spark")))
    for item, field in zip(tree.expressions, output, strict=True):
        if not isinstance(item, exp.Alias):
            raise BackfillUnsupported(f"output column {field.name!r} is not named")
        item.set("this", _cast(item.this, spark_sql_type(field.type)))
    for name, column in extra.items():
        tree.select(exp.alias_(exp.column(column, quoted=True), name, quoted=True), copy=False)
