"""TDengine's scalar functions, one row each, as its SQL reference lists them
(docs/en/14-reference/03-taos-sql/22-function.md in taosdata/TDengine, "Single Row
Functions", plus the conditional functions): how sqltopic evaluates each, or why it
refuses it. docs/sql.md §9.1 shows this table to users."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sqltopic.sql.functions import casts, numbers, strings, times, weeks
from sqltopic.sql.functions.base import Builder, Call

# How many arguments "any number of" allows: TDengine caps CHAR at 2^31 - 1.
MANY_ARGS = 2**31 - 1


def same(call: Call) -> exp.Expr:
    """DuckDB's namesake has TDengine's meaning: the call stays as written."""
    return call.node


@dataclass(frozen=True, slots=True)
class Spec:
    """One function: its arguments as TDengine documents them, its meaning, and how it is
    evaluated (`build`), or why it is refused (`refused`: what, why, what to do)."""

    args: str
    meaning: str
    build: Builder | None = None
    min_args: int = 1
    max_args: int = 1
    refused: str = ""
    spark: str = ""  # non-empty: why the Spark backfill refuses it


def _refused(args: str, meaning: str, why: str) -> Spec:
    return Spec(args, meaning, refused=why, min_args=0, max_args=MANY_ARGS)


FUNCTIONS: dict[str, Spec] = {
    # --- mathematical ---
    "abs": Spec("(expr)", "absolute value, type of expr", same),
    "acos": Spec("(expr)", "arc cosine, DOUBLE; NULL where NaN or infinite", numbers.real),
    "asin": Spec("(expr)", "arc sine, DOUBLE; NULL where NaN or infinite", numbers.real),
    "atan": Spec("(expr)", "arc tangent, DOUBLE; NULL where NaN or infinite", numbers.real),
    "ceil": Spec("(expr)", "smallest integer value not below expr, type of expr", same),
    "cos": Spec("(expr)", "cosine, DOUBLE; NULL where NaN or infinite", numbers.real),
    "floor": Spec("(expr)", "largest integer value not above expr, type of expr", same),
    "greatest": Spec(
        "(expr1, expr2, ...)",
        "largest argument; NULL when any is NULL",
        numbers.extreme,
        2,
        MANY_ARGS,
    ),
    "least": Spec(
        "(expr1, expr2, ...)",
        "smallest argument; NULL when any is NULL",
        numbers.extreme,
        2,
        MANY_ARGS,
    ),
    "log": Spec(
        "(expr [, base])",
        "natural log, or log base `base`, DOUBLE; NULL where NaN or infinite",
        numbers.log,
        1,
        2,
    ),
    "pow": Spec(
        "(expr1, expr2)",
        "expr1 to the power expr2, DOUBLE; NULL where NaN or infinite",
        numbers.real,
        2,
        2,
    ),
    "power": Spec("(expr1, expr2)", "as POW", numbers.real, 2, 2),
    "round": Spec("(expr [, digits])", "rounded half away from zero (DuckDB's ROUND)", same, 1, 2),
    "sin": Spec("(expr)", "sine, DOUBLE; NULL where NaN or infinite", numbers.real),
    "sqrt": Spec("(expr)", "square root, DOUBLE; NULL where NaN or infinite", numbers.real),
    "tan": Spec("(expr)", "tangent, DOUBLE; NULL where NaN or infinite", numbers.real),
    "pi": Spec("()", "π, DOUBLE", same, 0, 0),
    "truncate": Spec(
        "(expr, digits)",
        "expr cut toward zero at `digits` decimal places (digits < 0: left of the point), "
        "type of expr",
        numbers.truncate,
        2,
        2,
    ),
    "exp": Spec("(expr)", "e to the power expr, DOUBLE; NULL where NaN or infinite", numbers.real),
    "ln": Spec("(expr)", "natural log; NULL when expr <= 0", numbers.ln),
    "mod": Spec(
        "(expr1, expr2)",
        "remainder of expr1 / expr2, sign of expr1 (as `%`); NULL when expr2 is 0",
        same,
        2,
        2,
    ),
    "rand": Spec(
        "([seed])",
        "uniform random number in [0, 1): ad hoc SELECT only, without a seed",
        numbers.rand,
        0,
        1,
        spark="a random number differs between runs",
    ),
    "sign": Spec("(expr)", "-1, 0 or 1, as TINYINT", same),
    "degrees": Spec(
        "(expr)", "radians to degrees, DOUBLE; NULL where NaN or infinite", numbers.real
    ),
    "radians": Spec(
        "(expr)", "degrees to radians, DOUBLE; NULL where NaN or infinite", numbers.real
    ),
    "crc32": _refused(
        "(expr)",
        "CRC-32 of expr as text",
        "DuckDB has no CRC-32 function, so sqltopic cannot evaluate it; compute it in the consumer",
    ),
    # --- string ---
    "char_length": Spec("(expr)", "length in characters, BIGINT", strings.char_length),
    "concat": Spec(
        "(expr1, expr2, ...)",
        "concatenation of 2 to 8 strings; NULL when any is NULL",
        strings.concat,
        2,
        8,
    ),
    "concat_ws": Spec(
        "(sep, expr1, expr2, ...)",
        "concatenation with a separator, 3 to 9 arguments; NULL when any is NULL",
        strings.concat_ws,
        3,
        9,
    ),
    "length": Spec(
        "(expr)",
        "length in bytes, BIGINT: UTF-8 of a VARCHAR, 4 a character of an NCHAR column",
        strings.byte_length,
    ),
    "lower": Spec("(expr)", "lower case", same),
    "ltrim": Spec("(expr)", "without leading spaces", same),
    "rtrim": Spec("(expr)", "without trailing spaces", same),
    "trim": Spec(
        "([{LEADING|TRAILING|BOTH} [remstr] FROM] expr)",
        "without leading/trailing spaces, or repeats of remstr (a literal) as a whole",
        strings.trim,
        1,
        2,
    ),
    "substring": Spec(
        "(expr, pos [, len])",
        "len characters from character pos (1-based; pos < 0 from the right); "
        "'' for pos 0 or len < 1",
        strings.substring,
        2,
        3,
    ),
    "substr": Spec("(expr, pos [, len])", "as SUBSTRING", strings.substring, 2, 3),
    "substring_index": Spec(
        "(expr, delim, count)",
        "expr up to the count-th delim (count < 0: after the -count-th from the right); "
        "delim a literal, count a constant",
        strings.substring_index,
        3,
        3,
    ),
    "upper": Spec("(expr)", "upper case", same),
    "char": Spec(
        "(expr1, ...)",
        "the bytes of each integer as characters (CHAR(77, 77) = 'MM'); NULL skipped; "
        "NULL when a byte is not ASCII",
        strings.char,
        1,
        MANY_ARGS,
    ),
    "ascii": Spec("(expr)", "first byte of expr, BIGINT", strings.ascii_),
    "position": Spec(
        "(expr1 IN expr2)", "1-based character position of expr1 in expr2, 0 if absent", same, 2, 2
    ),
    "replace": Spec("(expr, from, to)", "every from replaced by to", same, 3, 3),
    "repeat": Spec(
        "(expr, count)",
        "expr repeated count times; '' when count < 1; count an integer literal <= 65517",
        strings.repeat,
        2,
        2,
    ),
    "to_base64": Spec("(expr)", "base64 of the UTF-8 bytes", strings.to_base64),
    # --- conversion ---
    "cast": Spec(
        "(expr AS type)",
        "C's conversion: numbers truncated and wrapped to integer types, '%f' and ticks "
        "as strings, strings read as strtol/strtod do, BINARY(n) cut to n bytes; "
        "see §9.1.1",
        casts.cast_,
        spark="this conversion is C's (truncating, wrapping, '%f', strtol), not Spark's; "
        "only a CAST DuckDB and Spark already give C's answer for (to DOUBLE, to a wider "
        "integer type) is backfilled",
    ),
    "to_iso8601": Spec(
        "(expr [, timezone])",
        "ISO 8601 text of a timestamp: 'YYYY-MM-DDTHH:MM:SS.fff' and the zone as given "
        "('+0000' without one)",
        times.to_iso8601,
        1,
        2,
    ),
    "to_json": _refused("(str)", "a JSON value", "sqltopic has no JSON type"),
    "to_unixtimestamp": Spec(
        "(str [, 0|1])",
        "a date-time string literal as integer ticks (0) or TIMESTAMP (1)",
        times.to_unixtimestamp,
        1,
        2,
    ),
    "to_char": _refused(
        "(ts, format)",
        "a timestamp formatted",
        "its format language is not implemented; use TO_ISO8601",
    ),
    "to_timestamp": _refused(
        "(str, format)",
        "a string parsed with a format",
        "its format language is not implemented; compare with a date-time string, "
        "or use TO_UNIXTIMESTAMP",
    ),
    # --- time and date ---
    "now": Spec("() or NOW", "the time of the read, in the database precision", times.now, 0, 0),
    "today": Spec(
        "()", "UTC midnight of the day of the read, in the database precision", times.today, 0, 0
    ),
    "timediff": Spec(
        "(expr1, expr2 [, time_unit])",
        "(expr1 - expr2) in time_unit (1b..1w; default the precision), truncated toward "
        "zero, BIGINT",
        times.timediff,
        2,
        3,
    ),
    "timetruncate": Spec(
        "(expr, time_unit [, use_current_timezone])",
        "expr truncated to time_unit (1b..1w) toward zero; 1d and 1w from the epoch in UTC",
        times.timetruncate,
        2,
        3,
    ),
    "timezone": Spec("()", "the server's time zone: 'UTC (UTC, +0000)'", times.timezone, 0, 0),
    "week": Spec(
        "(expr [, mode])",
        "week of the year in one of the 8 modes of 22-function.md's table (0 when omitted), BIGINT",
        weeks.week,
        1,
        2,
    ),
    "weekofyear": Spec("(expr)", "ISO week of the year (WEEK(expr, 3)), BIGINT", times.weekofyear),
    "weekday": Spec("(expr)", "0 = Monday ... 6 = Sunday, BIGINT", times.weekday),
    "dayofweek": Spec("(expr)", "1 = Sunday ... 7 = Saturday, BIGINT", times.dayofweek),
    # --- conditional ---
    "case": Spec("WHEN ... THEN ... END", "conditional value", same, 0, MANY_ARGS),
    "coalesce": Spec("(expr1, expr2, ...)", "first non-NULL argument", same, 1, MANY_ARGS),
    "if": Spec(
        "(cond, expr1, expr2)", "expr1 when cond, else expr2", same, 2, 3
    ),  # 2: a CASE branch
    "ifnull": Spec("(expr1, expr2)", "expr1 unless NULL, else expr2", same, 2, 2),
    "nvl": Spec("(expr1, expr2)", "as IFNULL", same, 2, 2),
    "nullif": Spec("(expr1, expr2)", "NULL when expr1 = expr2, else expr1", same, 2, 2),
}
