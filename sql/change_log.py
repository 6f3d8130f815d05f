"""A cluster's catalog changes, kept in `catalog.sqlite` beside the catalog they change.

On the mnode, every catalog commit also appends its change (table `changes`, in the same
transaction), as JSON: `objects` ([kind, key, body or null], rows as the objects table
holds them), `settings`, and what the dnodes do besides: `events` (the DDL events, each
once), `entries` (vgroup -> the indexes of the events its WAL gets, in order), `forget`
([database, topic, group or null] whose offsets go). Its
dnodes apply the changes in order (`apply`), each once, so every dnode's catalog and
WALs follow the mnode's (docs/cluster.md, "The catalog on the dnodes").

Changes every admitted dnode applied are trimmed (`trim`), and so is what lies beyond
`MAX_CHANGES_KEPT` however far behind an offline dnode is; a dnode that needs a trimmed
change gets a snapshot of the whole catalog instead (`snapshot`).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

CHANGES_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);
"""
# A change is at most a few KB: a million of them is a few GB at worst, more than any
# dnode should be left to replay rather than take a snapshot.
MAX_CHANGES_KEPT = 1_000_000
# (seq, JSON body)
Change = tuple[int, str]


class ChangeLog:
    """The changes of one catalog database (its connection: the store's)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    @staticmethod
    def append(cur: sqlite3.Cursor, change: dict[str, Any]) -> int:
        """Append `change` within the caller's transaction; its seq (one past the last,
        kept or trimmed: seqs are never reused)."""
        seq = _last(cur) + 1
        cur.execute("INSERT INTO changes VALUES (?, ?)", (seq, json.dumps(change)))
        return seq

    # --- the mnode's side ------------------------------------------------------------------

    def after(self, seq: int, limit: int) -> list[Change]:
        """Up to `limit` changes after `seq`, in order; a snapshot of the whole catalog
        (one change, numbered as the last) when some of them were trimmed."""
        if seq < self.first() - 1:
            return [self.snapshot()]
        return list(
            self._db.execute(
                "SELECT seq, body FROM changes WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
            )
        )

    def last(self) -> int:
        """The seq of the last change (0: none yet)."""
        return _last(self._db.cursor())

    def first(self) -> int:
        """The seq of the first change kept (last + 1 when none is)."""
        row = self._db.execute("SELECT MIN(seq) FROM changes").fetchone()
        return int(row[0]) if row[0] is not None else self.last() + 1

    def trim(self, applied_by_all: int) -> int:
        """Drop the changes up to `applied_by_all` (every admitted dnode has them), and
        any beyond the last MAX_CHANGES_KEPT; how many went."""
        last = self.last()
        upto = max(min(applied_by_all, last), last - MAX_CHANGES_KEPT)
        if upto < self.first():
            return 0
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            # the numbering goes on from the last change even once none is kept
            cur.execute("INSERT OR REPLACE INTO settings VALUES ('last_change', ?)", (str(last),))
            gone = cur.execute("DELETE FROM changes WHERE seq <= ?", (upto,)).rowcount
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return int(gone)

    def snapshot(self) -> Change:
        """The whole catalog as one change numbered as the last: applied, it replaces a
        dnode's catalog (the DDL events of the changes it missed do not reach its WALs)."""
        rows = [list(r) for r in self._db.execute("SELECT kind, key, body FROM objects")]
        settings = dict(self._db.execute(
            "SELECT name, value FROM settings WHERE name IN ('next_vgroup', 'next_dnode')"
        ).fetchall())  # fmt: skip
        body = {"snapshot": True, "objects": rows, "settings": settings}
        return self.last(), json.dumps(body)

    # --- a dnode's side ---------------------------------------------------------------------

    def applied(self) -> int:
        """The seq of the last change this replica applied (0: none)."""
        row = self._db.execute("SELECT value FROM settings WHERE name = 'change'").fetchone()
        return int(row[0]) if row else 0

    def apply(self, seq: int, body: str, versions: dict[int, int]) -> None:
        """Write change `seq` (its objects and settings; a snapshot replaces every
        object) with the WAL versions its events reached, atomically."""
        change = json.loads(body)
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            if change.get("snapshot"):
                cur.execute("DELETE FROM objects")
            for kind, key, obj in change["objects"]:
                if obj is None:
                    cur.execute("DELETE FROM objects WHERE kind = ? AND key = ?", (kind, key))
                else:
                    cur.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", (kind, key, obj))
            for vgroup, version in versions.items():
                cur.execute("INSERT OR REPLACE INTO applied VALUES (?, ?)", (vgroup, version))
            settings = [(k, str(v)) for k, v in change["settings"].items()]
            cur.executemany("INSERT OR REPLACE INTO settings VALUES (?, ?)", settings)
            cur.execute("INSERT OR REPLACE INTO settings VALUES ('change', ?)", (str(seq),))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise


def _last(cur: sqlite3.Cursor) -> int:
    """The last seq: the greatest kept, or the last trimmed once none is kept."""
    row = cur.execute("SELECT value FROM settings WHERE name = 'last_change'").fetchone()
    kept = cur.execute("SELECT MAX(seq) FROM changes").fetchone()[0] or 0
    return max(int(row[0]) if row else 0, int(kept))
