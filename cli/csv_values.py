"""CSV text to a table's column types, for `sqltopic load`.

CSV fields arrive as strings (NULL already a null); each column is converted to the
Arrow type of its table column with Arrow's casts, whole columns at a time. When a cast
fails, a bisection over the column finds the first value that does not convert, and
the error names its line in the file, its column and what the column accepts.

Accepted text per type (stricter than INSERT, which also takes expressions):
TIMESTAMP an integer in the database precision, or a date-time
`YYYY-MM-DD[( |T)HH[:MM[:SS[.fraction]]]][Z|±HH[:MM]]` (UTC without an offset; digits
beyond the precision dropped); integers in decimal within the type's range; FLOAT and
DOUBLE finite numbers (FLOAT within ±3.4028235e38); BOOL true/false (any case) or 1/0;
VARCHAR/BINARY(n) at most n UTF-8 bytes, NCHAR(n) at most n characters.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.errors import InvalidValueError
from sqltopic.sql.types import INTEGER_RANGES, ColumnType, Precision
from sqltopic.sql.values import FLOAT32_MAX, parse_datetime

_INTEGER_RE = re.compile(r"[-+]?\d+")
_INT64_MIN, _INT64_MAX = INTEGER_RANGES["BIGINT"]
_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError)


@dataclass(frozen=True)
class Target:
    """Where a CSV column goes: the column's name, its type, and whether it is the
    table's primary timestamp (which may not be NULL)."""

    name: str
    type: ColumnType
    key: bool = False

    def expected(self, precision: Precision) -> str:
        """What the column accepts, for error messages."""
        t = self.type
        if t.is_integer:
            low, high = INTEGER_RANGES[t.name]
            return f"an integer in {low}..{high}"
        if t.name == "FLOAT":
            return "a number within ±3.4028235e38"
        if t.name == "DOUBLE":
            return "a finite number"
        if t.name == "BOOL":
            return "true, false, 1 or 0"
        if t.name == "TIMESTAMP":
            return (
                f"an integer in the database precision ({precision}) or a date-time such "
                "as 2018-10-03 14:38:05.000 (UTC unless it ends in Z or ±HH:MM)"
            )
        unit = "characters" if t.name == "NCHAR" else "bytes"
        return f"at most {t.length} {unit}"


@dataclass(frozen=True)
class Rows:
    """A slice of the file: its name, and the line of its first row."""

    path: str
    first_line: int

    def bad(self, values: pa.Array, index: int, target: Target, precision: Precision) -> Exception:
        value = values[index].as_py()
        shown = "an empty field (NULL)" if value is None else repr(value)
        return InvalidValueError(
            f"{self.path} line {self.first_line + index}, column {target.name}: {shown} is "
            f"not a valid {target.type.sql()}; expected {target.expected(precision)}"
        )


def convert(table: pa.Table, targets: list[Target], precision: Precision, rows: Rows) -> pa.Table:
    """`table` (string columns, in `targets` order) with each column converted."""
    arrays = []
    for column, target in zip(table.columns, targets, strict=True):
        values = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        arrays.append(_convert(values, target, precision, rows))
    return pa.Table.from_arrays(arrays, names=[t.name for t in targets])


def _convert(values: pa.Array, target: Target, precision: Precision, rows: Rows) -> pa.Array:
    if target.key and values.null_count:
        index = pc.index(pc.is_null(values), True).as_py()
        raise rows.bad(values, index, target, precision)
    t = target.type
    if t.name == "TIMESTAMP":
        cast: Callable[[pa.Array], pa.Array] = _timestamp_cast(precision)
    elif t.is_string:
        return _checked_length(values, target, precision, rows)
    else:
        cast = _plain_cast(t, precision)
    try:
        return cast(values)
    except _CAST_ERRORS:
        raise rows.bad(values, _first_bad(values, cast), target, precision) from None


def _plain_cast(t: ColumnType, precision: Precision) -> Callable[[pa.Array], pa.Array]:
    want = t.arrow(precision)
    if not t.is_float:
        return lambda values: values.cast(want)
    limit = FLOAT32_MAX if t.name == "FLOAT" else float("inf")

    def cast(values: pa.Array) -> pa.Array:
        doubles = values.cast(pa.float64())
        bad = pc.or_(pc.invert(pc.is_finite(doubles)), pc.greater(pc.abs(doubles), limit))
        if pc.any(bad).as_py():
            raise pa.ArrowInvalid("out of range")
        return doubles.cast(want)

    return cast


def _timestamp_cast(precision: Precision) -> Callable[[pa.Array], pa.Array]:
    """Integers, or date-times Arrow reads (the fast paths); else value by value."""
    unit = pa.timestamp(precision)

    def cast(values: pa.Array) -> pa.Array:
        with contextlib.suppress(*_CAST_ERRORS):
            return values.cast(pa.int64()).cast(unit)
        with contextlib.suppress(*_CAST_ERRORS):
            return values.cast(unit)
        ticks = [None if text is None else _ticks(text, precision) for text in values.to_pylist()]
        return pa.array(ticks, pa.int64()).cast(unit)

    return cast


def _ticks(text: str, precision: Precision) -> int:
    if _INTEGER_RE.fullmatch(text):
        value = int(text)
    else:
        try:
            value = parse_datetime(text.strip(), precision)
        except ValueError:
            raise pa.ArrowInvalid(f"not a timestamp: {text!r}") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise pa.ArrowInvalid(f"timestamp out of range: {text!r}")
    return value


def _checked_length(values: pa.Array, target: Target, precision: Precision, rows: Rows) -> pa.Array:
    t = target.type
    sizes = pc.utf8_length(values) if t.name == "NCHAR" else pc.binary_length(values)
    too_long = pc.greater(sizes, t.length or 0)
    if pc.any(too_long).as_py():
        raise rows.bad(values, pc.index(too_long, True).as_py(), target, precision)
    return values


def _first_bad(values: pa.Array, cast: Callable[[pa.Array], object]) -> int:
    """The index of the first value `cast` refuses (the whole array is refused)."""
    low, high = 0, len(values)  # the first bad value is in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        try:
            cast(values.slice(low, middle - low))
        except _CAST_ERRORS:
            high = middle
        else:
            low = middle
    return low
