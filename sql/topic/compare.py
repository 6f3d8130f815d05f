"""TDengine's implicit conversions in comparisons, translated for DuckDB: a timestamp
compares with an integer in the database precision or a date-time string (UTC unless it
names an offset), and a string compares with a number as a number (NULL when it is not)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from sqlglot import exp

from sqltopic.errors import SqlError
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.topic.probe import Probe, is_number, is_text
from sqltopic.sql.topic.text import Text
from sqltopic.sql.types import Precision

COMPARISONS: tuple[type[exp.Expr], ...] = (
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
)  # fmt: skip

_SCALE: dict[Precision, int] = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DIGITS: dict[Precision, int] = {"ms": 3, "us": 6, "ns": 9}
# DuckDB type of a timestamp literal: TIMESTAMP holds ms and us exactly, ns needs its own.
_TS_LITERAL: dict[Precision, str] = {"ms": "TIMESTAMP", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DATETIME = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?",
    re.IGNORECASE,
)


def coerce(node: exp.Expr, probe: Probe, precision: Precision, text: Text) -> None:
    """TDengine's implicit conversions in one comparison (BETWEEN, IN), by operand type."""
    operands = _operands(node)
    types = probe.types(operands, text, node)
    binary = isinstance(node, COMPARISONS)
    if binary and _is_literal(operands[0]) and pa.types.is_timestamp(types[1]):
        operands, types = operands[::-1], types[::-1]
    subject, kind = operands[0], types[0]
    if pa.types.is_timestamp(kind):
        for other in operands[1:]:
            if _is_literal(other):
                other.replace(_timestamp(other, precision, text))
    elif is_text(kind) and any(is_number(t) for t in types[1:]):
        subject.replace(_to_double(subject))
    elif is_number(kind):
        for other, other_type in zip(operands[1:], types[1:], strict=True):
            if is_text(other_type):
                other.replace(_to_double(other))


def _operands(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    if isinstance(node, exp.In):
        return [node.this, *node.expressions]
    return [node.this, node.args["expression"]]


def _is_literal(node: exp.Expr) -> bool:
    inner = node.this if isinstance(node, exp.Neg) else node
    return isinstance(inner, exp.Literal) and (inner is node or not inner.is_string)


def _to_double(node: exp.Expr) -> exp.Expr:
    """A string as a number for a comparison: NULL when it is not one (TDengine: 0)."""
    return exp.TryCast(this=node.copy(), to=exp.DataType.build("DOUBLE"))


def _timestamp(node: exp.Expr, precision: Precision, text: Text) -> exp.Expr:
    """A literal compared with a timestamp, as a DuckDB timestamp literal."""
    try:
        return timestamp_literal(node, precision)
    except SqlError as err:
        raise text.error(SqlError, err.message, node) from None


def timestamp_literal(node: exp.Expr, precision: Precision) -> exp.Expr:
    """A literal (integer in `precision`, or date-time string) compared with a timestamp,
    as a DuckDB timestamp literal; SqlError when it is neither or out of range."""
    value = _literal_epoch(node, precision)
    if value is None:
        raise SqlError(
            f"{node.sql(dialect=TDengine)} is not a timestamp: write an integer in the "
            f"database precision ({precision}) or a date-time 'YYYY-MM-DD HH:MM:SS[.fff][Z]'"
        )
    try:
        iso = _iso(value, precision)
    except (OverflowError, ValueError):
        raise SqlError(f"timestamp {value} is out of range") from None
    to = exp.DataType.build(_TS_LITERAL[precision], dialect="duckdb")
    return exp.Cast(this=exp.Literal.string(iso), to=to)


def coerce_timestamp_literals(tree: exp.Expr, timestamps: dict[str, Precision]) -> None:
    """In ad hoc SQL: literals compared (=, <, BETWEEN, IN, ...) with a column named in
    `timestamps` (lowercase name -> precision) become timestamp literals, as TDengine
    reads `ts > 1538548685000` and `ts > '2018-10-03 14:38:05'`."""
    for node in list(tree.find_all(*COMPARISONS, exp.Between, exp.In)):
        operands = _operands(node)
        if isinstance(node, COMPARISONS) and _is_literal(operands[0]):
            operands = operands[::-1]
        subject = operands[0]
        if not isinstance(subject, exp.Column):
            continue
        precision = timestamps.get(subject.name.lower())
        if precision is None:
            continue
        for other in operands[1:]:
            if _is_literal(other):
                other.replace(timestamp_literal(other, precision))


def epoch_of(text: str, precision: Precision) -> int | None:
    """A date-time string as a topic's literals read it (UTC unless it names an offset),
    as an epoch in `precision`; None when it is not one."""
    return _parse_datetime(text, precision)


def _literal_epoch(node: exp.Expr, precision: Precision) -> int | None:
    """An integer literal as is, or a date-time string, in the database precision."""
    negative = isinstance(node, exp.Neg)
    lit = node.this if negative else node
    if lit.is_string:
        return _parse_datetime(lit.this, precision)
    try:
        value = int(lit.this)
    except ValueError:
        return None
    return -value if negative else value


def _parse_datetime(text: str, precision: Precision) -> int | None:
    """'2018-10-03 14:38:05[.123456789][Z|+08:00]' as an epoch in `precision` (UTC
    unless an offset is given); None if it is not a date-time."""
    match = _DATETIME.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                          int(second or 0), tzinfo=UTC)  # fmt: skip
    except ValueError:
        return None
    seconds = (moment - _EPOCH) // timedelta(seconds=1) - _zone_seconds(zone)
    digits = _DIGITS[precision]
    return seconds * _SCALE[precision] + int((fraction or "").ljust(digits, "0")[:digits])


def _zone_seconds(zone: str | None) -> int:
    if zone is None or zone.upper() == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    seconds = int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60
    return -seconds if zone[0] == "-" else seconds


def _iso(value: int, precision: Precision) -> str:
    seconds, fraction = divmod(value, _SCALE[precision])
    t = _EPOCH + timedelta(seconds=seconds)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{fraction:0{_DIGITS[precision]}d}"
    )
