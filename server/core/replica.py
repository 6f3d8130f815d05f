"""A dnode's copy of its mnode's catalog: the changes the mnode logged, applied in order
(server/core/state.py logs them, sql/catalog_store.py keeps both sides) to the dnode
engine's catalog, in memory and in `catalog.sqlite`, each one's DDL events appended to
the WALs of the vgroups this dnode hosts, and the offsets of dropped topics and groups
forgotten.

A change is applied once, under the engine's exclusive lock: a write or read on the dnode
sees the catalog before or after it, never half of it. Its events reach a WAL before
the change is recorded as applied (`catalog.sqlite`, one transaction); after a crash in
between, the change is applied again, and a WAL that already ends with its events (the
same bytes) is not written again. Nothing else is appended to a dnode's WALs before it
caught up with its mnode's changes (it serves nothing before), so they are its last
entries.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from sqltopic.errors import ConfigError
from sqltopic.server.core.state import State
from sqltopic.server.core.topic_reader import prepare
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.catalog_store import apply_change
from sqltopic.sql.change_log import Change
from sqltopic.wal import EntryType, WalEntry

log = logging.getLogger("sqltopic.dnode")


class Replica:
    """The catalog changes a dnode engine applied, and how to apply more."""

    def __init__(self, state: State) -> None:
        self._state = state
        self._log = state.store.log
        self._applied = self._log.applied()
        self._moved = threading.Condition()

    @property
    def applied(self) -> int:
        """The seq of the last change applied (0: none)."""
        return self._applied

    def apply(self, changes: list[Change]) -> int:
        """Apply the changes after the last one applied, in order; how many were."""
        done = 0
        for seq, body in changes:
            if seq <= self._applied:
                continue
            change: dict[str, Any] = json.loads(body)
            if seq != self._applied + 1 and not change.get("snapshot"):
                raise ConfigError(
                    f"the mnode sent catalog change {seq} after {self._applied}: changes "
                    "between are missing (its log was damaged or replaced?)"
                )
            with self._state.lock.exclusive():
                self._apply_one(seq, body, change)
            with self._moved:
                self._applied = seq
                self._moved.notify_all()
            done += 1
        return done

    def wait(self, seq: int, timeout_s: float) -> bool:
        """Whether change `seq` is applied within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._moved:
            while self._applied < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._moved.wait(left)
        return True

    def _apply_one(self, seq: int, body: str, change: dict[str, Any]) -> None:
        state = self._state
        versions = self._append(_entries(change))
        for db, topic, group in change.get("forget") or ():
            self._forget(str(db), str(topic), None if group is None else str(group))
        known = dict(state.catalog.topics)
        try:
            self._log.apply(seq, body, versions)
            apply_change(state.catalog, change)
        except BaseException:
            state.catalog, _ = state.store.load()  # memory must match disk
            raise
        finally:
            state.bump()
        for name, topic in state.catalog.topics.items():
            if known.get(name) is not topic:  # new here: as CREATE TOPIC does on the mnode
                prepare(state, topic)

    def _append(self, entries: dict[str, list[str]]) -> dict[int, int]:
        """Append each hosted vgroup's events (one append per vgroup: atomic there),
        unless its WAL ends with them already; the last version of each."""
        vnodes = self._state.vnodes
        done: dict[int, int] = {}
        for v, bodies in sorted(entries.items(), key=lambda item: int(item[0])):
            vnode = vnodes.get(int(v))
            if vnode is None:
                continue  # not hosted here (its database was dropped since)
            batch = [WalEntry(EntryType.META, body.encode()) for body in bodies]
            done[int(v)] = _ends_with(vnode, batch) or vnode.wal.append(batch)[-1]
        return done

    def _forget(self, db: str, topic: str, group: str | None) -> None:
        for vnode in self._state.vnodes.values():
            if vnode.db == db:
                vnode.forget(topic, group)


def _ends_with(vnode: Vnode, batch: list[WalEntry]) -> int | None:
    """The last version when the WAL's last entries are `batch`, byte for byte (a change
    whose events were appended just before a crash); None otherwise. Every event is
    unique (its table's uid, its time), so equal bytes mean the same events."""
    wal = vnode.wal
    start = wal.last_version - len(batch) + 1
    if start < wal.first_version:
        return None
    records = vnode.reader().read(start, max_entries=len(batch))
    if [bytes(r.body) for r in records] == [bytes(e.body) for e in batch]:
        return wal.last_version
    return None


def _entries(change: dict[str, Any]) -> dict[str, list[str]]:
    """vgroup -> the bodies of its events, in order (the log keeps each event once)."""
    events: list[str] = change.get("events") or []
    return {v: [events[i] for i in idxs] for v, idxs in (change.get("entries") or {}).items()}
