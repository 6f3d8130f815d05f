"""TDengine's time and date functions (22-function.md, "Time and Date Functions" and
TO_ISO8601 / TO_UNIXTIMESTAMP), as DuckDB expressions over ticks (see `ticks`).

Their arguments are TIMESTAMP values, BIGINT ticks, or date-time strings. A string
literal is read here, once (UTC unless it names an offset; NULL when it is not a
date-time, as TDengine returns NULL); a string column is refused: TDengine's date-time
parser and DuckDB's accept different texts, so the result would not be exact.
The integer arithmetic follows TDengine's C code (source/libs/scalar/src/sclfunc.c):
`timeVal / timeUnit * timeUnit`, `(t1 - t2) / timeUnit`, `timeVal % 1000`, all with C's
truncation toward zero.
"""

from __future__ import annotations

import re

from sqlglot import exp

from sqltopic.sql.functions.base import (
    Call,
    case,
    cast,
    int_literal,
    is_integer,
    is_null,
    is_string,
    is_timestamp,
    paren,
    string_literal,
)
from sqltopic.sql.functions.ticks import (
    Duration,
    duration_ns,
    fn,
    from_ticks,
    in_ticks,
    now_ticks,
    number,
    to_ticks,
    today_ticks,
)
from sqltopic.sql.values import FRACTION_DIGITS, TICKS_PER_SECOND, parse_datetime

# TO_ISO8601's time zone argument: z/Z, ±hh, ±hhmm, ±hh:mm (22-function.md, TO_ISO8601).
_ZONE = re.compile(r"(?P<z>[zZ])|(?P<sign>[-+])(?P<h>\d{2})(?::?(?P<m>\d{2}))?")
# Largest offset accepted: the world's time zones span -12:00..+14:00.
_MAX_ZONE_HOURS = 14
# What TO_ISO8601 appends without a time zone argument: TDengine adds the client's zone
# as strftime's %z; the server's zone is UTC.
UTC_SUFFIX = "+0000"
# TIMEZONE(): TDengine's form is "<name> (<abbreviation>, <%z>)"; the server runs in UTC.
TIMEZONE_TEXT = "UTC (UTC, +0000)"


def now(call: Call) -> exp.Expr:
    _no_args(call)
    return from_ticks(now_ticks(call.ctx.precision), call.ctx.precision)


def today(call: Call) -> exp.Expr:
    _no_args(call)
    return from_ticks(today_ticks(call.ctx.precision), call.ctx.precision)


def timezone(call: Call) -> exp.Expr:
    _no_args(call)
    return exp.Literal.string(TIMEZONE_TEXT)


def _no_args(call: Call) -> None:
    if call.args:
        call.refuse("takes no arguments")


def unit_ticks(call: Call, node: exp.Expr, *, what: str = "time unit") -> int:
    """A time unit argument (`1s`, `1d`, ...) in ticks of the database precision."""
    if not isinstance(node, Duration) or node.amount != 1:
        call.refuse(f"the {what} must be one of 1b, 1u, 1a, 1s, 1m, 1h, 1d, 1w", node)
    ticks = in_ticks(duration_ns(node), call.ctx.precision)
    if ticks is None:
        call.refuse(
            f"the {what} {node.amount}{node.unit} is finer than the database precision "
            f"({call.ctx.precision}); use a unit of at least one tick",
            node,
        )
    return ticks


def ticks_of(call: Call, index: int) -> exp.Expr:
    """Argument `index` (a timestamp, integer ticks or a date-time string literal) as ticks."""
    node = call.args[index]
    if is_null(node):
        return exp.Null()
    text = string_literal(node)
    if text is not None:
        try:
            return number(parse_datetime(text.strip(), call.ctx.precision))
        except ValueError:
            return exp.Null()  # TDengine: NULL for a string that is not a date-time
    dtype = call.type(index)
    if is_timestamp(dtype):
        return to_ticks(node, call.ctx.precision)
    if is_integer(dtype):
        return cast(node, "BIGINT")
    if is_string(dtype):
        call.refuse(
            "a date-time string column is not supported (TDengine's and DuckDB's date-time "
            "parsers accept different texts); compare the column with a date-time string "
            "instead, or store it as a TIMESTAMP",
            node,
        )
    if dtype is None:
        return call.refuse("cannot tell the type of this argument; CAST it to TIMESTAMP", node)
    return call.refuse("expects a TIMESTAMP, an integer timestamp or a date-time string", node)


