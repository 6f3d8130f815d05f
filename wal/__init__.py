"""The vnode write-ahead log: segmented, checksummed, indexed by version, retained by
time and size, read zero-copy. The format is specified in docs/wal.md."""

from __future__ import annotations

from sqltopic.wal.background import Scheduler
from sqltopic.wal.codec import WalEntry, control_entry, data_entry, meta_entry
from sqltopic.wal.options import WalOptions
from sqltopic.wal.reader import WalReader, WalRecord, WalState
from sqltopic.wal.readonly import open_readonly
from sqltopic.wal.record import EntryType
from sqltopic.wal.writer import Wal

__all__ = [
    "EntryType",
    "Scheduler",
    "Wal",
    "WalEntry",
    "WalOptions",
    "WalReader",
    "WalRecord",
    "WalState",
    "control_entry",
    "data_entry",
    "meta_entry",
    "open_readonly",
]
