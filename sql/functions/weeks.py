"""WEEK: MySQL's week number in its 8 modes (22-function.md tabulates them), as MySQL's
calc_week computes it, in DuckDB SQL over the date of the timestamp."""

from __future__ import annotations

from sqlglot import exp

from sqltopic.sql.functions.base import Call, cast, int_literal, template
from sqltopic.sql.functions.times import moment


def week(call: Call) -> exp.Expr:
    """WEEK(expr [, mode]): MySQL's week number, whose 8 modes 22-function.md tabulates,
    as MySQL's calc_week computes it (mode 0 when omitted)."""
    mode = 0 if len(call.args) < 2 else int_literal(call.args[1])
    if mode is None or not 0 <= mode <= 7:
        call.refuse("mode must be an integer constant from 0 to 7", call.args[1])
    flags = mode if mode & _MONDAY_FIRST else mode ^ _FIRST_WEEKDAY
    first_weekday = bool(flags & _FIRST_WEEKDAY)
    monday_first, week_year = bool(flags & _MONDAY_FIRST), bool(flags & _WEEK_YEAR)
    day = exp.Cast(this=moment(call), to=exp.DataType.build("DATE"))
    jan1 = "make_date(year(d), 1, 1)"
    w0 = f"isodow({jan1}) - 1" if monday_first else f"isodow({jan1}) % 7"
    # a year starts a week of its own when its first day is the first weekday, or (ISO-like
    # modes) when that week has 4 days or more of it
    starts = "w <> 0" if first_weekday else "w >= 4"
    in_january = f"month(d) = 1 AND day(d) <= 7 - ({w0})"
    prev_days = "date_diff('day', make_date(year(d) - 1, 1, 1), make_date(year(d), 1, 1))"
    this_year = _week_days(starts, f"date_diff('day', {jan1}, d)", w0)
    last_year = _week_days(
        starts,
        "date_diff('day', make_date(year(d) - 1, 1, 1), d)",
        f"(({w0}) + 371 - {prev_days}) % 7",
    )
    year_days = "date_diff('day', make_date(year(d), 1, 1), make_date(year(d) + 1, 1, 1))"
    spill = "w < 4" if not first_weekday else "w = 0"
    # a date late in December may be in week 1 of the next year (week_year modes); a
    # date early in January counts in last year's weeks, whose weekday is then `w0` again
    next_week1 = _week_of(spill, f"(({w0}) + {year_days}) % 7")
    sql = "CASE "
    if not week_year:
        sql += f"WHEN ({in_january}) AND {_week_of(starts, w0)} THEN 0 "
    sql += f"WHEN {in_january} THEN CASE WHEN ({last_year}) >= 364 AND {_week_of(spill, w0)} "
    sql += f"THEN 1 ELSE ({last_year}) // 7 + 1 END "
    if week_year:
        sql += f"WHEN ({this_year}) >= 364 AND {next_week1} THEN 1 "
    sql += f"ELSE ({this_year}) // 7 + 1 END"
    return cast(template(sql, d=day), "BIGINT")


# MySQL's week mode flags (sql-common/my_time.cc, calc_week).
_MONDAY_FIRST, _WEEK_YEAR, _FIRST_WEEKDAY = 1, 2, 4


def _week_of(condition: str, weekday: str) -> str:
    """`condition` about a weekday `w`, for the weekday expression given."""
    return "(" + condition.replace("w", f"({weekday})") + ")"


def _week_days(starts: str, days: str, weekday: str) -> str:
    """MySQL's `days`: from the start of week 1 to the date."""
    first = _week_of(starts, weekday)
    return f"CASE WHEN {first} THEN {days} - (7 - ({weekday})) ELSE {days} + ({weekday}) END"
