"""TDengine's types for an ad hoc query's result columns.

DuckDB answers SUM of integers as a HUGEINT: DECIMAL128 in Arrow and `decimal.Decimal`
in Python, where a TDengine user gets a BIGINT (a BIGINT UNSIGNED for a SUM of unsigned
values). (Decimal literals are DOUBLE already, as in TDengine: server/core/query.py.) The types
are chosen once, from the result's first batch, before its schema is sent: a whole-number
decimal becomes a BIGINT when the batch's values fit one, else a BIGINT UNSIGNED when they
fit that, else stays an exact decimal; any other decimal becomes a DOUBLE.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.errors import SqlError

_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)


def tdengine_schema(schema: pa.Schema, first: pa.RecordBatch | None) -> pa.Schema | None:
    """`schema` with its decimal columns as TDengine's types (judged by `first`, the
    result's first batch), or None when it has no decimal column."""
    if not any(pa.types.is_decimal(f.type) for f in schema):
        return None
    fields = []
    for i, field in enumerate(schema):
        column = first.column(i) if first is not None else None
        fields.append(field.with_type(_tdengine_type(field.type, column)))
    return pa.schema(fields, schema.metadata)


def _tdengine_type(t: pa.DataType, column: pa.Array | None) -> pa.DataType:
    if not pa.types.is_decimal(t):
        return t
    if t.scale != 0:
        return pa.float64()
    low, high = _range(column)
    if _INT64[0] <= low and high <= _INT64[1]:
        return pa.int64()
    if _UINT64[0] <= low and high <= _UINT64[1]:
        return pa.uint64()
    return t  # beyond TDengine's integers: kept exact rather than rounded to a DOUBLE


def _range(column: pa.Array | None) -> tuple[int, int]:
    if column is None or column.null_count == len(column):
        return 0, 0
    bounds = pc.min_max(column)
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` in `schema` (from `tdengine_schema`); a later batch's whole number that
    the first batch's type cannot hold is an SqlError naming its column."""
    arrays = []
    for column, field in zip(batch.columns, schema, strict=True):
        if column.type == field.type:
            arrays.append(column)
            continue
        try:
            arrays.append(pc.cast(column, field.type))
        except pa.ArrowInvalid:
            raise SqlError(
                f"result column {field.name!r} holds a whole number beyond {field.type}'s "
                "range, the type its first rows chose; CAST it AS DOUBLE in the query"
            ) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
