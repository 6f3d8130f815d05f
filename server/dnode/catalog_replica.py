"""A dnode's copy of its mnode's catalog: the changes the mnode logged, applied in order
(server/core/state.py logs them, sql/catalog_store.py keeps both sides), each one's DDL
events appended to the WALs of the vgroups this dnode hosts, and the offsets of dropped
topics and groups forgotten.

A change is applied once. Its events reach a WAL before the change is recorded as
applied (`catalog.sqlite`, one transaction); a crash in between would append them twice,
so before appending, the dnode records where they will land (`intent`), and on the next
attempt a WAL already holding the same bytes there is not written again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from sqltopic.errors import DataFileDamaged
from sqltopic.server.dnode.vnode_host import VnodeHost
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.catalog_store import CATALOG_FILE, CatalogStore
from sqltopic.sql.change_log import Change
from sqltopic.sql.model import Catalog
from sqltopic.wal import EntryType, WalEntry
from sqltopic.wal.fsutil import atomic_write

log = logging.getLogger("sqltopic.dnode")

INTENT_FILE = "intent.json"


class CatalogReplica:
    def __init__(self, data: Path, host: VnodeHost) -> None:
        self._data = data
        self._host = host
        self._store = CatalogStore(data / CATALOG_FILE)
        try:
            self._log = self._store.log
            self.applied = self._log.applied()
            self.catalog: Catalog = self._store.load()[0]
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
            versions = self._append(seq, change.get("entries") or {})
            for db, topic, group in change.get("forget") or ():
                self._forget(str(db), str(topic), None if group is None else str(group))
            self._log.apply(seq, body, versions)
            (self._data / INTENT_FILE).unlink(missing_ok=True)
            self.applied = seq
            done += 1
        if done:
            self.catalog = self._store.load()[0]
        return done

    def _append(self, seq: int, entries: dict[str, list[str]]) -> dict[int, int]:
        """Append each hosted vgroup's events (one append per vgroup: atomic there);
        the last version of each."""
        vnodes = self._host.vnodes()
        batches = {
            int(v): [WalEntry(EntryType.META, body.encode()) for body in bodies]
            for v, bodies in entries.items()
            if int(v) in vnodes
        }
        done = self._already_appended(seq, batches, vnodes)
        todo = {v: b for v, b in batches.items() if v not in done}
        if todo:  # durable before the appends: a crash after them finds it
            intent = {"seq": seq, "at": {str(v): vnodes[v].wal.next_version for v in todo}}
            atomic_write(self._data / INTENT_FILE, json.dumps(intent).encode())
        for vgroup, batch in sorted(todo.items()):
            done[vgroup] = vnodes[vgroup].wal.append(batch)[-1]
        return done

    def _already_appended(
        self, seq: int, batches: dict[int, list[WalEntry]], vnodes: dict[int, Vnode]
    ) -> dict[int, int]:
        """The vgroups whose WAL holds this change's events already (a crash after the
        append, before the change was recorded), with their last versions."""
        path = self._data / INTENT_FILE
        try:
            intent = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            raise DataFileDamaged(
                f"{path}: delete it and restart the dnode", path=str(path)
            ) from None
        if intent.get("seq") != seq:
            return {}
        found: dict[int, int] = {}
        for v, at in (intent.get("at") or {}).items():
            vgroup, batch = int(v), batches.get(int(v))
            if batch is None:
                continue
            records = vnodes[vgroup].reader().read(int(at), max_entries=len(batch))
            if [bytes(r.body) for r in records] == [bytes(e.body) for e in batch] and all(
                r.version == int(at) + i for i, r in enumerate(records)
            ):
                found[vgroup] = records[-1].version
        return found

    def _forget(self, db: str, topic: str, group: str | None) -> None:
        for vnode in self._host.vnodes().values():
            if vnode.db == db:
                vnode.shares.forget(topic, group)
                vnode.offsets.forget(topic, group)

    def close(self) -> None:
        self._store.close()
