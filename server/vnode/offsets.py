"""Committed offsets of consumer groups, kept durably on the vnode they belong to.

Each vnode directory holds `offsets.sqlite`: one row per (topic, group) with the next
version the group will read there. For a shared group the row holds its window
(server/vnode/share_window.py): the next version is the window's start, `acked` the rows
acknowledged past it, so that an acknowledgement is durable once its commit returns,
and `counts` how often the rows not done yet were delivered.
SQLite in WAL mode with `synchronous=FULL` makes a commit durable before it returns and
never leaves a torn file, so a committed offset survives `kill -9` and power loss
exactly like an acknowledged write. A commit of several
offsets is one transaction: all of them or none. The connection holds the file in
exclusive locking mode: SQLite then keeps its WAL index in memory instead of a `-shm`
file, so a vnode's offsets keep two descriptors open (the file and its `-wal`), not three.

Commits that arrive together share one transaction (group commit), so that hundreds of
auto-committing consumers cost a few fsyncs, not one each. A committer that finds no
leader becomes one: it takes every queued commit, stores them in one transaction,
updates the cache in queue order and wakes them all; commits arriving meanwhile queue,
and the first of them leads the next group. A lone commit never waits for company. When
the transaction fails, every commit of its group gets the error and none reaches the
cache. Interrupting a waiting commit (KeyboardInterrupt in the main thread) is not
supported: its commit stays queued and may stall the next hand-over; the server commits
from worker threads, which never get one.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

from sqltopic.server.common.group_names import LANE_SEP, of_group
from sqltopic.server.vnode.row_runs import runs_of_lists
from sqltopic.server.vnode.share_window import Run
from sqltopic.sql.catalog_store import damage_reported
from sqltopic.sql.topic.params import SUBSCRIPTION_SEP, topic_of

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
    acked BLOB,
    counts BLOB,
    PRIMARY KEY (topic, grp)
) WITHOUT ROWID
"""
_UPSERT = (
    "INSERT INTO committed (topic, grp, next_version, updated_us, acked, counts) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic, grp) DO "
    "UPDATE SET next_version = excluded.next_version, updated_us = excluded.updated_us, "
    "acked = excluded.acked, counts = excluded.counts"
)

# A stored row: topic, group, next version, commit time in µs, and for a shared group the
# rows acknowledged at or past the next version (`encode_acked`) and the delivery counts
# of the rows not done (`encode_counts`); None for other groups.
_Row = tuple[str, str, int, int, bytes | None, bytes | None]
# (subscription, group): what a stored row is keyed by
_Key = tuple[str, str]
# A shared group's window as stored: acknowledged rows and delivery counts, encoded.
_Encoded = tuple[bytes, bytes | None]
# A shared group's stored window: its start, acknowledged rows, delivery counts.
ShareState = tuple[int, tuple[Run, ...], tuple[tuple[Run, int], ...]]


@dataclass(slots=True)
class _Commit:
    """One caller's commit in the queue: its rows, then its outcome, set by the leader
    whose group took it. A caller that must wait blocks on `wake`, a lock taken for it
    that the leader releases once: when its group is done, or to make it the next leader.
    (A bare lock, not a Condition: the woken caller need not take the store's mutex
    again, so a group of followers does not convoy on it; and a commit that leads at once
    makes none.)"""

    rows: list[_Row]
    wake: threading.Lock | None = None
    done: bool = False
    error: BaseException | None = None


