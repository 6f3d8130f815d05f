"""A vnode: one partition of a database, owning one WAL and its groups' committed offsets,
and its data entries' form.

A data entry is one Arrow record batch of one table; the schema metadata names the table
(and its super table), so an entry is self-describing in WAL order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sqltopic.errors import SqlError
from sqltopic.server.offsets import OffsetStore
from sqltopic.sql.model import Database, Table
from sqltopic.wal import Wal, WalOptions, WalReader
from sqltopic.wal.options import Clock

TABLE_KEY = b"sqltopic.table"
STABLE_KEY = b"sqltopic.stable"
UID_KEY = b"sqltopic.uid"

# Database WAL_* options and the WalOptions fields they set.
WAL_OPTION_FIELDS = {
    "WAL_LEVEL": "level",
    "WAL_FSYNC_PERIOD": "fsync_period_ms",
    "WAL_RETENTION_PERIOD": "retention_period_s",
    "WAL_RETENTION_SIZE": "retention_size_kb",
    "WAL_SEGMENT_SIZE": "segment_size_kb",
    "WAL_ROLL_PERIOD": "roll_period_s",
}


def wal_options(options: dict[str, int]) -> WalOptions:
    """The WalOptions a database's WAL_* options ask for; SqlError naming a bad one."""
    try:
        fields: dict[str, Any] = {WAL_OPTION_FIELDS[k]: v for k, v in options.items()}
        return WalOptions(**fields)
    except (ValueError, TypeError) as exc:
        raise SqlError(f"bad database option: {exc}") from None


def vnode_dir(data_dir: Path, vgroup: int) -> Path:
    return data_dir / "vnode" / f"vnode{vgroup}"


def tag_batch(batch: pa.RecordBatch, table: Table) -> pa.RecordBatch:
    """`batch` with the schema metadata that names its table."""
    meta = {
        **(batch.schema.metadata or {}),
        TABLE_KEY: table.name.encode(),
        STABLE_KEY: (table.stable or "").encode(),
        UID_KEY: str(table.uid).encode(),
    }
    return batch.replace_schema_metadata(meta)


@dataclass(frozen=True, slots=True)
class EntryTable:
    """Who a data entry belongs to: table name, super table, table uid."""

    name: str
    stable: str | None
    uid: int

    def is_of(self, table: Table) -> bool:
        return self.name == table.name and self.uid == table.uid


def entry_table_keyed(batch: pa.RecordBatch, key: bytes) -> EntryTable:
    """`entry_table`, remembered under the entry's schema bytes (see decode_arrow_keyed)."""
    owner = _OWNERS.get(key)
    if owner is None:
        if len(_OWNERS) >= OWNERS_KEPT:
            _OWNERS.clear()
        owner = _OWNERS[key] = entry_table(batch)
    return owner


# Entry schemas whose owner is remembered: one per table written, tiny each.
OWNERS_KEPT = 16_384
_OWNERS: dict[bytes, EntryTable] = {}


def entry_table(batch: pa.RecordBatch) -> EntryTable:
    meta = batch.schema.metadata or {}
    stable = meta.get(STABLE_KEY, b"").decode()
    uid = int(meta.get(UID_KEY, b"0"))
    return EntryTable(meta.get(TABLE_KEY, b"").decode(), stable or None, uid)


@dataclass
class Vnode:
    vgroup: int
    db: str
    wal: Wal
    offsets: OffsetStore

    @classmethod
    def open(
        cls, data_dir: Path, database: Database, vgroup: int, *, clock: Clock, background: bool
    ) -> Vnode:
        home = vnode_dir(data_dir, vgroup)
        wal = Wal.open(home / "wal", wal_options(database.wal), clock=clock, background=background)
        try:
            offsets = OffsetStore.open(home)
        except BaseException:
            wal.close()
            raise
        return cls(vgroup, database.name, wal, offsets)

    def reader(self) -> WalReader:
        return self.wal.reader()

    def close(self) -> None:
        try:
            self.wal.close()
        finally:
            self.offsets.close()
