"""TDengine's mathematical functions that need more than DuckDB's namesake
(22-function.md, "Mathematical Functions")."""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from sqltopic.sql.functions.base import (
    Call,
    case,
    cast,
    int_literal,
    is_integer,
    is_null,
    is_number,
    is_string,
    is_timestamp,
    null_if_any_null,
    paren,
)
from sqltopic.sql.functions.ticks import fn, number

# DuckDB's names of the Arrow types a TRUNCATE result keeps.
_DUCKDB_TYPES: dict[pa.DataType, str] = {
    pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
    pa.uint8(): "UTINYINT", pa.uint16(): "USMALLINT", pa.uint32(): "UINTEGER",
    pa.uint64(): "UBIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
}  # fmt: skip
# 10**19 exceeds every 64-bit integer: truncating an integer there leaves 0.
_INT_DIGITS = 19


def extreme(call: Call) -> exp.Expr:
    """GREATEST / LEAST: NULL when any argument is NULL (DuckDB's skip NULLs); numbers
    compare as numbers, strings as strings, timestamps as timestamps."""
    if len(call.args) < 2:
        call.refuse("needs at least 2 arguments")
    types = [call.type(i) for i in range(len(call.args))]
    # an argument of unknown type (a CTE's column in a SELECT) is left to DuckDB
    kinds = {_kind(t) for t, a in zip(types, call.args, strict=True) if t is not None}
    if len(kinds - {"null"}) > 1 or None in kinds:
        call.refuse(
            "mixes argument types; TDengine compares mixed strings and numbers as strings, "
            "which sqltopic does not do exactly: CAST the arguments to one type"
        )
    cls = exp.Greatest if call.name == "greatest" else exp.Least
    first, *rest = (a.copy() for a in call.args)
    return null_if_any_null(list(call.args), cls(this=first, expressions=rest, ignore_nulls=True))


def _kind(dtype: pa.DataType | None) -> str | None:
    if dtype is not None and pa.types.is_null(dtype):
        return "null"
    if is_number(dtype) or (dtype is not None and pa.types.is_boolean(dtype)):
        return "number"
    if is_string(dtype):
        return "string"
    return "timestamp" if is_timestamp(dtype) else None


def truncate(call: Call) -> exp.Expr:
    """TRUNCATE(expr, digits): toward zero, no rounding; the type of `expr`. An integer
    keeps its value for digits >= 0 and drops the last -digits digits otherwise; a float
    is computed in DOUBLE as trunc(x * 10^digits) / 10^digits."""
    x, digits_node = call.args
    if is_null(x) or is_null(digits_node):
        return exp.Null()
    digits = int_literal(digits_node)
    if digits is None:
        call.refuse("digits must be an integer constant", digits_node)
    dtype = call.type(0)
    if is_integer(dtype):
        return _truncate_integer(x, digits, dtype)
    if dtype is not None and pa.types.is_decimal(dtype):
        dtype = pa.float64()  # a decimal literal: TDengine's DOUBLE (see `translate`)
    if dtype is None or not pa.types.is_floating(dtype):
        call.refuse("expects a number", x)
    scale = exp.Literal.number(repr(10.0**digits))
    scaled = exp.Mul(this=cast(x, "DOUBLE"), expression=scale)
    whole = case(
        [(exp.GTE(this=scaled, expression=number(0)), exp.Floor(this=scaled.copy()))],
        exp.Ceil(this=scaled.copy()),
    )
    result = exp.Div(this=paren(whole), expression=scale.copy())
    return cast(result, _DUCKDB_TYPES[dtype])


def _truncate_integer(x: exp.Expr, digits: int, dtype: pa.DataType) -> exp.Expr:
    if digits >= 0:
        return x
    if -digits >= _INT_DIGITS:
        return case(
            [(exp.Is(this=paren(x), expression=exp.Null()), exp.Null())],
            cast(number(0), _DUCKDB_TYPES[dtype]),
        )
    step = number(10**-digits)
    dropped = exp.Sub(
        this=paren(x), expression=paren(exp.Mod(this=paren(x.copy()), expression=step))
    )
    return cast(dropped, _DUCKDB_TYPES[dtype])


def finite(value: exp.Expr) -> exp.Expr:
    """`value`, NULL where it is NaN or infinite: TDengine's doScalarFunctionUnique (and
    ...Unique2) set NULL when `isinf(result) || isnan(result)` (sclfunc.c). `v - v = 0`
    holds exactly for the finite doubles, in DuckDB and in Spark alike."""
    again = exp.Sub(this=paren(value.copy()), expression=paren(value.copy()))
    return case([(exp.EQ(this=again, expression=number(0)), value)])


def real(call: Call) -> exp.Expr:
    """A DOUBLE function of DuckDB's with TDengine's meaning but for NaN and infinity
    (ACOS(2), SQRT(-1), EXP(1000)): NULL there, as TDengine."""
    return finite(call.node.copy())


def ln(call: Call) -> exp.Expr:
    """LN: NULL when expr <= 0 (22-function.md, LN), or the result is infinite."""
    x = call.args[0]
    return case([(exp.GT(this=paren(x), expression=number(0)), finite(exp.Ln(this=x.copy())))])


def log(call: Call) -> exp.Expr:
    """TDengine LOG(x) is ln(x) and LOG(x, b) the log base b (DuckDB's LOG(b, x)); NULL
    where that is NaN or infinite (log of 0, of a negative, base 1)."""
    x = call.args[0]
    if len(call.args) == 1:
        return finite(exp.Ln(this=x))
    return finite(exp.Log(this=call.args[1], expression=x))


def rand(call: Call) -> exp.Expr:
    """RAND() in an ad hoc SELECT; never in a topic (a topic's rows are a function of the
    rows written), never with a seed (TDengine's generator is not DuckDB's)."""
    if call.ctx.in_topic:
        call.refuse(
            "is not allowed in a topic: its rows must be a function of the rows written, "
            "and a random number is not; compute it in the consumer"
        )
    if call.args:
        call.refuse("a seed is not supported (TDengine's generator is not DuckDB's); use RAND()")
    return fn("random")
