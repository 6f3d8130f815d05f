"""The engine's shared state, handed to every statement handler."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from sqltopic.errors import SqlError, VgroupUnavailable
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.result import Session
from sqltopic.server.common.rwlock import RWLock
from sqltopic.server.core.duck import DuckPool
from sqltopic.server.core.remote_vnode import DnodeReads, RemoteVnode
from sqltopic.server.mnode import access
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.dnode_registry import DnodeRegistry
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.catalog_store import CatalogStore
from sqltopic.sql.events import Event, Key, apply
from sqltopic.sql.model import Catalog, Database, Table, no_database
from sqltopic.sql.statements import TableRef
from sqltopic.wal import EntryType, Scheduler, WalEntry, meta_entry
from sqltopic.wal.options import Clock

Role = Literal["all-in-one", "mnode", "dnode"]
# The all-in-one server's own dnode id (TDengine's first dnode).
LOCAL_DNODE = 1
# A cache keyed by topic (and its creation time) is pruned of topics no longer in the
# catalog once it holds this many times the keys live topics could: each prune then pays
# for at least as many drops as it scans, and a server that makes and drops topics all
# day keeps caches the size of its live topics.
TOPIC_CACHE_SLACK = 2
# ...plus this many keys: a handful of drops is not worth a scan.
TOPIC_CACHE_FLOOR = 64


@dataclass(frozen=True)
class Forwarded:
    """Rows an mnode sends to the dnode hosting their vgroup."""

    endpoint: str
    entries: list[WalEntry]


# Sends each vgroup's rows (one append there: atomic per vgroup) once the dnodes applied
# catalog change `after` (the tables the rows need); the rows written.
Forward = Callable[[dict[int, Forwarded], int], int]

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class State:
    data_dir: Path
    catalog: Catalog
    store: CatalogStore
    vnodes: dict[int, Vnode]
    clock: Clock
    scheduler: Scheduler | None  # runs the WALs' background work; None: no such work
    limits: Limits = field(default_factory=Limits)
    lock: RWLock = field(default_factory=RWLock)
    duck: DuckPool = field(default_factory=DuckPool)
    generation: int = 0  # bumped by every catalog change; caches derived from it compare
    # vgroups whose WAL holds DDL events the catalog failed to commit (replayed at open)
    unapplied: set[int] = field(default_factory=set)
    # the server's consumer coordinator (mnode); None in the embedded engine, which has
    # no consumers: SHOW CONSUMERS is empty and DROP TOPIC never finds one
    coordinator: Coordinator | None = None
    # (topic, its creation time, vgroup) -> (generation, the topic's tables there)
    scopes: dict[tuple[str, int, int], tuple[int, dict[str, Table]]] = field(default_factory=dict)
    # (topic, its creation time) -> (the generation last checked at, the catalog objects
    # they derive from, the query topic's schemas: topic_reader)
    shapes: dict[tuple[str, int], tuple[int, tuple[object, ...], Any]] = field(default_factory=dict)
    # (db, super table, privilege) -> (generation, the child tables its condition keeps)
    grant_scopes: dict[tuple[str, str, Any], tuple[int, Any]] = field(default_factory=dict)
    # (topic, its creation time) -> the share of rows its last large read kept
    kept_share: dict[tuple[str, int], float] = field(default_factory=dict)
    # (db, vgroup) -> (generation, the database's tables in the vgroup)
    vnode_tables: dict[tuple[str, int], tuple[int, Any]] = field(default_factory=dict)
    # (db, super table) -> (generation, topic -> the children its condition keeps)
    kept: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    # vgroup -> (generation, table name -> the topics that may deliver its rows there)
    interest: dict[int, tuple[int, Any]] = field(default_factory=dict)
    # vgroup -> (generation, topic -> what a shared pass needs of it there: topic_reader)
    pass_plans: dict[int, tuple[int, Any]] = field(default_factory=dict)
    # (topic, its creation time) -> its bindings read so far (server/core/bindings.py)
    binding_sets: dict[tuple[str, int], Any] = field(default_factory=dict)
    # all-in-one (hosts every vgroup), a cluster's mnode (vgroups on dnodes) or a dnode
    role: Role = "all-in-one"
    endpoint: str = "local"  # the address clients reach this server at, once listening
    since_us: int = 0  # when this server opened its data directory
    # the mnode's dnodes' liveness (their heartbeats); None unless role is mnode
    registry: DnodeRegistry | None = None
    # False on a dnode until it caught up with its mnode's catalog (it serves nothing)
    serving: bool = True
    # a cluster's mnode: sends rows of vgroups on dnodes to them (`take_remote_rows`);
    # None: such rows are refused
    forward: Forward | None = None
    # a cluster's mnode: reads of the vgroups on dnodes (SELECT, SHOW SUBSCRIPTIONS)
    reads: DnodeReads | None = None
    # .seq: the last change the statement running on this thread logged (mnode)
    logged: threading.local = field(default_factory=threading.local)

    def now_us(self) -> int:
        return self.clock()

    def derived(self, cache: dict[K, tuple[int, Any]], key: K, compute: Callable[[], V]) -> V:
        """`compute()`, kept in `cache` under `key` until the catalog next changes."""
        hit = cache.get(key)
        if hit is not None and hit[0] == self.generation:
            return cast("V", hit[1])
        value = compute()
        cache[key] = (self.generation, value)
        return value

    def bump(self) -> None:
        """The catalog changed: caches derived from it compare generations, and those
        keyed by topic drop the topics it no longer holds (dropped, or dropped and made
        again: a new creation time), once they have grown past TOPIC_CACHE_SLACK."""
        self.generation += 1
        live = len(self.catalog.topics)
        per_topic = max(1, len(self.vnodes))  # `scopes` holds a key per vgroup read
        limit = TOPIC_CACHE_SLACK * live + TOPIC_CACHE_FLOOR
        caches: list[tuple[dict[Any, Any], int]] = [
            (self.shapes, limit), (self.kept_share, limit), (self.binding_sets, limit),
            (self.scopes, limit * per_topic),
        ]  # fmt: skip
        if all(len(cache) <= bound for cache, bound in caches):
            return
        kept = {(name, topic.create_us) for name, topic in self.catalog.topics.items()}
        for cache, _ in caches:
            for key in list(cache):  # a snapshot: readers may add keys meanwhile
                if key[:2] not in kept:
                    cache.pop(key, None)

    def vnode(self, vgroup: int) -> Vnode:
        """The local vnode of `vgroup`; VgroupUnavailable for one a dnode hosts."""
        vnode = self.vnodes.get(vgroup)
        if self.role == "dnode" and not self.serving:
            raise VgroupUnavailable(
                f"vgroup {vgroup}: the dnode at {self.endpoint} is catching up with its "
                "mnode's catalog (it was down, or the mnode is not reachable): retry soon"
            )
        if vnode is None and self.role == "dnode":
            raise not_hosted(vgroup, self.endpoint)
        if vnode is None:
            raise VgroupUnavailable(
                f"vgroup {vgroup} is hosted by a dnode (SHOW VGROUPS): a cluster's mnode "
                "does not read or write vgroups itself yet; run this statement on an "
                "all-in-one server (docs/cluster.md, 'What works today')"
            )
        return vnode

    def view(self, vgroup: int) -> Vnode | RemoteVnode:
        """The vnode of `vgroup` to read: the local one, or on a cluster's mnode the
        dnode's, read over the network (server/core/remote_vnode.py)."""
        if vgroup in self.vnodes or self.role != "mnode" or self.reads is None:
            return self.vnode(vgroup)
        return RemoteVnode(self.dnode_endpoint(vgroup), vgroup, self.reads)

    def db_of(self, session: Session, ref: TableRef | str | None) -> Database:
        """The database a reference names, or the session's current one; NotFoundError
        also when the session's user holds no right in it (server/mnode/access.py)."""
        name = ref.db if isinstance(ref, TableRef) else ref
        name = name or session.db
        if name is None:
            raise SqlError("no database selected; USE a database or write db.table")
        db = self.catalog.database(name)
        if not access.visible(self.catalog, session.user, db):
            raise no_database(name)
        return db

    def commit(
        self, keys: list[Key] | list[tuple[str, str, str]], log: dict[str, Any] | None = None
    ) -> None:
        """Persist catalog objects changed in memory (databases, topics, users); on a
        cluster's mnode, log the change for the dnodes (with `log`'s extra actions)."""
        try:
            self._changed(self.store.commit(self.catalog, keys, log=self._logged(log or {})))
        except BaseException:
            self._reload()
            raise
        finally:
            self.bump()

    def commit_events(self, events: dict[int, list[Event]], extra: list[Key] | None = None) -> None:
        """Append each vgroup's DDL events to its WAL, apply them to the catalog, and
        commit the catalog with the versions applied (the order start-up replay needs)."""
        self.write_entries({v: [meta_entry(e) for e in evs] for v, evs in events.items()}, extra)

    def write_entries(
        self, entries: dict[int, list[WalEntry]], extra: list[Key] | None = None
    ) -> None:
        """Append entries (one append per vgroup: atomic there), then apply the DDL events
        among those that reached a WAL to the catalog, and commit it with the versions
        applied. The WAL is the source of truth: when some vgroups' appends fail and
        others' succeed, the events that were written still take effect (and the first
        failure is raised after)."""
        applied: dict[int, int] = {}
        written: dict[bytes, Event] = {}  # a stable's event goes to every vnode, once here
        failure: BaseException | None = None
        remote = self._remote_entries(entries)
        for entry in (e for batch in remote.values() for e in batch):
            written.setdefault(bytes(entry.body), json.loads(bytes(entry.body)))
        for vgroup, batch in entries.items():
            if vgroup in remote:
                continue
            try:
                versions = self.vnode(vgroup).wal.append(batch)
            except Exception as exc:
                failure = failure or exc
                continue
            for entry in batch:
                if entry.entry_type is EntryType.META:
                    applied[vgroup] = versions[-1]
                    written.setdefault(bytes(entry.body), json.loads(bytes(entry.body)))
        if written or extra:
            self._apply(list(written.values()), extra, applied, remote)
        if failure is not None:
            raise failure

    def take_remote_rows(self, entries: dict[int, list[WalEntry]]) -> dict[int, Forwarded]:
        """A cluster's mnode with a forwarder: the data entries of `entries` for vgroups
        on dnodes, taken out of it (their DDL events stay: a change for the dnodes), with
        each vgroup's endpoint; {} elsewhere. The caller holds the lock."""
        if self.role != "mnode" or self.forward is None:
            return {}
        taken: dict[int, Forwarded] = {}
        for vgroup, batch in entries.items():
            if vgroup in self.vnodes:
                continue
            rows = [e for e in batch if e.entry_type is not EntryType.META]
            if rows:
                entries[vgroup] = [e for e in batch if e.entry_type is EntryType.META]
                taken[vgroup] = Forwarded(self.dnode_endpoint(vgroup), rows)
        return taken

    def placed_dnode(self, vgroup: int) -> int | None:
        """The id of the dnode its database placed `vgroup` on; None when no database
        places it on one (the vgroup is this server's, or unknown)."""
        for db in self.catalog.databases.values():
            if vgroup in db.vgroups:
                return db.dnode_of(vgroup)
        return None

    def dnode_endpoint(self, vgroup: int) -> str:
        """The endpoint of the dnode hosting `vgroup`; VgroupUnavailable for none."""
        dnode = self.catalog.dnodes.get(self.placed_dnode(vgroup) or 0)
        if dnode is None:
            raise VgroupUnavailable(f"vgroup {vgroup} is on no dnode (SHOW VGROUPS)")
        return dnode.endpoint

    def _remote_entries(self, entries: dict[int, list[WalEntry]]) -> dict[int, list[WalEntry]]:
        """On a cluster's mnode, the DDL entries of the vgroups dnodes host (logged for
        them); VgroupUnavailable, before anything is written, for rows to such a vgroup."""
        if self.role == "dnode":
            for vgroup in entries:
                self.vnode(vgroup)  # every one hosted here, before anything is written
            return {}
        if self.role != "mnode":
            return {}
        remote: dict[int, list[WalEntry]] = {}
        for vgroup, batch in entries.items():
            if vgroup in self.vnodes:
                continue
            if any(entry.entry_type is not EntryType.META for entry in batch):
                raise VgroupUnavailable(
                    f"vgroup {vgroup} is hosted by a dnode: a cluster's mnode does not write "
                    "rows into vgroups yet; write them on an all-in-one server (docs/"
                    "cluster.md, 'What works today')"
                )
            remote[vgroup] = batch
        return remote

    def _changed(self, seq: int | None) -> None:
        """A change logged for the dnodes: their held heartbeats take it at once, and
        the statement that logged it waits for them (`logged`, per thread)."""
        if seq is not None and self.registry is not None:
            self.logged.seq = seq
            self.registry.changed(seq)

    def _logged(self, log: dict[str, Any]) -> dict[str, Any] | None:
        return log if self.role == "mnode" else None

    def _apply(
        self, events: list[Event], extra: list[Key] | None, applied: dict[int, int],
        remote: dict[int, list[WalEntry]],
    ) -> None:  # fmt: skip
        keys: list[Key] = list(extra or [])
        for e in events:
            keys += apply(self.catalog, e)
        log = self._logged(_logged_events(remote))
        try:
            self._changed(self.store.commit(self.catalog, dict.fromkeys(keys), applied, log=log))
        except BaseException:
            # Memory must match disk: the events stay in the WALs, and the next open
            # replays them (their vgroups must not be marked checked at close).
            self.unapplied.update(applied)
            self._reload()
            raise
        finally:
            self.bump()

    def _reload(self) -> None:
        self.catalog, _ = self.store.load()


def not_hosted(vgroup: int, endpoint: str) -> VgroupUnavailable:
    """A request reached a dnode that does not host its vgroup: the client's routes are
    stale (the vgroup moved, or its database was dropped and made again)."""
    return VgroupUnavailable(
        f"vgroup {vgroup} is not hosted by the dnode at {endpoint}: the routes used are "
        "stale; ask the mnode for them again (Mnode.Routes) and retry"
    )


def _logged_events(remote: dict[int, list[WalEntry]]) -> dict[str, Any]:
    """The DDL events of a change for its log, each distinct one once (a super table's
    event goes to every vgroup of its database: once, not once per vgroup): `events`,
    the bodies as they are (every dnode's WAL holds the same bytes), and `entries`,
    vgroup -> the indexes of its events in order."""
    bodies: dict[bytes, int] = {}
    entries: dict[str, list[int]] = {}
    for vgroup, batch in remote.items():
        entries[str(vgroup)] = [bodies.setdefault(bytes(e.body), len(bodies)) for e in batch]
    return {"events": [body.decode() for body in bodies], "entries": entries}
