"""Column types between sqltopic (Arrow, as the WAL and DuckDB hold them) and Spark.

Spark has no unsigned integers and keeps timestamps in microseconds, as instants:

| Arrow (TDengine)           | Spark SQL          | Arrow batch Spark expects |
|----------------------------|--------------------|---------------------------|
| timestamp[ms], [us]        | TIMESTAMP          | timestamp[us, tz=UTC]     |
| uint8 (TINYINT UNSIGNED)   | SMALLINT           | int16                     |
| uint16 (SMALLINT UNSIGNED) | INT                | int32                     |
| uint32 (INT UNSIGNED)      | BIGINT             | int64                     |
| uint64 (BIGINT UNSIGNED)   | DECIMAL(20,0)      | decimal128(20, 0)         |
| the other integers, floats, bool, string | the same | the same              |

Every value fits exactly. Nanosecond timestamps do not (Spark truncates them to
microseconds), so a database of precision 'ns' is refused before any Spark work.
"""

from __future__ import annotations

from typing import TypeVar

import pyarrow as pa

from sqltopic.errors import BackfillUnsupported

_SPARK: dict[pa.DataType, tuple[str, pa.DataType]] = {
    pa.bool_(): ("BOOLEAN", pa.bool_()),
    pa.int8(): ("TINYINT", pa.int8()),
    pa.int16(): ("SMALLINT", pa.int16()),
    pa.int32(): ("INT", pa.int32()),
    pa.int64(): ("BIGINT", pa.int64()),
    pa.uint8(): ("SMALLINT", pa.int16()),
    pa.uint16(): ("INT", pa.int32()),
    pa.uint32(): ("BIGINT", pa.int64()),
    pa.uint64(): ("DECIMAL(20,0)", pa.decimal128(20, 0)),
    pa.float32(): ("FLOAT", pa.float32()),
    pa.float64(): ("DOUBLE", pa.float64()),
    pa.string(): ("STRING", pa.string()),
    pa.large_string(): ("STRING", pa.string()),
}
SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
Data = TypeVar("Data", pa.RecordBatch, pa.Table)

# Integer ranges of the Arrow types, for range checks of Spark arithmetic done wider.
INTEGER_RANGES: dict[pa.DataType, tuple[int, int]] = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}


def spark_sql_type(dtype: pa.DataType) -> str:
    """The Spark SQL type that holds every value of Arrow type `dtype`."""
    if pa.types.is_timestamp(dtype):
        _check_timestamp(dtype)
        return "TIMESTAMP"
    found = _SPARK.get(dtype)
    if found is None:
        raise BackfillUnsupported(f"Arrow type {dtype} has no Spark column type here")
    return found[0]


def spark_arrow_type(dtype: pa.DataType) -> pa.DataType:
    """The Arrow type of `spark_sql_type(dtype)` as Spark's Arrow path expects it."""
    if pa.types.is_timestamp(dtype):
        _check_timestamp(dtype)
        return SPARK_TIMESTAMP
    found = _SPARK.get(dtype)
    if found is None:
        raise BackfillUnsupported(f"Arrow type {dtype} has no Spark column type here")
    return found[1]


def spark_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every field in its Spark Arrow type (nullable, no metadata)."""
    return pa.schema([pa.field(f.name, spark_arrow_type(f.type)) for f in schema])


def to_spark(batch: Data, target: pa.Schema) -> Data:
    """`batch` (a RecordBatch or a Table) cast to `target` (a `spark_schema`): zero-copy
    where only metadata differs; a timestamp in ms is scaled to us, unsigned integers
    are widened."""
    if batch.schema.equals(target, check_metadata=False):
        return batch.replace_schema_metadata(None)
    arrays = [
        col if col.type == field.type else col.cast(field.type)
        for col, field in zip(batch.columns, target, strict=True)
    ]
    return type(batch).from_arrays(arrays, schema=target)


def ddl(schema: pa.Schema) -> str:
    """A Spark DDL schema string for `schema` (of sqltopic's Arrow types)."""
    return ", ".join(f"`{f.name}` {spark_sql_type(f.type)}" for f in schema)


def _check_timestamp(dtype: pa.TimestampType) -> None:
    if dtype.unit == "ns":
        raise BackfillUnsupported(
            "Spark holds timestamps in microseconds, and this database's precision is 'ns': "
            "its timestamps would lose digits. Backfill a database of precision 'ms' or 'us'"
        )
