"""Arrow rows as taospy gives them, for `sqltopic.taos` (MessageBlock, TaosResult,
TaosCursor): taospy's `taos/field.py` returns a nanosecond TIMESTAMP as the plain int
(`_convert_nanosecond_to_datetime`), and None for a millisecond or microsecond one that
`datetime` cannot hold (its converters catch OverflowError). So a `sqltopic.taos` row
never fails to convert, where `sqltopic`'s own `rows()` raises ConversionError.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

Row = tuple[Any, ...]
# Microseconds per unit of an Arrow timestamp: datetime holds microseconds at most.
MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}
# Naive UTC, as pyarrow gives tz-less timestamps.
NAIVE_EPOCH = datetime(1970, 1, 1)
AWARE_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def taos_rows(table: pa.Table, decode_binary: bool = True) -> list[Row]:
    """The rows of `table` as taospy shows them, columns in its order."""
    columns = [taos_values(table.column(i), decode_binary) for i in range(table.num_columns)]
    return list(zip(*columns, strict=True)) if columns else []


def taos_values(column: pa.ChunkedArray, decode_binary: bool = True) -> list[Any]:
    """One column's values: nanosecond timestamps as ints, timestamps `datetime` cannot
    hold as None, VARCHAR as bytes when `decode_binary` is false (taospy's option)."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        return _timestamps(column, kind)
    values: list[Any] = column.to_pylist()
    if not decode_binary and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return [v.encode() if isinstance(v, str) else v for v in values]
    return values


def _timestamps(column: pa.ChunkedArray, kind: pa.TimestampType) -> list[Any]:
    ints: list[int | None] = pc.cast(column, pa.int64()).to_pylist()
    if kind.unit == "ns":
        return ints  # taospy: _convert_nanosecond_to_datetime returns the int
    try:
        values: list[Any] = column.to_pylist()
    except (OverflowError, ValueError, pa.ArrowException):
        step, zone = MICROS[kind.unit], _zone(kind.tz)
        return [None if v is None else _datetime(v * step, zone) for v in ints]
    return values


def _datetime(micros: int, zone: tzinfo | None) -> datetime | None:
    """The datetime `micros` after the epoch, None beyond years 1..9999 (taospy's None)."""
    try:
        if zone is None:
            return NAIVE_EPOCH + timedelta(microseconds=micros)
        return (AWARE_EPOCH + timedelta(microseconds=micros)).astimezone(zone)
    except OverflowError:
        return None


def _zone(tz: str | None) -> tzinfo | None:
    if tz is None:
        return None
    return UTC if tz.upper() in ("UTC", "+00:00", "Z") else ZoneInfo(tz)