def timetruncate(call: Call) -> exp.Expr:
    """TIMETRUNCATE(expr, time_unit [, use_current_timezone]): `t / u * u` in C; with
    the server in UTC, both values of the third argument truncate alike."""
    if len(call.args) == 3 and int_literal(call.args[2]) not in (0, 1):
        call.refuse("use_current_timezone must be 0 or 1", call.args[2])
    unit = unit_ticks(call, call.args[1])
    t = ticks_of(call, 0)
    if isinstance(t, exp.Null):
        return cast(exp.Null(), _timestamp_type(call))
    truncated = exp.Sub(
        this=t, expression=paren(exp.Mod(this=paren(t.copy()), expression=number(unit)))
    )
    return from_ticks(truncated, call.ctx.precision)


def timediff(call: Call) -> exp.Expr:
    """TIMEDIFF(expr1, expr2 [, time_unit]): `(t1 - t2) / u` in C (BIGINT)."""
    unit = None
    if len(call.args) == 3 and not is_null(call.args[2]):
        unit = unit_ticks(call, call.args[2])
    diff: exp.Expr = exp.Sub(this=paren(ticks_of(call, 0)), expression=paren(ticks_of(call, 1)))
    if unit is not None and unit != 1:
        diff = exp.IntDiv(this=exp.Paren(this=diff), expression=number(unit))
    return cast(diff, "BIGINT")


def to_iso8601(call: Call) -> exp.Expr:
    """TO_ISO8601(expr [, timezone]) as TDengine's toISO8601Function writes it: the
    seconds `t / scale` shifted by the zone, formatted `%Y-%m-%dT%H:%M:%S`, then
    `".%03ld"` of `t % scale` (C: a negative remainder prints its sign, cut to the
    width), then the zone as written (`+0000` without one)."""
    precision = call.ctx.precision
    suffix, offset = _zone(call)
    t = ticks_of(call, 0)
    scale, digits = TICKS_PER_SECOND[precision], FRACTION_DIGITS[precision]
    seconds = exp.IntDiv(this=paren(t), expression=number(scale))
    local = exp.Add(this=seconds, expression=number(offset))
    stamp = fn(
        "strftime",
        fn("make_timestamp", exp.Mul(this=paren(local), expression=number(10**6))),
        exp.Literal.string("%Y-%m-%dT%H:%M:%S"),
    )
    rest = exp.Mod(this=paren(t.copy()), expression=number(scale))
    fraction = case(
        [(exp.GTE(this=rest, expression=number(0)), _pad(cast(rest.copy(), "VARCHAR"), digits))],
        exp.DPipe(
            this=exp.Literal.string("-"),
            expression=_pad(cast(exp.Neg(this=paren(rest.copy())), "VARCHAR"), digits - 1),
        ),
    )
    text = exp.DPipe(
        this=exp.DPipe(this=stamp, expression=exp.Literal.string(".")), expression=fraction
    )
    exact = exp.DPipe(this=text, expression=exp.Literal.string(suffix))
    fast = _iso8601_fast(call, offset, suffix)
    if fast is None:
        return exact
    # strftime directly on the timestamp (several times faster) where C's division and
    # DuckDB's agree: at or after 1970, where t / scale and t % scale are not negative
    after_epoch = exp.GTE(this=paren(call.args[0].copy()), expression=_EPOCH.copy())
    return case([(after_epoch, fast)], exact)


# The epoch, where TO_ISO8601's fast form starts to be exact.
_EPOCH = exp.Cast(this=exp.Literal.string("1970-01-01"), to=exp.DataType.build("TIMESTAMP"))
# DuckDB's strftime specifier of the fraction of a second in each precision.
# (Not "%n" for nanoseconds: DuckDB 2.0 writes NUL bytes for some values.)
_FRACTION_FORMAT = {"ms": "%g", "us": "%f"}


def _iso8601_fast(call: Call, offset: int, suffix: str) -> exp.Expr | None:
    """TO_ISO8601 of a timestamp at or after the epoch as one strftime, or None when the
    argument is not a timestamp, the precision is nanoseconds or a zone is given."""
    precision = call.ctx.precision
    if not is_timestamp(call.type(0)) or precision not in _FRACTION_FORMAT:
        return None
    if offset:
        return None  # (the Spark backfill has no form of DuckDB's interval arithmetic)
    ts = call.args[0].copy()
    fmt = exp.Literal.string(f"%Y-%m-%dT%H:%M:%S.{_FRACTION_FORMAT[precision]}{suffix}")
    return fn("strftime", ts, fmt)


