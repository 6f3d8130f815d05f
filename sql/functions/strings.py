"""TDengine's string functions that need more than DuckDB's namesake (22-function.md,
"String Functions"; positions as TDengine's substrFunction and findPosBytes in
source/libs/scalar/src/sclfunc.c count them: in characters, 1-based)."""

from __future__ import annotations

import functools
import re

from sqlglot import exp

from sqltopic.sql.functions.base import (
    Call,
    case,
    cast,
    int_literal,
    is_integer,
    is_null,
    paren,
    string_literal,
)
from sqltopic.sql.functions.ticks import fn, number
from sqltopic.sql.types import MAX_STRING_LENGTH

# Bytes of a character of an NCHAR value in TDengine (UCS-4).
UCS4_BYTES = 4

# UTF-8 lead bytes: code points below each bound take the lead byte base + cp // divisor
# (ASCII returns the first byte of a multi-byte character, 22-function.md ASCII).
_LEAD_BYTES = ((128, 0, 1), (2048, 192, 64), (65536, 224, 4096))
_FOUR_BYTE_LEAD = (240, 262144)
_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}])")


def substring(call: Call) -> exp.Expr:
    """SUBSTRING(s, pos [, len]): pos 0 or len < 1 give ''; pos < 0 counts from the right
    (a start before the first character starts there); NULL when any argument is."""
    s, pos = call.args[0], call.args[1]
    length = call.args[2] if len(call.args) > 2 else None
    n = exp.Length(this=s.copy())
    # the 0-based start, compared without integer arithmetic in the conditions, so that
    # nothing there can overflow (the Spark translation needs that)
    from_left = case(
        [
            (
                exp.LTE(this=paren(pos.copy()), expression=n.copy()),
                exp.Sub(this=paren(pos.copy()), expression=number(1)),
            )
        ],
        n.copy(),
    )
    right = exp.Add(this=n.copy(), expression=paren(pos.copy()))
    inside = exp.GT(
        this=exp.Add(this=cast(n.copy(), "DOUBLE"), expression=paren(pos.copy())),
        expression=number(0),
    )
    from_right = case([(inside, right)], number(0))
    start = case([(exp.GT(this=paren(pos), expression=number(0)), from_left)], from_right)
    first = exp.Add(this=paren(start), expression=number(1))
    args = {"this": s.copy(), "start": first}
    empty: exp.Expr = exp.EQ(this=paren(pos.copy()), expression=number(0))
    if length is not None:
        args["length"] = length.copy()
        empty = exp.Or(
            this=empty, expression=exp.LT(this=paren(length.copy()), expression=number(1))
        )
    nulls: exp.Expr = exp.Or(
        this=exp.Is(this=paren(s.copy()), expression=exp.Null()),
        expression=exp.Is(this=paren(pos.copy()), expression=exp.Null()),
    )
    if length is not None:
        nulls = exp.Or(
            this=nulls, expression=exp.Is(this=paren(length.copy()), expression=exp.Null())
        )
    # NULL first: the start computed below is never NULL for a NULL pos
    return case([(nulls, exp.Null()), (empty, exp.Literal.string(""))], exp.Substring(**args))


def substring_index(call: Call) -> exp.Expr:
    """SUBSTRING_INDEX(s, delim, count): the part before the count-th delimiter from the
    left (count > 0) or after the -count-th from the right (count < 0), delimiters found
    without overlap in the direction of the search (TDengine's findPosBytes); '' for
    count 0 and for an empty delimiter."""
    s, delim, count = call.args
    if any(is_null(a) for a in call.args):
        return exp.Null()
    n = int_literal(count)
    if n is None:
        call.refuse("count must be an integer constant", count)
    if string_literal(delim) is None:  # DuckDB joins a list with a constant separator only
        call.refuse("the delimiter must be a string literal", delim)
    if n == 0:
        return case(
            [(exp.Is(this=paren(s), expression=exp.Null()), exp.Null())], exp.Literal.string("")
        )
    if n > 0:
        kept = _split_join(s.copy(), delim.copy(), n)
    else:
        rev = exp.Anonymous(this="reverse", expressions=[s.copy()])
        rdelim = exp.Anonymous(this="reverse", expressions=[delim.copy()])
        kept = exp.Anonymous(this="reverse", expressions=[_split_join(rev, rdelim, -n)])
    empty = exp.EQ(this=paren(delim.copy()), expression=exp.Literal.string(""))
    return case([(empty, exp.Literal.string(""))], kept)


def _split_join(s: exp.Expr, delim: exp.Expr, count: int) -> exp.Expr:
    parts = fn("list_slice", fn("string_split", s, delim), number(1), number(count))
    return fn("array_to_string", parts, delim.copy())


def trim(call: Call) -> exp.Expr:
    """TRIM([LEADING|TRAILING|BOTH] [remstr FROM] s): remstr removed as a whole, as often as
    it repeats ('ab' from 'abacd' is 'acd'); spaces without remstr."""
    node = call.node
    rem = node.args.get("expression")
    side = str(node.args.get("position") or "BOTH").upper()
    if rem is None:
        return node
    if is_null(rem):
        return exp.Null()
    text = string_literal(rem)
    if text is None:
        call.refuse("the string to remove must be a string literal", rem)
    out: exp.Expr = node.this
    if text == "":
        return out
    whole = "(?:" + _REGEX_SPECIAL.sub(r"\\\1", text) + ")+"
    if side in ("LEADING", "BOTH"):
        out = exp.RegexpReplace(
            this=out, expression=exp.Literal.string("^" + whole), replacement=exp.Literal.string("")
        )
    if side in ("TRAILING", "BOTH"):
        out = exp.RegexpReplace(
            this=out, expression=exp.Literal.string(whole + "$"), replacement=exp.Literal.string("")
        )
    return out


