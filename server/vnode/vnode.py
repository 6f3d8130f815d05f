"""A vnode: one partition of a database, owning one WAL and its groups' committed offsets.

Opening one turns running out of file descriptors into `LimitExceeded` naming the
open-files limit (server/common/resources.py); `open_vnodes` (at start) and `create_vnodes` (a
new database) open many all or none. A data entry's form (which table owns it) lives in
`sql/entries.py`, shared with Spark.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqltopic.errors import SqlError
from sqltopic.server.common.resources import FileReserve, files_exceeded, out_of_files
from sqltopic.server.vnode.entry_names import EntryNames
from sqltopic.server.vnode.offsets import OffsetStore
from sqltopic.server.vnode.poll_times import PollTimes
from sqltopic.server.vnode.share_windows import ShareWindows
from sqltopic.sql.entries import (
    vnode_dir,
)
from sqltopic.sql.model import Database
from sqltopic.wal import Scheduler, Wal, WalOptions, WalReader
from sqltopic.wal.options import Clock, wall_clock_us

log = logging.getLogger(__name__)


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


# A subscription's lag_rows, lag_ms, last poll and last commit (µs) on a vgroup; None
# where not known (no position, no poll or commit yet)
Lag = tuple[int | None, int | None, int | None, int | None]


@dataclass
class Vnode:
    vgroup: int
    db: str
    wal: Wal
    offsets: OffsetStore
    # shared groups' delivery windows, kept beside the committed offsets
    shares: ShareWindows = field(init=False)
    # the tables of recent data entries, for reads that skip the entries of others
    entry_names: EntryNames = field(init=False, default_factory=EntryNames)
    # when each (subscription, group) last polled here (SHOW SUBSCRIPTIONS)
    poll_times: PollTimes = field(init=False, default_factory=PollTimes)

    def __post_init__(self) -> None:
        self.shares = ShareWindows(self.offsets, wall_clock_us)

    def lag(self, position: int, now_us: int) -> tuple[int, int]:
        """A reader at `position`: the data rows from there to the WAL's end, and the
        milliseconds since the first of its entries was written (0 when caught up)."""
        backlog = self.wal.reader().backlog(position)
        waited = backlog.first_ingest_us
        return backlog.rows, 0 if waited is None else max(0, (now_us - waited) // 1000)

    def subscription_lag(self, topic: str, group: str, position: int | None, now_us: int) -> Lag:
        """SHOW SUBSCRIPTIONS' lag_rows, lag_ms, last_poll and last_commit of (subscription,
        group) here, the first two from `position` (None: not known)."""
        last_poll = self.poll_times.last(topic, group)
        last_commit = self.offsets.committed_at(topic, group)
        if position is None:
            return (None, None, last_poll, last_commit)
        return (*self.lag(position, now_us), last_poll, last_commit)

    @classmethod
    def open(
        cls, data_dir: Path, database: Database, vgroup: int, *, clock: Clock,
        scheduler: Scheduler | None,
    ) -> Vnode:  # fmt: skip
        """Open (creating if needed) the vnode of `vgroup`. Its WAL's background work runs
        on `scheduler`; None runs none (tests that drive the clock themselves)."""
        try:
            return cls._open(data_dir, database, vgroup, clock, scheduler)
        except Exception as exc:
            if out_of_files(exc):
                what = f"opening vgroup {vgroup} of database {database.name}"
                raise files_exceeded(what, exc) from exc
            raise

    @classmethod
    def _open(
        cls, data_dir: Path, database: Database, vgroup: int, clock: Clock,
        scheduler: Scheduler | None,
    ) -> Vnode:  # fmt: skip
        home = vnode_dir(data_dir, vgroup)
        wal = Wal.open(
            home / "wal", wal_options(database.wal), clock=clock,
            background=scheduler is not None, scheduler=scheduler,
        )  # fmt: skip
        try:
            offsets = OffsetStore.open(home)
        except BaseException:
            wal.close()
            raise
        return cls(vgroup, database.name, wal, offsets)

    def reader(self) -> WalReader:
        return self.wal.reader()

    def forget(self, topic: str, group: str | None = None) -> None:
        """Forget a dropped topic's (or group's) offsets and shared windows, the windows
        first: no save of theirs lands after the offsets are gone."""
        self.shares.forget(topic, group)
        self.offsets.forget(topic, group)

    def close(self) -> None:
        try:
            self.wal.close()
        finally:
            self.offsets.close()


def open_vnodes(
    data_dir: Path, databases: Iterable[Database], *, clock: Clock, scheduler: Scheduler | None
) -> dict[int, Vnode]:
    """Open the vnodes of every database (the engine's start), all or none: after a
    failure the vnodes opened are closed again and the first failure is raised, e.g.
    LimitExceeded naming the vgroup that found no descriptor left."""
    # a vgroup placed on a dnode is that dnode's to open (a cluster's mnode opens none)
    local = [(db, v) for db in databases for v in db.vgroups if db.dnode_of(v) is None]
    reserve = _reserve(f"opening the {len(local)} vgroups in {data_dir}", len(local))
    vnodes: dict[int, Vnode] = {}
    try:
        for db, vgroup in local:
            vnodes[vgroup] = Vnode.open(data_dir, db, vgroup, clock=clock, scheduler=scheduler)
    except BaseException:
        reserve.release()  # a WAL's close writes its metadata: that takes descriptors
        _close_logged(vnodes.values(), "a failed start")
        raise
    finally:
        reserve.release()
    return vnodes


def create_vnodes(
    data_dir: Path, database: Database, *, clock: Clock, scheduler: Scheduler | None
) -> list[Vnode]:
    """Open the vnodes of a database being created, all or none: after a failure the
    vnodes opened are closed and every vgroup's directory is gone again. Running out of
    file descriptors raises LimitExceeded naming the open-files limit."""
    what = f"CREATE DATABASE {database.name} VGROUPS {len(database.vgroups)}"
    reserve = _reserve(what, len(database.vgroups))
    opened: list[Vnode] = []
    try:
        for vgroup in database.vgroups:
            opened.append(Vnode._open(data_dir, database, vgroup, clock, scheduler))
    except BaseException as exc:
        exhausted = out_of_files(exc)  # before closing anything: that frees descriptors
        reserve.release()
        discard_vnodes(data_dir, database.vgroups, opened)
        if exhausted:
            raise files_exceeded(what, exc, len(database.vgroups)) from exc
        raise
    finally:
        reserve.release()
    return opened


def discard_vnodes(data_dir: Path, vgroups: Iterable[int], opened: Iterable[Vnode]) -> None:
    """Undo a CREATE DATABASE that failed: close the vnodes it opened and delete the
    directories of its vgroups, whose ids the next CREATE DATABASE takes again."""
    _close_logged(opened, "a failed CREATE DATABASE")
    for vgroup in vgroups:
        shutil.rmtree(vnode_dir(data_dir, vgroup), ignore_errors=True)


def _reserve(what: str, vgroups: int) -> FileReserve:
    """Descriptors held back for the cleanup after a failure (closing WALs, deleting
    directories): without them the cleanup itself could run out and hide the cause."""
    try:
        return FileReserve()
    except OSError as exc:
        if out_of_files(exc):
            raise files_exceeded(what, exc, vgroups) from exc
        raise


def close_all(vnodes: Iterable[Vnode]) -> None:
    """Close every vnode, even when some fail; the first failure is raised after."""
    failure: BaseException | None = None
    for vnode in vnodes:
        try:
            vnode.close()
        except BaseException as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


def _close_logged(vnodes: Iterable[Vnode], after: str) -> None:
    """Close every vnode after a failure; their own failures are logged, so that the
    first one stays the error raised."""
    for vnode in vnodes:
        try:
            vnode.close()
        except Exception:
            log.exception("closing vnode %d after %s", vnode.vgroup, after)
