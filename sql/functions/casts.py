"""CAST(expr AS type) with TDengine's meaning (castFunction in
source/libs/scalar/src/sclfunc.c): C conversions, not DuckDB's.

* to an integer type: a number is truncated toward zero and wrapped to the type's width
  (C's conversion: `CAST(12.6 AS INT)` = 12, `CAST(300 AS TINYINT)` = 44, `CAST(-1 AS INT
  UNSIGNED)` = 4294967295); a timestamp is its ticks; a string is read as C's
  strtol reads it (leading blanks, a sign, digits; `'abc'` is 0, `'12.5'` is 12). A
  FLOAT/DOUBLE that is NaN or beyond BIGINT's range is NULL (C leaves it undefined);
* to FLOAT/DOUBLE: a string is read as C's strtod reads it (a hexadecimal one is NULL);
* to TIMESTAMP: an integer or a number truncated is ticks of the database precision;
* to BINARY(n)/VARCHAR(n): an integer in decimal, a FLOAT/DOUBLE with `%f` (six
  decimals), a timestamp as its ticks, a BOOL as 'true'/'false'; cut to n bytes;
* to NCHAR(n): the same text cut to n characters (a non-ASCII string longer than n bytes
  is NULL: TDengine cuts a BINARY at n bytes and an NCHAR at n characters, which
  sqltopic cannot tell apart); a BINARY(n) cut inside a UTF-8 character is NULL.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp
from sqlglot.expressions import DType

from sqltopic.sql.functions.base import (
    Call,
    cast,
    is_integer,
    is_number,
    is_string,
    is_timestamp,
    string_literal,
    template,
)
from sqltopic.sql.functions.ticks import from_ticks, number, to_ticks
from sqltopic.sql.values import parse_datetime

T = DType
# Integer targets: (bits, signed, DuckDB name).
_INTEGERS: dict[DType, tuple[int, bool, str]] = {
    T.TINYINT: (8, True, "TINYINT"), T.SMALLINT: (16, True, "SMALLINT"),
    T.INT: (32, True, "INTEGER"), T.BIGINT: (64, True, "BIGINT"),
    T.UTINYINT: (8, False, "UTINYINT"), T.USMALLINT: (16, False, "USMALLINT"),
    T.UINT: (32, False, "UINTEGER"), T.UBIGINT: (64, False, "UBIGINT"),
}  # fmt: skip
_STRINGS = frozenset({T.BINARY, T.VARBINARY, T.CHAR, T.VARCHAR, T.TEXT})
_NCHARS = frozenset({T.NCHAR, T.NVARCHAR})
_TIMESTAMPS = frozenset(
    {T.TIMESTAMP, T.TIMESTAMPNTZ, T.TIMESTAMP_MS, T.TIMESTAMP_NS, T.TIMESTAMP_S}
)
# DuckDB's timestamp type of each database precision.
_TIMESTAMP_TYPES = {"ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}
_REALS = {T.FLOAT: "FLOAT", T.DOUBLE: "DOUBLE"}
# C's strtol: leading white space, an optional sign, decimal digits.
_STRTOL = r"^[ \t\n\v\f\r]*([+-]?[0-9]+)"
# C's strtod (decimal form; inf/nan DuckDB reads alike); a hexadecimal float is not read.
_STRTOD = (
    r"^[ \t\n\v\f\r]*([+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"
    r"|[+-]?(?i:inf|infinity|nan))"
)
_HEX_FLOAT = r"^[ \t\n\v\f\r]*[+-]?0[xX]"
# The int64 range C converts a truncated FLOAT/DOUBLE within (beyond it: undefined).
_INT64_MIN = -(2**63)
_UINT64_END = 2**64


def cast_(call: Call) -> exp.Expr:
    node = call.node
    to = node.args.get("to")
    if not isinstance(to, exp.DataType):
        call.refuse("unknown target type")
    src = call.type(0)
    x = call.args[0]
    if src is not None and pa.types.is_null(src):
        return node  # CAST(NULL AS t): NULL
    if src is None:
        call.refuse("cannot tell the type of the argument; CAST a column or a constant")
    kind = to.this
    plain = _plain(src, kind, _length(call, to) if kind in _STRINGS | _NCHARS else None)
    if plain is not None:  # DuckDB's CAST means C's here: the call stays a plain CAST
        node.set("to", exp.DataType.build(plain, dialect="duckdb"))
        return node
    if kind in _INTEGERS:
        return _to_integer(call, x, src, kind)
    if kind == T.BOOLEAN:
        return exp.NEQ(this=_to_integer(call, x, src, T.TINYINT), expression=number(0))
    if kind in _REALS:
        return _to_real(call, x, src, _REALS[kind])
    if kind in _TIMESTAMPS:
        return _to_timestamp(call, x, src)
    if kind in _STRINGS or kind in _NCHARS:
        return _to_string(call, x, src, _length(call, to), kind in _NCHARS)
    return call.refuse(
        f"CAST to {to.sql(dialect='duckdb')} is not supported; cast to an integer type, "
        "FLOAT, DOUBLE, BOOL, TIMESTAMP, BINARY(n), VARCHAR(n) or NCHAR(n)"
    )


# The longest decimal text of an integer of each width ('-9223372036854775808').
_DIGITS = {8: 4, 16: 6, 32: 11, 64: 20}


def _plain(src: pa.DataType, kind: DType, length: int | None) -> str | None:
    """The DuckDB type when DuckDB's CAST gives C's answer for every value of `src`."""
    if kind in _INTEGERS and is_integer(src) and _fits(src, *_INTEGERS[kind][:2]):
        return _INTEGERS[kind][2]
    if kind in _INTEGERS and pa.types.is_boolean(src):  # 0 or 1
        return _INTEGERS[kind][2]
    if kind == T.DOUBLE and (is_integer(src) or pa.types.is_floating(src)):
        return "DOUBLE"
    if kind == T.FLOAT and pa.types.is_floating(src) and src.bit_width == 32:
        return "FLOAT"
    if kind in _TIMESTAMPS and is_timestamp(src):
        return None
    text = kind in _STRINGS or kind in _NCHARS
    if text and is_string(src) and length is None:
        return "VARCHAR"
    if text and is_integer(src) and (length is None or length >= _DIGITS[src.bit_width]):
        return "VARCHAR"
    return None


def _length(call: Call, to: exp.DataType) -> int | None:
    params = to.expressions
    if not params:
        return None
    value = params[0].this
    if not (isinstance(value, exp.Literal) and value.is_int and int(value.this) > 0):
        call.refuse("the length of a string type must be a positive integer", to)
    return int(value.this)


def _hugeint(call: Call, x: exp.Expr, src: pa.DataType, bits: int, signed: bool) -> exp.Expr:
    """The value as a HUGEINT before the C conversion wraps it to `bits`."""
    if is_integer(src) or pa.types.is_boolean(src):
        return cast(x, "HUGEINT")
    if is_timestamp(src):
        return cast(to_ticks(x, call.ctx.precision), "HUGEINT")
    if is_number(src):
        end = _UINT64_END if not signed else 2**63
        return template(
            f"CASE WHEN t >= {_INT64_MIN}::DOUBLE AND t < {end}::DOUBLE "
            "THEN TRY_CAST(t AS HUGEINT) END",
            t=exp.Anonymous(this="trunc", expressions=[cast(x, "DOUBLE")]),
        )
    if is_string(src):
        digits = exp.Anonymous(
            this="regexp_extract",
            expressions=[x, exp.Literal.string(_STRTOL), exp.Literal.number(1)],
        )
        if signed:  # strtol saturates at the int64 bounds
            sat = f"CASE WHEN d LIKE '-%' THEN {_INT64_MIN} ELSE {2**63 - 1} END"
            clamp = (
                f"CASE WHEN v < {_INT64_MIN}::HUGEINT THEN {_INT64_MIN}::HUGEINT "
                f"WHEN v > {2**63 - 1}::HUGEINT THEN {2**63 - 1}::HUGEINT ELSE v END"
            )
        else:  # strtoul: ULONG_MAX when the magnitude overflows, else negated modulo 2^64
            sat = f"{_UINT64_END - 1}"
            top = f"{_UINT64_END - 1}::HUGEINT"
            clamp = f"CASE WHEN abs(v) > {top} THEN {top} ELSE v END"
        value = template(
            "CASE WHEN d IS NULL THEN NULL WHEN d = '' THEN 0::HUGEINT "
            f"ELSE coalesce(TRY_CAST(d AS HUGEINT), ({sat})::HUGEINT) END",
            d=digits,
        )
        return template(clamp, v=value)
    return call.refuse(f"cannot CAST a {src} value to an integer type")


def _to_integer(call: Call, x: exp.Expr, src: pa.DataType, kind: DType) -> exp.Expr:
    bits, signed, name = _INTEGERS[kind]
    if is_integer(src) and _fits(src, bits, signed):
        return cast(x, name)
    if pa.types.is_boolean(src):
        return cast(x, name)
    v = _hugeint(call, x, src, bits, signed)
    m = 2**bits
    wrapped = f"((v % {m}::HUGEINT) + {m}::HUGEINT) % {m}::HUGEINT"
    if signed:
        wrapped = f"CASE WHEN u >= {m // 2}::HUGEINT THEN u - {m}::HUGEINT ELSE u END"
        body = template(
            wrapped, u=template(f"((v % {m}::HUGEINT) + {m}::HUGEINT) % {m}::HUGEINT", v=v)
        )
    else:
        body = template(wrapped, v=v)
    return cast(body, name)


def _fits(src: pa.DataType, bits: int, signed: bool) -> bool:
    """Whether every value of the integer type `src` is one of the target's."""
    src_signed = pa.types.is_signed_integer(src)
    if src_signed and not signed:
        return False
    width = src.bit_width
    return bool(width < bits or (width == bits and src_signed == signed))


