"""Turning WAL data entries into relations: conform to the current schema, add context.

Entries keep the schema they were written with; after ALTER STABLE ADD/DROP COLUMN the
current schema differs. Readers project every entry onto the current schema (a missing
column reads as NULL, a dropped one disappears) and add the columns a query may name
besides the data: tag values, `tbname`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sqltopic.server.vnode import entry_table
from sqltopic.sql.model import TBNAME, Column
from sqltopic.wal import EntryType, WalReader

# A scan reads the WAL in batches of this many entries: large enough to amortise the
# per-read cost, small enough to bound the memory of entries held at once.
SCAN_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class DataEntry:
    version: int
    table: str
    stable: str | None
    batch: pa.RecordBatch


def data_entries(reader: WalReader, from_version: int = 0) -> Iterator[DataEntry]:
    """Every data entry from `from_version` to the readable end, in WAL order."""
    for records in reader.batches(from_version, max_entries=SCAN_ENTRIES):
        for rec in records:
            if rec.entry_type is EntryType.DATA:
                batch = rec.arrow()
                table, stable = entry_table(batch)
                yield DataEntry(rec.version, table, stable, batch)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly the fields of `schema`, in its order and types."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    arrays = []
    for field in schema:
        i = batch.schema.get_field_index(field.name)
        if i < 0:
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        col = batch.column(i)
        arrays.append(col if col.type == field.type else col.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """`value` repeated `n` times; strings dictionary-encoded (one copy of the text)."""
    if pa.types.is_string(type_):
        indices = pa.repeat(pa.scalar(0 if value is not None else None, pa.int32()), n)
        return pa.DictionaryArray.from_arrays(indices, pa.array([value], type_))
    return pa.repeat(pa.scalar(value, type_), n)


def with_context(
    batch: pa.RecordBatch,
    table: str,
    tags: dict[str, Any],
    tag_columns: Sequence[Column],
    precision: Any,
    *,
    tbname: bool,
) -> pa.RecordBatch:
    """`batch` plus a constant column per tag in `tag_columns` and, if asked, `tbname`."""
    n = batch.num_rows
    arrays = list(batch.columns)
    fields = list(batch.schema)
    for col in tag_columns:
        arrow_type = col.type.arrow(precision)
        arrays.append(constant(tags.get(col.name), arrow_type, n))
        fields.append(pa.field(col.name, arrays[-1].type))
    if tbname:
        arrays.append(constant(table, pa.string(), n))
        fields.append(pa.field(TBNAME, arrays[-1].type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
