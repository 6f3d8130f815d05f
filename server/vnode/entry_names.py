"""Which tables each recent data entry of a vnode holds rows of, remembered from the
entry's first decode (by the shared pass, or by a poll reading for itself).

A consumer answered by the shared pass polls again at once, and reads for itself the
entries written meanwhile: with a thousand topics over a thousand tables, nearly all of
them hold none of its topic's tables. Knowing an entry's table names, such a read skips
decoding it. Only names are kept (never Arrow buffers, which would pin WAL segments), for
a bounded number of entries; an entry's tables never change once it is written.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from sqltopic.sql.entries import EntryRun, entry_names, entry_runs
from sqltopic.wal import WalRecord

# Entries remembered per vnode: minutes of writes at tens of entries a second, a few
# hundred bytes each.
ENTRY_NAMES_KEPT = 4096


class EntryNames:
    """Version -> the names of the tables its data entry holds. Thread-safe."""

    def __init__(self, kept: int = ENTRY_NAMES_KEPT) -> None:
        self._names: dict[int, frozenset[str]] = {}
        self._kept = kept
        self._lock = threading.Lock()

    def get(self, version: int) -> frozenset[str] | None:
        return self._names.get(version)

    def runs(self, rec: WalRecord, tables: Mapping[str, object]) -> list[EntryRun]:
        """The runs of data entry `rec` of the tables in `tables` (`entry_runs`): none,
        without decoding it, when it is known to hold none of them; its tables are
        remembered at its first decode."""
        names = self.get(rec.version)
        if names is not None and holds_none(names, tables):
            return []
        batch, key = rec.arrow_keyed()
        if names is None:
            self.put(rec.version, entry_names(batch, key))
        return entry_runs(batch, key, tables)

    def put(self, version: int, names: frozenset[str]) -> None:
        with self._lock:
            self._names[version] = names
            while len(self._names) > self._kept:  # the oldest first (insertion order)
                del self._names[next(iter(self._names))]


def holds_none(names: frozenset[str], tables: Mapping[str, object]) -> bool:
    """Whether an entry of tables `names` holds none of `tables` (looking through the
    smaller of the two)."""
    if len(names) <= len(tables):
        return not any(name in tables for name in names)
    return not any(name in names for name in tables)