def _to_real(call: Call, x: exp.Expr, src: pa.DataType, name: str) -> exp.Expr:
    if is_timestamp(src):
        value = cast(to_ticks(x, call.ctx.precision), "DOUBLE")
    elif is_string(src):
        value = template(
            f"CASE WHEN regexp_matches(s, '{_HEX_FLOAT}') THEN NULL "
            f"WHEN regexp_extract(s, '{_STRTOD}', 1) = '' THEN 0::DOUBLE "
            f"ELSE CAST(regexp_extract(s, '{_STRTOD}', 1) AS DOUBLE) END",
            s=x,
        )
    elif is_number(src) or pa.types.is_boolean(src):
        value = cast(x, "DOUBLE")
    else:
        return call.refuse(f"cannot CAST a {src} value to {name}")
    if name == "DOUBLE":
        return value
    if pa.types.is_integer(src) or pa.types.is_boolean(src) or pa.types.is_float32(src):
        return cast(x, "FLOAT")
    # C rounds a DOUBLE beyond FLOAT's range to FLOAT_MAX or infinity (DuckDB fails)
    return template(
        "CASE WHEN abs(v) >= 3.4028235677973366e38 THEN sign(v) * 'inf'::FLOAT "
        "WHEN abs(v) > 3.4028234663852886e38 THEN sign(v) * 3.4028234663852886e38::FLOAT "
        "ELSE CAST(v AS FLOAT) END",
        v=value,
    )


