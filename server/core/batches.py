"""Turning WAL data entries into relations: conform to the current schema, add context.

Entries keep the schema they were written with; after ALTER STABLE ADD/DROP COLUMN the
current schema differs. Readers project every entry onto the current schema (a missing
column reads as NULL, a dropped one disappears) and add the columns a query may name
besides the data: tag values, `tbname`.
"""

from __future__ import annotations

import threading
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from sqltopic.errors import VersionNotRetained
from sqltopic.sql.entries import EntryTable, entry_runs
from sqltopic.sql.model import TBNAME, Column, Table
from sqltopic.wal import EntryType

# A scan reads the WAL in batches of this many entries: large enough to amortise the
# per-read cost, small enough to bound the memory of entries held at once.
SCAN_ENTRIES = 4096


class EntryRecord(Protocol):
    """What a scan uses of an entry (wal.WalRecord, or remote_vnode.RemoteRecord)."""

    @property
    def version(self) -> int: ...

    @property
    def entry_type(self) -> EntryType: ...

    def arrow_keyed(self) -> tuple[pa.RecordBatch, bytes]: ...


class EntryReader(Protocol):
    """What a scan uses of a WAL reader: a local vnode's, or a dnode's vgroup read from
    its mnode (remote_vnode.RemoteReader)."""

    @property
    def first_version(self) -> int: ...

    def read(self, from_version: int, *, max_entries: int = ...) -> Sequence[EntryRecord]: ...


@dataclass(frozen=True, slots=True)
class DataEntry:
    """One table's run of rows in the data entry of `version`."""

    version: int
    table: EntryTable
    batch: pa.RecordBatch


def data_entries(
    reader: EntryReader, from_version: int = 0, keep: Container[str] | None = None
) -> Iterator[DataEntry]:
    """Every run of rows of one table in the data entries the WAL retains from
    `from_version` to the readable end, in WAL order (a single-table entry is one run;
    a multi-table entry one per table run, zero-copy slices); versions retention has
    deleted are skipped, even while this runs. With `keep`, only runs of the tables named
    there."""
    version = max(from_version, reader.first_version)
    while True:
        try:
            records = reader.read(version, max_entries=SCAN_ENTRIES)
        except VersionNotRetained as gone:
            version = gone.first_version
            continue
        if not records:
            return
        for rec in records:
            if rec.entry_type is EntryType.DATA:
                for owner, rows in entry_runs(*rec.arrow_keyed(), keep):
                    yield DataEntry(rec.version, owner, rows)
        version = records[-1].version + 1


class _Constants:
    """Constant columns as dictionary arrays over one shared all-zero index buffer.

    A tag value or table name is the same for every row of an entry; building such a
    column per entry costs tens of microseconds, slicing a cached one about one. The
    zeros are shared by every cached value, so a value costs one tiny dictionary.
    """

    def __init__(self) -> None:
        self._zeros = pa.array([], pa.int32())
        self._arrays: dict[tuple[str, Any], pa.Array] = {}
        self._lock = threading.Lock()  # readers of different vgroups share the cache

    def get(self, value: Any, type_: pa.DataType, n: int) -> pa.Array:
        with self._lock:
            return self._get(value, type_, n)

    def _get(self, value: Any, type_: pa.DataType, n: int) -> pa.Array:
        if n > len(self._zeros):
            self._zeros = pa.repeat(pa.scalar(0, pa.int32()), max(n, 2 * len(self._zeros)))
            self._arrays.clear()
        key = (str(type_), value)
        full = self._arrays.get(key)
        if full is None:
            if len(self._arrays) >= CONSTANTS_KEPT:
                self._arrays.clear()
            full = pa.DictionaryArray.from_arrays(self._zeros, pa.array([value], type_))
            self._arrays[key] = full
        return full.slice(0, n)


# Distinct constant values cached (tag values, table names): each is one tiny array.
CONSTANTS_KEPT = 65_536

_constants = _Constants()


def constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """`value` repeated `n` times, dictionary-encoded (one copy of the value)."""
    return _constants.get(value, type_, n)


def with_context(
    data: pa.Table,
    owners: Sequence[Table],
    lengths: Sequence[int],
    tag_columns: Sequence[Column],
    precision: Any,
    *,
    tbname: bool,
) -> pa.Table:
    """`data` (the rows of entries whose owners and row counts are given, in order) plus
    a column per tag in `tag_columns` and, if asked, `tbname`. Each column is added whole,
    one constant chunk per entry: much cheaper than rebuilding every entry's batch."""
    for col in tag_columns:
        values = [t.tags.get(col.name) for t in owners]
        data = _constant_column(data, col.name, col.type.arrow(precision), values, lengths)
    if tbname:
        data = _constant_column(data, TBNAME, pa.string(), [t.name for t in owners], lengths)
    return data


def _constant_column(
    data: pa.Table, name: str, type_: pa.DataType, values: Sequence[Any], lengths: Sequence[int]
) -> pa.Table:
    chunks = [constant(v, type_, n) for v, n in zip(values, lengths, strict=True)]
    column = pa.chunked_array(chunks, type=pa.dictionary(pa.int32(), type_))
    return data.append_column(pa.field(name, column.type), column)