class OffsetStore:
    """The committed offsets of one vnode. Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Guards the queue, `_leading`, each queued commit's outcome, and the cache; held
        # only for moments, never across SQLite calls, so reads never wait for a fsync.
        self._mutex = threading.Lock()
        # Owns the connection: one group transaction, `forget` or `close` at a time. The
        # cache changes under it too, so cache and file see writes in the same order.
        self._write = threading.Lock()
        self._queue: list[_Commit] = []
        self._leading = False
        # Group transactions committed since open: with `commit` calls counted by the
        # caller, how well commits were grouped (tests and bench/offsets_bench.py).
        self.transactions = 0
        self._con = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
        try:
            with damage_reported(path, OFFSETS_DAMAGED):
                self._cache, self._acked, self._updated = _prepare(self._con)
        except BaseException:
            self._con.close()
            raise

    @classmethod
    def open(cls, vnode_dir: Path) -> OffsetStore:
        vnode_dir.mkdir(parents=True, exist_ok=True)
        return cls(vnode_dir / OFFSETS_FILE)

    def get(self, topic: str, group: str) -> int | None:
        """The group's committed offset on this vnode, or None if it never committed."""
        with self._mutex:
            return self._cache.get((topic, group))

    def committed_at(self, topic: str, group: str) -> int | None:
        """When the group last committed on this vnode (µs since the epoch), or None."""
        with self._mutex:
            return self._updated.get((topic, group))

    def commit(self, offsets: Iterable[tuple[str, str, int]], now_us: int) -> None:
        """Store (topic, group, next_version) rows durably and all or none; returns once
        the transaction holding them (shared with concurrent commits) is on disk."""
        self._enqueue(
            [(topic, group, offset, now_us, None, None) for topic, group, offset in offsets]
        )

    def commit_share(
        self, topic: str, group: str, start: int, acked: Iterable[Run], now_us: int,
        counts: Iterable[tuple[Run, int]] = (),
    ) -> None:  # fmt: skip
        """Store a shared group's window durably (server/vnode/share_window.py): every row
        before version `start` is done, `acked` are the rows acknowledged past it, and
        `counts` the delivery counts of rows not done; returns once on disk, grouped with
        concurrent commits as `commit` is."""
        row = (topic, group, start, now_us, encode_acked(acked), encode_counts(counts))
        self._enqueue([row])

    def share_state(self, topic: str, group: str) -> ShareState | None:
        """A shared group's stored window: its start, the rows acknowledged past it and
        the delivery counts of rows not done; None when the group has no committed
        offset here."""
        with self._mutex:
            offset = self._cache.get((topic, group))
            encoded = self._acked.get((topic, group))
        if offset is None:
            return None
        with damage_reported(self.path, OFFSETS_DAMAGED):
            acked, counts = encoded if encoded is not None else (None, None)
            return offset, decode_acked(acked), decode_counts(counts)

    def _enqueue(self, rows: list[_Row]) -> None:
        if not rows:
            return
        mine = _Commit(rows)
        with self._mutex:
            self._queue.append(mine)
            if self._leading:
                mine.wake = threading.Lock()
                mine.wake.acquire()
            else:
                self._leading = True
        if mine.wake is not None:
            mine.wake.acquire()  # released by a leader: our group is done, or we lead next
        if not mine.done:
            self._lead(mine)
        # Only the leader of its group writes the outcome, before releasing us (or it is
        # us): reading it here needs no lock.
        if mine.error is not None:
            # The same exception object in every thread of the group, as
            # concurrent.futures.Future.result() does for its waiters.
            raise mine.error

    def _lead(self, mine: _Commit) -> None:
        """Store every queued commit (`mine` among them) in one transaction, then hand
        over to the next leader: the first commit queued meanwhile, if any."""
        batch: list[_Commit] = []
        error: BaseException | None = None
        try:
            with self._write:
                with self._mutex:  # under the write lock: all that queued while it waited
                    batch, self._queue = self._queue, []
                error = self._store([row for commit in batch for row in commit.rows])
        finally:
            with self._mutex:
                for commit in batch:
                    commit.error = error
                    commit.done = True
                    if commit.wake is not None:
                        commit.wake.release()
                if not mine.done:  # interrupted before taking the queue: withdraw
                    self._queue.remove(mine)
                # Leadership passes straight to the first waiter (every queued commit
                # waits: only the leader's own had no `wake`, and it is gone from the
                # queue), so no newcomer can slip ahead of those queued.
                self._leading = bool(self._queue)
                if self._queue and (first := self._queue[0].wake) is not None:
                    first.release()

    def _store(self, rows: list[_Row]) -> BaseException | None:
        """One transaction of `rows`, then the cache in their order; the error, if any,
        for every commit of the group (the cache then keeps the previous offsets)."""
        try:
            self._transaction(_UPSERT, rows)
        except BaseException as exc:  # reported to each committer, the leader included
            return exc
        self.transactions += 1
        with self._mutex:
            for topic, group, offset, updated_us, acked, counts in rows:
                self._cache[topic, group] = offset
                self._updated[topic, group] = updated_us
                if acked is None:
                    self._acked.pop((topic, group), None)
                else:
                    self._acked[topic, group] = (acked, counts)
        return None

    def forget(self, topic: str, group: str | None = None) -> None:
        """Remove the offsets of `topic` (DROP TOPIC), or of one group on it with its
        broadcast lanes (DROP CONSUMER GROUP), its bindings' (`topic?key`) included. A
        commit of them queued meanwhile lands after: ordered like one that arrived
        after the drop."""
        of_topic = "(topic = ? OR substr(topic, 1, ?) = ?)"
        bound = (topic, len(topic) + 1, topic + SUBSCRIPTION_SEP)
        with self._write:
            if group is None:
                self._transaction(f"DELETE FROM committed WHERE {of_topic}", [bound])
            else:  # the group's broadcast lanes (`group:client`) too
                of_group_sql = "(grp = ? OR substr(grp, 1, ?) = ?)"
                lanes = (group, len(group) + 1, group + LANE_SEP)
                self._transaction(
                    f"DELETE FROM committed WHERE {of_topic} AND {of_group_sql}",
                    [(*bound, *lanes)],
                )
            with self._mutex:
                gone = [
                    k for k in self._cache
                    if topic_of(k[0]) == topic and (group is None or of_group(k[1], group))
                ]  # fmt: skip
                for key in gone:
                    del self._cache[key]
                    self._acked.pop(key, None)
                    self._updated.pop(key, None)

    def groups(self, topic: str) -> dict[str, int]:
        """Every group with an offset on `topic` here, and that offset."""
        with self._mutex:
            return {g: off for (t, g), off in self._cache.items() if t == topic}

    def subscriptions(self, topic: str) -> list[tuple[str, str]]:
        """Every (subscription, group) with an offset here on `topic` or its bindings."""
        with self._mutex:
            return [(t, g) for t, g in self._cache if topic_of(t) == topic]

    def _transaction(self, sql: str, rows: Sequence[tuple[object, ...]]) -> None:
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            con.executemany(sql, rows)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:  # SQLite may have rolled back already (I/O error, full disk)
                con.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._write:
            self._con.close()