def _to_timestamp(call: Call, x: exp.Expr, src: pa.DataType) -> exp.Expr:
    if is_timestamp(src):
        return x
    if is_string(src):
        text = string_literal(x)
        if text is None:
            call.refuse(
                "CAST of a string column to TIMESTAMP is not supported (TDengine's and "
                "DuckDB's date-time parsers accept different texts); compare the column "
                "with a date-time string, or use TO_UNIXTIMESTAMP on a literal"
            )
        try:
            ticks = parse_datetime(text.strip(), call.ctx.precision)
        except ValueError:
            ticks = 0  # TDengine: 0 for a string that is not a date-time
        return cast(
            from_ticks(number(ticks), call.ctx.precision), _TIMESTAMP_TYPES[call.ctx.precision]
        )
    value = _to_integer(call, x, src, T.BIGINT)
    return cast(from_ticks(value, call.ctx.precision), _TIMESTAMP_TYPES[call.ctx.precision])


def _to_string(
    call: Call, x: exp.Expr, src: pa.DataType, length: int | None, nchar: bool
) -> exp.Expr:
    if is_string(src):
        text: exp.Expr = x
    elif pa.types.is_boolean(src):
        text = template("CASE WHEN b THEN 'true' ELSE 'false' END", b=x)
    elif is_integer(src):
        text = cast(x, "VARCHAR")
    elif is_timestamp(src):
        text = cast(to_ticks(x, call.ctx.precision), "VARCHAR")
    elif is_number(src):
        text = exp.Anonymous(
            this="printf", expressions=[exp.Literal.string("%f"), cast(x, "DOUBLE")]
        )
    else:
        return call.refuse(f"cannot CAST a {src} value to a string")
    if length is None:
        return cast(text, "VARCHAR")
    n = number(length)
    if not is_string(src):  # ASCII: bytes are characters
        return exp.Anonymous(this="left", expressions=[text, n])
    if nchar:
        return template(
            "CASE WHEN strlen(s) <= n OR strlen(s) = length(s) THEN left(s, n) END", s=text, n=n
        )
    # NULL where n bytes end inside a character (TDengine's text would not be UTF-8)
    blob = template("encode(s)[1:n]", s=text, n=n)
    cut = exp.Anonymous(this="decode", expressions=[blob, exp.Literal.string("ignore")])
    return template(
        "CASE WHEN strlen(s) <= n THEN s WHEN strlen(c) = n THEN c END", s=text, c=cut, n=n
    )