def _pad(text: exp.Expr, width: int) -> exp.Expr:
    return exp.Pad(
        this=text, expression=number(width), fill_pattern=exp.Literal.string("0"), is_left=True
    )


def _zone(call: Call) -> tuple[str, int]:
    """TO_ISO8601's zone suffix and its offset east of UTC in seconds."""
    if len(call.args) < 2:
        return UTC_SUFFIX, 0
    text = string_literal(call.args[1])
    m = _ZONE.fullmatch(text) if text is not None else None
    if text is None or m is None:
        call.refuse(
            "the time zone must be a string literal: 'Z', '+hh', '+hhmm' or '+hh:mm'", call.args[1]
        )
    if m.group("z"):
        return text, 0
    hours, minutes = int(m.group("h")), int(m.group("m") or 0)
    if hours > _MAX_ZONE_HOURS or minutes > 59:
        call.refuse(f"time zone {text!r} is out of range", call.args[1])
    seconds = hours * 3600 + minutes * 60
    return text, seconds if m.group("sign") == "+" else -seconds


def to_unixtimestamp(call: Call) -> exp.Expr:
    """TO_UNIXTIMESTAMP(str [, return_timestamp]): a date-time string literal as ticks
    (BIGINT) or, with 1, a TIMESTAMP."""
    flag = 0 if len(call.args) < 2 else int_literal(call.args[1])
    if flag not in (0, 1):
        call.refuse("return_timestamp must be 0 or 1", call.args[1])
    if string_literal(call.args[0]) is None and not is_null(call.args[0]):
        call.refuse(
            "only a date-time string literal is supported (TDengine's and DuckDB's "
            "date-time parsers accept different texts)",
            call.args[0],
        )
    t = ticks_of(call, 0)
    if flag:
        return (
            cast(exp.Null(), _timestamp_type(call))
            if isinstance(t, exp.Null)
            else from_ticks(t, call.ctx.precision)
        )
    return cast(t, "BIGINT")


def _timestamp_type(call: Call) -> str:
    return {"ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}[call.ctx.precision]


def moment(call: Call) -> exp.Expr:
    """Argument 0 as a DuckDB timestamp for its calendar parts: of the precision (a
    timestamp as it is), or in a nanosecond database the microsecond at or before it.
    DuckDB rounds a TIMESTAMP_NS to microseconds for its date parts (2034-12-31
    23:59:59.9999995 would be a Monday in 2035); TDengine's calendar truncates."""
    if call.ctx.precision == "ns":
        return from_ticks(_floor_thousandth(ticks_of(call, 0)), "us")
    if is_timestamp(call.type(0)):
        return call.args[0]
    return from_ticks(ticks_of(call, 0), call.ctx.precision)


def _floor_thousandth(ticks: exp.Expr) -> exp.Expr:
    """`ticks` / 1000 rounded down, exactly (DuckDB's `//` truncates toward zero):
    (t - ((t % 1000 + 1000) % 1000)) // 1000."""
    thousand = number(1000)
    low = exp.Mod(
        this=paren(exp.Add(this=exp.Mod(this=ticks.copy(), expression=thousand.copy()),
                           expression=thousand.copy())),
        expression=thousand.copy(),
    )  # fmt: skip
    return exp.IntDiv(this=paren(exp.Sub(this=ticks, expression=paren(low))), expression=thousand)


def weekday(call: Call) -> exp.Expr:
    """WEEKDAY: 0 = Monday ... 6 = Sunday (ISO day of week minus one)."""
    return cast(exp.Sub(this=exp.DayOfWeekIso(this=moment(call)), expression=number(1)), "BIGINT")


def dayofweek(call: Call) -> exp.Expr:
    """DAYOFWEEK: 1 = Sunday ... 7 = Saturday (DuckDB's dayofweek is 0 = Sunday)."""
    return cast(exp.Add(this=exp.DayOfWeek(this=moment(call)), expression=number(1)), "BIGINT")


def weekofyear(call: Call) -> exp.Expr:
    """WEEKOFYEAR = WEEK(expr, 3): ISO 8601 weeks (Monday first, week 1 has 4+ days)."""
    return cast(exp.WeekOfYear(this=moment(call)), "BIGINT")