def ascii_(call: Call) -> exp.Expr:
    """ASCII: the first byte of the first character (DuckDB's ASCII is its code point)."""
    cp = exp.Ascii(this=call.args[0])
    whens: list[tuple[exp.Expr, exp.Expr]] = []
    for bound, base, divisor in _LEAD_BYTES:
        value = (
            cp.copy()
            if divisor == 1
            else exp.Add(
                this=number(base), expression=exp.IntDiv(this=cp.copy(), expression=number(divisor))
            )
        )
        whens.append((exp.LT(this=cp.copy(), expression=number(bound)), value))
    base, divisor = _FOUR_BYTE_LEAD
    last = exp.Add(
        this=number(base), expression=exp.IntDiv(this=cp.copy(), expression=number(divisor))
    )
    return cast(case(whens, last), "BIGINT")


def char(call: Call) -> exp.Expr:
    """CHAR(n, ...): each integer as its bytes, big-endian without leading zero bytes
    (CHAR(256) = CHAR(1, 0)); NULL arguments skipped. Only ASCII bytes make text: a byte
    of 128 or more (which TDengine returns raw, not UTF-8) or a negative n gives NULL."""
    pieces: list[exp.Expr] = []
    for i, arg in enumerate(call.args):
        if is_null(arg):
            continue
        if not is_integer(call.type(i)):
            call.refuse("expects integer arguments", arg)
        pieces.append(_char_bytes(cast(arg, "BIGINT")))
    if not pieces:
        return exp.Literal.string("")
    return functools.reduce(lambda a, b: exp.DPipe(this=a, expression=b), pieces)


def _char_bytes(n: exp.Expr) -> exp.Expr:
    """One CHAR argument: '' when NULL, NULL when not ASCII bytes."""
    ascii_only = exp.And(
        this=exp.Between(this=n.copy(), low=number(0), high=number(2**32 - 1)),
        expression=exp.EQ(
            this=exp.BitwiseAnd(this=n.copy(), expression=number(0x80808080)), expression=number(0)
        ),
    )
    text: exp.Expr = exp.Chr(
        expressions=[cast(exp.BitwiseAnd(this=n.copy(), expression=number(255)), "INTEGER")]
    )
    for k in (1, 2, 3):
        # n // 256^k, not n >> 8k: the same for the n >= 0 kept, and Spark has no exact >>
        shifted = paren(exp.IntDiv(this=n.copy(), expression=number(256**k)))
        byte = exp.Chr(
            expressions=[cast(exp.BitwiseAnd(this=shifted, expression=number(255)), "INTEGER")]
        )
        more = case(
            [(exp.GTE(this=n.copy(), expression=number(256**k)), byte)], exp.Literal.string("")
        )
        text = exp.DPipe(this=more, expression=text)
    return case(
        [(exp.Is(this=n.copy(), expression=exp.Null()), exp.Literal.string("")), (ascii_only, text)]
    )


def to_base64(call: Call) -> exp.Expr:
    """TO_BASE64 of the string's UTF-8 bytes."""
    return exp.ToBase64(this=exp.Encode(this=call.args[0], charset=exp.Literal.string("utf-8")))


def byte_length(call: Call) -> exp.Expr:
    """TDengine LENGTH counts bytes (DuckDB's LENGTH counts characters): UTF-8 bytes of a
    VARCHAR, 4 a character of an NCHAR (UCS-4: tests/system-test/2-query/length.py)."""
    arg = call.args[0]
    nchar = sorted({c.name.lower() for c in arg.find_all(exp.Column)} & call.ctx.nchar)
    if nchar and isinstance(arg, exp.Column):
        return exp.Mul(this=number(UCS4_BYTES), expression=cast(exp.Length(this=arg), "BIGINT"))
    if nchar:
        call.refuse(
            f"of an expression over the NCHAR column {nchar[0]}: TDengine counts an NCHAR "
            "result in 4-byte characters and a VARCHAR one in bytes, which sqltopic does "
            f"not tell apart here; use LENGTH({nchar[0]}) or CHAR_LENGTH",
            arg,
        )
    return exp.Anonymous(this="strlen", expressions=[arg])


def char_length(call: Call) -> exp.Expr:
    return exp.Length(this=call.args[0])


def concat(call: Call) -> exp.Expr:
    """TDengine CONCAT is NULL when any argument is (DuckDB's skips NULLs); `||` is too."""
    return _pipes([paren(a) for a in call.args])


def concat_ws(call: Call) -> exp.Expr:
    """CONCAT_WS(sep, a, b) as `a || sep || b`: NULL when any argument is, as TDengine."""
    sep, *args = (paren(a) for a in call.args)
    joined: list[exp.Expr] = []
    for arg in args:
        joined += [sep.copy(), arg] if joined else [arg]
    return _pipes(joined)


def _pipes(args: list[exp.Expr]) -> exp.Expr:
    return functools.reduce(lambda a, b: exp.DPipe(this=a, expression=b), args)


def repeat(call: Call) -> exp.Expr:
    """REPEAT(expr, count) with count an integer literal in 0..MAX_STRING_LENGTH: a result
    can never outgrow TDengine's longest string by more than expr's length times it (a
    count from a column could make one row exhaust a reader's memory)."""
    if not call.ctx.in_topic:
        return call.node  # ad hoc SELECT: the sandbox refuses REPEAT (§8)
    count = int_literal(call.args[1])
    if count is None or count > MAX_STRING_LENGTH:
        call.refuse(
            f"count must be an integer literal of at most {MAX_STRING_LENGTH} "
            "(TDengine's longest string), so that one row cannot exhaust memory",
            call.args[1],
        )
    return call.node