def _prepare(
    con: sqlite3.Connection,
) -> tuple[dict[_Key, int], dict[_Key, _Encoded], dict[_Key, int]]:
    """Set the connection up and read every committed offset, the acknowledged rows of
    shared groups (still encoded: decoded when their window is made), and when each
    was committed."""
    # Before the first access: only then does SQLite keep the WAL index in memory. The
    # vnode's WAL lock already keeps any other writer away from this directory.
    con.execute("PRAGMA locking_mode=EXCLUSIVE")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(_SCHEMA)
    columns = {row[1] for row in con.execute("PRAGMA table_info(committed)")}
    if "acked" not in columns:  # a file from before shared groups
        con.execute("ALTER TABLE committed ADD COLUMN acked BLOB")
    if "counts" not in columns:  # a file from before delivery counts were kept
        con.execute("ALTER TABLE committed ADD COLUMN counts BLOB")
    offsets, acked, updated = {}, {}, {}
    for topic, group, offset, updated_us, rows, counts in con.execute(
        "SELECT topic, grp, next_version, updated_us, acked, counts FROM committed"
    ):
        offsets[topic, group] = offset
        updated[topic, group] = updated_us
        if rows is not None:
            acked[topic, group] = (bytes(rows), bytes(counts) if counts is not None else None)
    return offsets, acked, updated


def encode_acked(runs: Iterable[Run]) -> bytes:
    """Acknowledged rows (as runs, sorted) as stored: one (version, index) pair per
    row, sorted, as little-endian 64-bit integers."""
    flat = array("q")
    for version, lo, hi in runs:
        pairs = array("q", range(2 * lo, 2 * hi))  # every even slot is a version
        pairs[::2] = array("q", repeat(version, hi - lo))
        pairs[1::2] = array("q", range(lo, hi))
        flat += pairs
    return _stored(flat)


def decode_acked(data: bytes | None) -> tuple[Run, ...]:
    """The rows `encode_acked` stored, as runs; ValueError for bytes it cannot have
    written."""
    if not data:
        return ()
    flat = _loaded(data, 2, "acknowledged rows")
    versions, indexes = flat[::2], flat[1::2]
    if min(versions) < 0 or min(indexes) < 0:
        raise ValueError("a negative version or row index among the acknowledged rows")
    return tuple(runs_of_lists(versions, indexes))


def encode_counts(counts: Iterable[tuple[Run, int]]) -> bytes:
    """Delivery counts as stored: (version, first row, end row, count) per run, as
    little-endian 64-bit integers."""
    return _stored(
        array("q", (n for (version, lo, hi), count in counts for n in (version, lo, hi, count)))
    )


def decode_counts(data: bytes | None) -> tuple[tuple[Run, int], ...]:
    """The counts `encode_counts` stored (none for a row written before they were
    kept); ValueError for bytes it cannot have written."""
    if not data:
        return ()
    flat = _loaded(data, 4, "delivery counts")
    out = []
    for at in range(0, len(flat), 4):
        version, lo, hi, count = flat[at : at + 4]
        if version < 0 or lo < 0 or hi <= lo or count < 1:
            raise ValueError(f"a delivery count run {(version, lo, hi, count)} out of range")
        out.append(((version, lo, hi), count))
    return tuple(out)


def _stored(flat: array[int]) -> bytes:
    """64-bit integers as stored: little-endian."""
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def _loaded(data: bytes, width: int, what: str) -> array[int]:
    """The 64-bit integers `_stored` wrote, in groups of `width`; ValueError otherwise."""
    if len(data) % (8 * width):
        raise ValueError(f"{len(data)} bytes of {what}, not groups of {width} int64")
    flat = array("q")
    flat.frombytes(data)
    if sys.byteorder != "little":
        flat.byteswap()
    return flat
