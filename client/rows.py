"""Arrow rows as Python tuples, for `Result.rows`, `Message.rows` and `Block.rows`.

A column whose values Python cannot represent (an int64 timestamp far outside
`datetime`'s years 1..9999, which TDengine's TIMESTAMP allows) raises
`ConversionError` naming the column instead of a bare OverflowError or ValueError;
the Arrow table still holds the values.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sqltopic.errors import ConversionError

Row = tuple[Any, ...]


def table_rows(table: pa.Table) -> list[Row]:
    """The rows of `table` as tuples, columns in its order."""
    columns = [_values(table, i) for i in range(table.num_columns)]
    return list(zip(*columns, strict=True)) if columns else []


def _values(table: pa.Table, index: int) -> list[Any]:
    column = table.column(index)
    try:
        values: list[Any] = column.to_pylist()
    except (OverflowError, ValueError, pa.ArrowException) as exc:
        name = table.schema.field(index).name
        raise ConversionError(
            f"column {name} ({column.type}) holds a value Python cannot represent "
            f"({str(exc)[:120]}): read it as Arrow with to_arrow() instead of rows()"
        ) from None
    return values
