"""A dnode's copy of its mnode's catalog: the changes the mnode logged, applied in order
(server/core/state.py logs them, sql/catalog_store.py keeps both sides), each one's DDL
events appended to the WALs of the vgroups this dnode hosts, and the offsets of dropped
topics and groups forgotten.

A change is applied once. Its events reach a WAL before the change is recorded as
applied (`catalog.sqlite`, one transaction); after a crash in between, the change is
applied again, and a WAL that already ends with its events (the same bytes) is not
written again. Nothing else is appended to a dnode's WALs before it caught up with its
mnode's changes, so they are its last entries.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from sqltopic.errors import ConfigError
from sqltopic.server.dnode.vnode_host import VnodeHost
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.catalog_store import CATALOG_FILE, CatalogStore
from sqltopic.sql.change_log import Change
from sqltopic.sql.model import Catalog
from sqltopic.wal import EntryType, WalEntry

log = logging.getLogger("sqltopic.dnode")


class CatalogReplica:
    def __init__(self, data: Path, host: VnodeHost) -> None:
        self._host = host
        self._store = CatalogStore(data / CATALOG_FILE)
        try:
            self._log = self._store.log
            self.applied = self._log.applied()
        except BaseException:
            self._store.close()
            raise

    def apply(self, changes: list[Change]) -> int:
        """Apply the changes after the last one applied, in order; how many were."""
        done = 0
        for seq, body in changes:
            if seq <= self.applied:
                continue
            change: dict[str, Any] = json.loads(body)
            if seq != self.applied + 1 and not change.get("snapshot"):
                raise ConfigError(
                    f"the mnode sent catalog change {seq} after {self.applied}: changes "
                    "between are missing (its log was damaged or replaced?)"
                )
            versions = self._append(_entries(change))
            for db, topic, group in change.get("forget") or ():
                self._forget(str(db), str(topic), None if group is None else str(group))
            self._log.apply(seq, body, versions)
            self.applied = seq
            done += 1
        return done

    @property
    def catalog(self) -> Catalog:
        """The catalog as applied so far, read from disk (nothing on the dnode keeps it
        in memory yet: reloading it after every change made DDL quadratic)."""
        return self._store.load()[0]

    def _append(self, entries: dict[str, list[str]]) -> dict[int, int]:
        """Append each hosted vgroup's events (one append per vgroup: atomic there),
        unless its WAL ends with them already; the last version of each."""
        vnodes = self._host.vnodes()
        done: dict[int, int] = {}
        for v, bodies in sorted(entries.items(), key=lambda item: int(item[0])):
            vnode = vnodes.get(int(v))
            if vnode is None:
                continue  # not hosted here (its database was dropped since)
            batch = [WalEntry(EntryType.META, body.encode()) for body in bodies]
            done[int(v)] = _ends_with(vnode, batch) or vnode.wal.append(batch)[-1]
        return done

    def _forget(self, db: str, topic: str, group: str | None) -> None:
        for vnode in self._host.vnodes().values():
            if vnode.db == db:
                vnode.forget(topic, group)

    def close(self) -> None:
        self._store.close()


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
