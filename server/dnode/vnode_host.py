"""A dnode's vnodes: the vgroups its mnode placed here, opened from the data directory
at start and kept in step with each heartbeat's answer (the placement is the mnode's;
the dnode follows it). The last placement followed is kept in `placed.json`, so a
restarted dnode opens its vgroups before its first heartbeat.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqltopic.errors import ConfigError, DataFileDamaged, Error
from sqltopic.server.common.rwlock import RWLock
from sqltopic.server.vnode.vnode import (
    WAL_OPTION_FIELDS,
    Vnode,
    close_all,
    create_vnodes,
    open_vnodes,
    wal_options,
)
from sqltopic.sql.entries import vnode_dir
from sqltopic.sql.model import Database
from sqltopic.sql.types import PRECISIONS, Precision
from sqltopic.wal import Scheduler
from sqltopic.wal.fsutil import atomic_write
from sqltopic.wal.options import Clock, wall_clock_us

log = logging.getLogger("sqltopic.dnode")

PLACED_FILE = "placed.json"
_DAMAGED = (
    "the dnode's placement file is damaged; restore it from a backup of the data directory "
    "(or delete it: the dnode then opens its vgroups again at its first heartbeat)"
)


@dataclass(frozen=True)
class Placed:
    """A vgroup placed on this dnode, with what opening its WAL needs."""

    database: str
    vgroup: int
    precision: Precision
    wal: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, database: str, vgroup: int, precision: str, wal: dict[str, int]) -> Placed:
        """ConfigError for a precision or WAL option no database can have."""
        if precision not in PRECISIONS:
            raise ConfigError(f"vgroup {vgroup}: precision {precision!r} is not ms, us or ns")
        unknown = sorted(set(wal) - WAL_OPTION_FIELDS.keys())
        if unknown:
            raise ConfigError(f"vgroup {vgroup}: unknown WAL option {unknown[0]!r}")
        wal_options(wal)  # SqlError naming a bad value
        return cls(database, vgroup, precision, dict(wal))

    def as_database(self) -> Database:
        # the vnode needs the database's name and options only; its other vgroups
        # live elsewhere and its creation time is the mnode's
        return Database(self.database, (self.vgroup,), self.precision, self.wal, 0)


class VnodeHost:
    """The open vnodes of a dnode. Thread-safe: heartbeats follow the placement on a
    worker thread while others read the vnodes' versions."""

    def __init__(
        self, data: Path, *, clock: Clock = wall_clock_us, scheduler: Scheduler | None = None
    ) -> None:
        self._data = data
        self._clock = clock
        self._scheduler = scheduler
        self._lock = threading.Lock()
        self._placed = {p.vgroup: p for p in _load(data)}
        self._vnodes: dict[int, Vnode] = open_vnodes(
            data, [p.as_database() for p in self._placed.values()],
            clock=clock, scheduler=scheduler,
        )  # fmt: skip

    @property
    def live(self) -> dict[int, Vnode]:
        """The open vnodes by vgroup: the very dict `follow` changes (under the lock it
        is given), for the dnode's engine to serve."""
        return self._vnodes

    def follow(self, placed: Iterable[Placed], lock: RWLock | None = None) -> None:
        """Host exactly `placed`: open (create) the new vgroups, apply changed WAL
        options, close and delete the vgroups no longer placed here; holding `lock`
        (the dnode engine's) alone while the vnodes change."""
        wanted = {p.vgroup: p for p in placed}
        with self._lock:
            if wanted == self._placed:
                return
        with lock.exclusive() if lock is not None else contextlib.nullcontext(), self._lock:
            if wanted == self._placed:
                return
            gone = sorted(self._placed.keys() - wanted.keys())
            for vgroup, p in sorted(wanted.items()):
                before = self._placed.get(vgroup)
                if before is None:
                    self._vnodes.update(self._open(p))
                elif before.wal != p.wal:
                    self._vnodes[vgroup].wal.set_options(wal_options(p.wal))
                self._placed[vgroup] = p
            # kept before the drops: a crash then leaves a directory no one opens, never
            # a placement naming a vgroup whose directory is gone
            kept = [asdict(p) for v, p in self._placed.items() if v not in gone]
            atomic_write(self._data / PLACED_FILE, json.dumps(kept).encode())
            for vgroup in gone:
                self._drop(vgroup)

    def _open(self, placed: Placed) -> dict[int, Vnode]:
        db = placed.as_database()
        if vnode_dir(self._data, placed.vgroup).exists():  # kept from before: open it
            return open_vnodes(self._data, [db], clock=self._clock, scheduler=self._scheduler)
        opened = create_vnodes(self._data, db, clock=self._clock, scheduler=self._scheduler)
        log.info("hosting vgroup %d of database %s", placed.vgroup, placed.database)
        return {v.vgroup: v for v in opened}

    def _drop(self, vgroup: int) -> None:
        vnode = self._vnodes.pop(vgroup, None)
        placed = self._placed.pop(vgroup)
        if vnode is not None:
            vnode.close()
        shutil.rmtree(vnode_dir(self._data, vgroup), ignore_errors=True)
        log.info("dropped vgroup %d of database %s", vgroup, placed.database)

    def vnodes(self) -> dict[int, Vnode]:
        """The open vnodes by vgroup, as they are now."""
        with self._lock:
            return dict(self._vnodes)

    def versions(self) -> list[tuple[int, int, int]]:
        """(vgroup, first retained version, last version) of every hosted vgroup."""
        with self._lock:
            return [
                (vgroup, vnode.wal.first_version, vnode.wal.last_version)
                for vgroup, vnode in sorted(self._vnodes.items())
            ]

    def close(self) -> None:
        with self._lock:
            vnodes = list(self._vnodes.values())
            self._vnodes.clear()
        close_all(vnodes)


def _load(data: Path) -> list[Placed]:
    path = data / PLACED_FILE
    try:
        raw = json.loads(path.read_text())
        return [
            Placed.of(str(p["database"]), int(p["vgroup"]), str(p["precision"]),
                      {str(k): int(v) for k, v in p["wal"].items()})
            for p in raw
        ]  # fmt: skip
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError, AttributeError, Error) as exc:
        raise DataFileDamaged(
            f"{path}: {_DAMAGED} ({type(exc).__name__})", path=str(path)
        ) from None
