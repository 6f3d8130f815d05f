"""The WAL of one vnode: append with WAL_LEVEL durability, roll, retention, recovery.

`Wal.open(directory, options)` takes the directory's lock, recovers, and returns a WAL
ready to append. Appends at level 2 share fsyncs (group commit): whoever finds no sync
running starts one that covers every byte written so far, and the others wait for it.
Readers only ever see versions that are durable at the WAL's level, so a consumer can
never read an entry that a crash then takes back. Timed work (level-1 fsyncs, the roll
period, retention) is one task on a background `Scheduler` shared with other WALs.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from sqltopic.errors import VersionOrderError, WalClosedError, WalError
from sqltopic.wal.background import Scheduler, Task
from sqltopic.wal.codec import WalEntry
from sqltopic.wal.fsutil import DirectoryLock, fsync_dir
from sqltopic.wal.meta import SegmentMeta, WalMeta, load_meta, save_meta
from sqltopic.wal.notify import VersionNotifier
from sqltopic.wal.options import INITIAL_VERSION, Clock, WalOptions, wall_clock_us
from sqltopic.wal.reader import WalReader, WalState
from sqltopic.wal.record import (
    FLAG_GROUP_END,
    MAX_BODY_BYTES,
    EntryType,
    checksum,
    encode_header,
    padded_size,
    padding,
)
from sqltopic.wal.recovery import Recovered, TailCut, recover
from sqltopic.wal.retention import SegmentFacts, deletable_prefix
from sqltopic.wal.segment import Segment
from sqltopic.wal.stats import WalStats

log = logging.getLogger(__name__)

# How often the background task looks at retention and the roll period: both work in
# seconds, so checking every second costs nothing and is never late by much.
MAINTENANCE_INTERVAL_S = 1.0


class Wal:
    """A writable WAL directory. Thread-safe; one instance per directory (locked)."""

    def __init__(
        self,
        directory: Path,
        options: WalOptions,
        recovered: Recovered,
        lock: DirectoryLock,
        clock: Clock,
    ) -> None:
        self.directory = directory
        self._options = options
        self._clock = clock
        self._lock = threading.Lock()
        self._dir_lock = lock
        self.tail_cut: TailCut | None = recovered.tail_cut
        segs = recovered.segments
        self._sealed: list[Segment] = [s for s in segs if s.sealed]
        self._active: Segment | None = segs[-1] if segs and not segs[-1].sealed else None
        self._removed_below = recovered.removed_below
        self._next = recovered.next_version  # the next version to assign
        self._last = segs[-1].last_version if segs else self._next - 1
        # the newest entry's ingest time: appends never stamp an earlier one (a clock
        # stepped back), so entries are ordered by time as by version (`version_at`)
        self._last_ingest = _last_ingest(segs)
        self.stats = WalStats()  # what /metrics reads (wal/stats.py)
        self._written_seq = 0  # bytes appended since open; fsync coverage is tracked in it
        self._synced_seq = 0
        self._visible_seq = 0  # readers see the entries within these bytes
        self._sync_cond = threading.Condition()
        self._sync_running = False
        self._failure: WalError | None = None
        self._closed = False
        self._notifier = VersionNotifier(self._next)
        self._state = WalState(tuple(segs), self._next, self._last, self._removed_below)
        self._task: Task | None = None  # the background task, woken by eager level-1 appends
        self._own_scheduler: Scheduler | None = None  # made for this WAL alone, if it was
        self._last_sync = self._last_maintain = 0.0  # monotonic; the background task's own
        if recovered.meta_stale:
            self._save_meta()

    # --- opening and closing ------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        options: WalOptions | None = None,
        *,
        clock: Clock = wall_clock_us,
        background: bool = True,
        scheduler: Scheduler | None = None,
    ) -> Wal:
        """Open (creating if needed) the WAL in `directory` for writing.

        `background` runs the task that syncs level-1 WALs every WAL_FSYNC_PERIOD and
        applies the roll period and retention, on `scheduler` (shared with other WALs;
        without one, on a one-thread scheduler of this WAL's own); tests that drive time
        themselves turn it off.
        """
        if scheduler is not None and not background:
            raise ValueError("a scheduler was given for a WAL opened with background=False")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(path)
        try:
            recovered = recover(
                path, load_meta(path), repair=True, initial_version=INITIAL_VERSION, now_us=clock()
            )
            wal = cls(path, options or WalOptions(), recovered, lock, clock)
        except BaseException:
            lock.release()
            raise
        if recovered.tail_cut:
            log.warning(
                "WAL %s: cut a torn tail of %d bytes at offset %d",
                path,
                recovered.tail_cut.bytes_removed,
                recovered.tail_cut.offset,
            )
        if background:
            try:
                wal._start_background(scheduler)
            except BaseException:
                wal.close()
                raise
        return wal

    def close(self) -> None:
        """Sync everything, record a clean state in the metadata and release the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop_background()
        with self._lock:
            try:
                if self._active is not None and self._failure is None:
                    try:
                        self._active.sync_all()
                    except OSError as exc:
                        raise self._fail("fsync at close", exc) from exc
                    self._save_meta()
                    self._refresh_state(self._written_seq)
            finally:
                for seg in self._segments():
                    seg.release()
                self._dir_lock.release()
        self._publish(self._next)

    def __enter__(self) -> Wal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- facts ---------------------------------------------------------------------------

    @property
    def options(self) -> WalOptions:
        return self._options

    def set_options(self, options: WalOptions) -> None:
        """Apply changed WAL_* options (ALTER DATABASE); they take effect at once."""
        with self._lock:
            self._options = options
        if self._task is not None:
            self._task.wake()  # its next look follows the new period

    def state(self) -> WalState:
        return self._state

    def reader(self) -> WalReader:
        return WalReader(self.state, self._notifier)

    @property
    def first_version(self) -> int:
        return self._state.first_version

    @property
    def last_version(self) -> int:
        return self._state.last_version

    @property
    def next_version(self) -> int:
        return self._state.next_version

    @property
    def notifier(self) -> VersionNotifier:
        return self._notifier

    def size_bytes(self) -> int:
        return sum(s.size for s in self._state.segments)

    # --- appending -----------------------------------------------------------------------

    def append(self, entries: Sequence[WalEntry]) -> list[int]:
        """Append entries in order; returns their versions once durable at WAL_LEVEL.

        All or nothing: a failed append leaves nothing behind (the log is cut back), and
        after a crash during one, recovery cuts its entries whole (the last entry of every
        append carries the group-end flag).
        """
        if not entries:
            return []
        began = time.perf_counter()
        prepared = [_prepare(e) for e in entries]  # checksums outside the lock
        with self._lock:
            self._check_writable()
            versions = self._assign_versions(entries)
            self._maybe_roll()
            self._write(prepared, versions)
            ticket, level = self._written_seq, self._options.level
            eager = level == 1 and self._options.fsync_period_ms == 0
            if level == 1:
                self._refresh_state(ticket)
        if level == 1:
            if eager and self._task is not None:
                self._task.wake()
        else:
            self._sync_to(ticket)
        self._publish(self._state.next_version)
        elapsed = time.perf_counter() - began
        with self._lock:
            self.stats.appends.observe(elapsed)
        return versions

    def _check_writable(self) -> None:
        if self._closed:
            raise WalClosedError(f"WAL {self.directory} is closed")
        if self._failure is not None:
            raise self._failure

    def _assign_versions(self, entries: Sequence[WalEntry]) -> list[int]:
        versions: list[int] = []
        last = self._next - 1
        for e in entries:
            v = last + 1 if e.version is None else e.version
            if v <= last:
                raise VersionOrderError(
                    f"version {v} is not above the version before it ({last}); versions must rise"
                )
            versions.append(v)
            last = v
        return versions

    def _write(self, prepared: list[tuple[WalEntry, int, int]], versions: list[int]) -> None:
        now = self._last_ingest = max(self._clock(), self._last_ingest)
        if self._active is None:
            self._active = Segment.create(self.directory, versions[0], now)
        buffers: list[object] = []
        sizes: list[int] = []
        last = len(versions) - 1
        for i, ((entry, length, body_hash), version) in enumerate(
            zip(prepared, versions, strict=True)
        ):
            flags = FLAG_GROUP_END if i == last else 0
            buffers += [
                encode_header(version, now, entry.entry_type, length, body_hash, flags),
                entry.body,
                padding(length),
            ]
            sizes.append(padded_size(length))
        try:
            self._active.append(buffers, versions, sizes)
        except OSError as exc:
            if self._active.broken:
                raise self._fail("cutting back a failed write", exc) from exc
            if not len(self._active.index):
                # An empty segment is named by a version that was never written: drop it,
                # so the next append (maybe at another version) starts a correctly named one.
                self._active.delete_files()
                self._active = None
            raise
        rows = [entry.rows for entry, _, _ in prepared]
        self._active.rows.noted(len(self._active.index) - len(versions), rows)
        self.stats.rows += sum(n for n in rows if n is not None)
        self.stats.bytes += sum(length for _, length, _ in prepared)
        self._written_seq += sum(sizes)
        self._next, self._last = versions[-1] + 1, versions[-1]

    # --- durability ----------------------------------------------------------------------

    def sync(self) -> None:
        """Make every append so far durable (what level 2 does before each ack)."""
        with self._lock:
            ticket = self._written_seq
        self._sync_to(ticket)
        self._publish(self._state.next_version)

    @property
    def unsynced_bytes(self) -> int:
        """Bytes appended since open that no fsync covers yet (level 1 between syncs)."""
        return self._written_seq - self._synced_seq

    def _sync_to(self, ticket: int) -> None:
        """Return once bytes up to `ticket` are fsynced, leading a sync if none runs."""
        while True:
            with self._sync_cond:
                while self._synced_seq < ticket and self._sync_running:
                    self._sync_cond.wait()
                if self._synced_seq >= ticket:
                    return
                self._sync_running = True
            covered = 0
            try:
                covered = self._sync_once()
            finally:
                with self._sync_cond:
                    self._sync_running = False
                    self._synced_seq = max(self._synced_seq, covered)
                    self._sync_cond.notify_all()

    def _sync_once(self) -> int:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            seq, seg = self._written_seq, self._active
            end = seg.size if seg is not None else 0  # the active log's bytes this sync covers
            if seg is None or not seg.is_open:
                # No active segment: sealing synced everything. A released one: close did.
                self._refresh_state(seq)
                return seq
            fd = seg.dup_log_fd()
        began = time.perf_counter()
        try:
            os.fsync(fd)
        except OSError as exc:
            with self._lock:
                failure = self._fail("fsync", exc)
            raise failure from exc
        finally:
            os.close(fd)
        with self._lock:
            self.stats.fsyncs.observe(time.perf_counter() - began)
            # Entries appended while this sync ran stay hidden until their own sync.
            self._refresh_state(seq)
            if seg is self._active:  # recorded with the next metadata write
                seg.synced_size = max(seg.synced_size, end)
        return seq

    # --- rolling and retention ---------------------------------------------------------

    def _maybe_roll(self) -> None:
        seg = self._active
        if seg is None or not len(seg.index):
            return
        opts = self._options
        too_big = opts.segment_size_bytes > 0 and seg.size >= opts.segment_size_bytes
        too_old = (
            opts.roll_period_s > 0
            and self._clock() - seg.create_us >= opts.roll_period_s * 1_000_000
        )
        if too_big or too_old:
            self._roll()

    def _roll(self) -> None:
        """Under the lock: seal the active segment; the next append starts a new one."""
        seg = self._active
        assert seg is not None
        try:
            seg.seal(self._clock())
        except OSError as exc:
            raise self._fail("sealing a segment", exc) from exc
        self._sealed.append(seg)
        self._active = None
        with self._sync_cond:  # sealing fsynced every byte written so far
            self._synced_seq = max(self._synced_seq, self._written_seq)
        self._refresh_state(self._written_seq)
        self._save_meta()

    def roll(self) -> None:
        """Seal the active segment now (if it holds anything)."""
        with self._lock:
            self._check_writable()
            if self._active is not None and len(self._active.index):
                self._roll()
        self._publish(self._state.next_version)

    def maintain(self) -> list[int]:
        """Apply the roll period and retention now; returns first versions deleted."""
        with self._lock:
            if self._closed or self._failure is not None:
                return []
            self._maybe_roll()
            doomed = self._take_expired()
        for seg in doomed:
            seg.delete_files()
        if doomed:
            fsync_dir(self.directory)
        self._publish(self._state.next_version)
        return [s.first_version for s in doomed]

    def _take_expired(self) -> list[Segment]:
        facts = [SegmentFacts(s.size, s.close_us) for s in self._segments()]
        n = deletable_prefix(facts, self._options, self._clock())
        if n == 0:
            return []
        doomed, kept = self._sealed[:n], self._sealed[n:]
        removed_below = max(self._removed_below, doomed[-1].last_version + 1)
        # The metadata goes first: if writing it fails nothing changed, and a crash
        # before the unlink is finished off at the next open.
        self._save_meta(kept + self._active_list(), removed_below)
        self._sealed, self._removed_below = kept, removed_below
        self._refresh_state()
        return doomed

    # --- background ----------------------------------------------------------------------

    def _start_background(self, scheduler: Scheduler | None) -> None:
        if scheduler is None:
            scheduler = self._own_scheduler = Scheduler(1, name=f"wal-{self.directory.name}")
        self._last_sync = self._last_maintain = time.monotonic()
        self._task = scheduler.schedule(
            self._background, name=f"WAL {self.directory}", delay=_tick(self._options)
        )

    def _stop_background(self) -> None:
        """Cancel the task; once this returns no run of it is in progress or to come."""
        if self._task is not None:
            self._task.cancel()
        if self._own_scheduler is not None:
            self._own_scheduler.close()

    def _background(self) -> float | None:
        """One look: a level-1 sync when due, the roll period and retention once a
        second. Returns the seconds until the next look; None ends the task."""
        if self._closed:
            return None
        opts = self._options
        now = time.monotonic()
        try:
            eager = opts.level == 1 and opts.fsync_period_ms == 0
            due = eager or now - self._last_sync >= opts.fsync_period_ms / 1000
            if opts.level == 1 and due and self._written_seq > self._synced_seq:
                self.sync()
                self._last_sync = now
            if now - self._last_maintain >= MAINTENANCE_INTERVAL_S:
                self._last_maintain = now
                self.maintain()
        except (WalError, OSError):
            log.exception("WAL %s background work failed", self.directory)
            if self._failure is not None:
                return None  # appends report the failure; nothing more to do here
        return _tick(opts)

    # --- shared helpers ------------------------------------------------------------------

    def _segments(self) -> list[Segment]:
        return self._sealed + self._active_list()

    def _active_list(self) -> list[Segment]:
        return [self._active] if self._active is not None else []

    def _fail(self, what: str, exc: OSError) -> WalError:
        """Under the lock: after a failed fsync the kernel may have dropped dirty pages, so
        nothing written since the last good sync can be trusted: stop taking writes."""
        self._failure = WalError(
            f"{what} of WAL {self.directory} failed: {exc}; reopen the WAL to recover"
        )
        return self._failure

    def _refresh_state(self, visible_seq: int | None = None) -> None:
        """Under the lock: publish a new state to readers, covering the entries within
        the first `visible_seq` bytes appended (never fewer than already visible)."""
        if visible_seq is not None:
            self._visible_seq = max(self._visible_seq, visible_seq)
        nxt, last = self._next, self._last
        if self._visible_seq < self._written_seq:
            nxt, last = self._visible_bound()
        self._state = WalState(tuple(self._segments()), nxt, last, self._removed_below)

    def _visible_bound(self) -> tuple[int, int]:
        """Next and last version among the visible entries. Unsynced bytes are all in
        the active segment, since sealing a segment syncs it."""
        seg = self._active
        assert seg is not None
        end = seg.size - (self._written_seq - self._visible_seq)
        # A record starting before `end` also ends by it: records are written whole.
        count = bisect.bisect_left(seg.index.offsets, end)
        if count == 0:
            return self._state.next_version, self._state.last_version
        last = seg.index.versions[count - 1]
        return last + 1, last

    def _save_meta(
        self, segments: list[Segment] | None = None, removed_below: int | None = None
    ) -> None:
        segs = tuple(
            SegmentMeta(
                s.first_version,
                s.last_version,
                len(s.index),
                s.size,
                s.synced_size,
                s.create_us,
                s.close_us,
            )
            for s in (self._segments() if segments is None else segments)
        )
        below = self._removed_below if removed_below is None else removed_below
        save_meta(self.directory, WalMeta(self._next, below, segs))

    def _publish(self, next_version: int) -> None:
        self._notifier.publish(next_version)


def _prepare(entry: WalEntry) -> tuple[WalEntry, int, int]:
    if not isinstance(entry.entry_type, EntryType):
        raise TypeError(f"entry_type must be an EntryType, got {entry.entry_type!r}")
    view = memoryview(entry.body)
    if view.nbytes > MAX_BODY_BYTES:
        raise ValueError(f"WAL entry body of {view.nbytes} bytes exceeds {MAX_BODY_BYTES}")
    return entry, view.nbytes, checksum(view)


def _tick(opts: WalOptions) -> float:
    """The time between two looks of the background task. At level 1 with
    WAL_FSYNC_PERIOD 0 every append wakes it, so it need not look more often."""
    if opts.level == 1 and opts.fsync_period_ms > 0:
        return min(opts.fsync_period_ms / 1000, MAINTENANCE_INTERVAL_S)
    return MAINTENANCE_INTERVAL_S


def _last_ingest(segments: Sequence[Segment]) -> int:
    """The ingest time of the newest entry among `segments` (0 when they hold none)."""
    for seg in reversed(segments):
        if len(seg.index):
            return seg.ingest_of(len(seg.index) - 1)
    return 0
