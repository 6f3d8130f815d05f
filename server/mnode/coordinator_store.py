"""The mnode's coordinator state on disk, so that a server restart keeps consumer groups:
members with their epochs and assignments, owners (with revocations in progress), plans,
and the rows counters of SHOW SUBSCRIPTIONS.

`mnode.sqlite` in the data directory holds one row per consumer group (its members,
owners, plans and rows counters as one JSON document), one row per group of its
progress reports (positions and rows, `progress`), and the next consumer id. A save
writes only the groups that changed since the last one, in one transaction (SQLite in
WAL mode, `synchronous=FULL`): a crash leaves the old state or the new one, and a
subscribe costs the same with ten thousand groups as with one. The coordinator saves
before answering any call that changed membership or assignments, so no consumer ever
holds an epoch newer than the file; progress reports are saved on the mnode's timer,
and a group whose progress alone changed has only its progress row written (ten
thousand bindings' groups, each with its member's document, cost a second a save).

Format 2 held progress in the group's document: it is read as it is, and a group's
first save moves it (a progress row read after the documents wins).

A data directory of an older version holds `mnode.json` (the whole state in one file,
format 1): it is loaded once, written to `mnode.sqlite` and removed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from sqltopic.errors import DataFileDamaged
from sqltopic.sql.catalog_store import damage_reported

STATE_FILE = "mnode.sqlite"
LEGACY_FILE = "mnode.json"  # format 1, before mnode.sqlite
FORMAT = 3
READABLE = (2, 3)  # format 2: progress inside the groups' documents
LEGACY_FORMAT = 1
# A save waits this long for the file's lock; only one server writes it (the data
# directory's LOCK), so this fires only on a stuck disk.
BUSY_TIMEOUT_S = 30.0
DAMAGED = (
    "the consumer group state is damaged; move it away to start with no groups "
    "(consumers rejoin from their committed offsets)"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS groups (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS progress (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
"""

# A group's part of the state: the Snapshot's lists, for that group's members and keys.
GroupDoc = dict[str, list[Any]]
# A group's progress reports: [topic, group, vgroup, position or None, rows] each.
ProgressRows = list[list[Any]]


@dataclass
class Snapshot:
    """The coordinator's durable state, in JSON-ready form."""

    next_id: int = 1
    members: list[dict[str, Any]] = field(default_factory=list)
    # [topic, group, vgroup, consumer, epoch, revoking, revoked_at] (older files: no revoked_at)
    owners: list[list[Any]] = field(default_factory=list)
    # [topic, group, vgroup, planned consumer]
    plans: list[list[Any]] = field(default_factory=list)
    # [topic, group, vgroup, rows of earlier holders]
    rows_before: list[list[Any]] = field(default_factory=list)
    # [topic, group, vgroup, position or None, rows]
    progress: list[list[Any]] = field(default_factory=list)
    # loaded from mnode.json: every group must be written to mnode.sqlite
    legacy: bool = False

    def add(self, doc: GroupDoc) -> None:
        """Take in one group's document (a progress row's: its progress alone)."""
        for name in PARTS:
            part = doc.get(name, [])
            if not isinstance(part, list):
                raise TypeError(f"{name} is not a list")
            getattr(self, name).extend(part)


PARTS = tuple(f.name for f in fields(Snapshot) if f.name not in ("next_id", "legacy"))


def empty_doc() -> GroupDoc:
    return {name: [] for name in PARTS}


class CoordinatorStore:
    """The state file. `save` is called by one thread at a time (the coordinator's
    save lock); `load` once, before any save."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATE_FILE
        self.legacy_path = data_dir / LEGACY_FILE
        self._con: sqlite3.Connection | None = None

    def load(self) -> Snapshot | None:
        """The saved state, or None when there is none (a new data directory)."""
        if not self.path.exists() and self.legacy_path.exists():
            return self._load_legacy()
        if not self.path.exists():
            return None
        with damage_reported(self.path, DAMAGED):
            con = self._connection()
            rows = dict(con.execute("SELECT key, value FROM meta").fetchall())
            if rows.get("format", FORMAT) not in READABLE:
                raise ValueError(f"unknown format {rows['format']}")
            snap = Snapshot(next_id=int(rows.get("next_id", 1)))
            for (doc,) in con.execute("SELECT doc FROM groups"):
                snap.add(json.loads(doc))
            for (doc,) in con.execute("SELECT doc FROM progress"):  # after: they are newer
                snap.add({"progress": json.loads(doc)})
            return snap

    def _load_legacy(self) -> Snapshot:
        path = self.legacy_path
        try:
            doc = json.loads(path.read_bytes())
            if doc.pop("format") != LEGACY_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')}")
            return Snapshot(**doc, legacy=True)
        except (ValueError, TypeError, KeyError) as exc:
            # format 1 was replaced atomically, never left torn: this one was damaged
            raise self.damaged(exc, path) from None

    def damaged(self, exc: Exception, path: Path | None = None) -> DataFileDamaged:
        """The error for a state that does not load (a row that does not decode)."""
        path = path or (self.legacy_path if self.legacy_path.exists() else self.path)
        return DataFileDamaged(
            f"{path}: {DAMAGED} ({type(exc).__name__}: {str(exc)[:100]})", path=str(path)
        )

    def save(
        self, next_id: int, groups: dict[str, GroupDoc | None],
        progress: dict[str, ProgressRows] | None = None,
    ) -> None:  # fmt: skip
        """Write the given groups' documents (None: the group is gone), the progress of
        the groups whose progress alone changed, and the next id, all or none; returns
        once durable."""
        con = self._connection()
        states, reports = [], dict(progress or {})
        for name, doc in groups.items():
            if doc is not None:
                state = {part: rows for part, rows in doc.items() if part != "progress"}
                states.append((name, _json(state)))
            reports[name] = [] if doc is None else doc.get("progress", [])
        written = [(name, _json(rows)) for name, rows in reports.items() if rows]
        gone = [(name,) for name, doc in groups.items() if doc is None]
        unreported = [(name,) for name, rows in reports.items() if not rows]
        with damage_reported(self.path, DAMAGED):
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("INSERT OR REPLACE INTO meta VALUES ('next_id', ?)", (next_id,))
                con.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (FORMAT,))
                con.executemany("INSERT OR REPLACE INTO groups VALUES (?, ?)", states)
                con.executemany("DELETE FROM groups WHERE name = ?", gone)
                con.executemany("INSERT OR REPLACE INTO progress VALUES (?, ?)", written)
                con.executemany("DELETE FROM progress WHERE name = ?", unreported)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        if self.legacy_path.exists():
            # mnode.sqlite holds everything now (the first save after a legacy load
            # writes every group): the old file would shadow nothing, but confuse
            os.unlink(self.legacy_path)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def _connection(self) -> sqlite3.Connection:
        if self._con is None:
            con = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
            )
            try:
                with damage_reported(self.path, DAMAGED):
                    con.execute("PRAGMA journal_mode=WAL")
                    con.execute("PRAGMA synchronous=FULL")
                    con.executescript(_SCHEMA)
                    con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
            except BaseException:
                con.close()
                raise
            self._con = con
        return self._con


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))
