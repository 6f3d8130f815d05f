"""Committed offsets of consumer groups, kept durably on the vnode they belong to.

Each vnode directory holds `offsets.sqlite`: one row per (topic, group) with the next
version the group will read there. SQLite in WAL mode with `synchronous=FULL` makes a
commit durable before it returns and never leaves a torn file, so a committed offset
survives `kill -9` and power loss exactly like an acknowledged write. A commit of several
offsets is one transaction: all of them or none. The connection holds the file in
exclusive locking mode: SQLite then keeps its WAL index in memory instead of a `-shm`
file, so a vnode's offsets keep two descriptors open (the file and its `-wal`), not three.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from sqltopic.sql.catalog_store import damage_reported

OFFSETS_FILE = "offsets.sqlite"
OFFSETS_DAMAGED = (
    "the committed offsets of this vgroup are damaged; restore offsets.sqlite from a "
    "backup, or move it away to start the vgroup's groups from auto.offset.reset "
    "(docs/operations.md §5.6)"
)
# A commit waits this long for a concurrent commit's lock before failing; far above any
# real commit (one fsync), so it only fires on a stuck disk.
BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS committed (
    topic TEXT NOT NULL,
    grp TEXT NOT NULL,
    next_version INTEGER NOT NULL,
    updated_us INTEGER NOT NULL,
    PRIMARY KEY (topic, grp)
) WITHOUT ROWID
"""


class OffsetStore:
    """The committed offsets of one vnode. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._con = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
        try:
            with damage_reported(path, OFFSETS_DAMAGED):
                self._cache = _prepare(self._con)
        except BaseException:
            self._con.close()
            raise

    @classmethod
    def open(cls, vnode_dir: Path) -> OffsetStore:
        vnode_dir.mkdir(parents=True, exist_ok=True)
        return cls(vnode_dir / OFFSETS_FILE)

    def get(self, topic: str, group: str) -> int | None:
        """The group's committed offset on this vnode, or None if it never committed."""
        with self._lock:
            return self._cache.get((topic, group))

    def commit(self, offsets: Iterable[tuple[str, str, int]], now_us: int) -> None:
        """Store (topic, group, next_version) rows in one durable transaction."""
        rows = [(topic, group, offset, now_us) for topic, group, offset in offsets]
        if not rows:
            return
        with self._lock:
            self._transaction(
                "INSERT INTO committed VALUES (?, ?, ?, ?) ON CONFLICT (topic, grp) DO "
                "UPDATE SET next_version = excluded.next_version, updated_us = excluded.updated_us",
                rows,
            )
            for topic, group, offset, _ in rows:
                self._cache[topic, group] = offset

    def forget(self, topic: str, group: str | None = None) -> None:
        """Remove the offsets of `topic` (DROP TOPIC), or of one group on it (DROP
        CONSUMER GROUP)."""
        with self._lock:
            if group is None:
                self._transaction("DELETE FROM committed WHERE topic = ?", [(topic,)])
                for key in [k for k in self._cache if k[0] == topic]:
                    del self._cache[key]
            else:
                self._transaction(
                    "DELETE FROM committed WHERE topic = ? AND grp = ?", [(topic, group)]
                )
                self._cache.pop((topic, group), None)

    def groups(self, topic: str) -> dict[str, int]:
        """Every group with an offset on `topic` here, and that offset."""
        with self._lock:
            return {g: off for (t, g), off in self._cache.items() if t == topic}

    def _transaction(self, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            con.executemany(sql, rows)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._con.close()


def _prepare(con: sqlite3.Connection) -> dict[tuple[str, str], int]:
    """Set the connection up and read every committed offset."""
    # Before the first access: only then does SQLite keep the WAL index in memory. The
    # vnode's WAL lock already keeps any other writer away from this directory.
    con.execute("PRAGMA locking_mode=EXCLUSIVE")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(_SCHEMA)
    return {
        (topic, group): offset
        for topic, group, offset in con.execute("SELECT topic, grp, next_version FROM committed")
    }
