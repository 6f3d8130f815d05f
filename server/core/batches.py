"""Turning WAL data entries into relations: conform to the current schema, add context.

Entries keep the schema they were written with; after ALTER STABLE ADD/DROP COLUMN the
current schema differs. Readers project every entry onto the current schema (a missing
column reads as NULL, a dropped one disappears) and add the columns a query may name
besides the data: tag values, `tbname` (`with_context`, sql/topic/context.py: the Spark
backfill's tasks add them the same way).
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from sqltopic.errors import VersionNotRetained
from sqltopic.sql.entries import EntryTable, entry_runs
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
