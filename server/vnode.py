"""A vnode: one partition of a database, owning one WAL and its groups' committed offsets.

A data entry's form (which table owns it) lives in `sql/entries.py`, shared with Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqltopic.errors import SqlError
from sqltopic.server.offsets import OffsetStore
from sqltopic.sql.entries import (
    STABLE_KEY,
    TABLE_KEY,
    UID_KEY,
    EntryTable,
    entry_table,
    entry_table_keyed,
    tag_batch,
    vnode_dir,
)
from sqltopic.sql.model import Database
from sqltopic.wal import Wal, WalOptions, WalReader
from sqltopic.wal.options import Clock

# A data entry's form is re-exported: the server's modules import it from here.
__all__ = [
    "STABLE_KEY",
    "TABLE_KEY",
    "UID_KEY",
    "WAL_OPTION_FIELDS",
    "EntryTable",
    "Vnode",
    "entry_table",
    "entry_table_keyed",
    "tag_batch",
    "vnode_dir",
    "wal_options",
]

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
