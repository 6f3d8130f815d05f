"""Where a cluster's vgroups live: the rule that places a new database's vgroups on the
dnodes, and the vgroups each dnode is to host (what its heartbeats are answered with).

The rule (docs/cluster.md, "Placement"): each new vgroup goes to the `ready` dnode that
hosts the fewest vgroups (counting those this statement placed already), the lowest id
on a tie: the vgroups of one database spread round-robin over equally loaded dnodes,
and new databases fill the emptiest. Offline dnodes get none; vgroups never move.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqltopic.errors import VgroupUnavailable
from sqltopic.server.core.state import State
from sqltopic.server.mnode import access
from sqltopic.sql.change_log import Change
from sqltopic.sql.model import Catalog, Database, Dnode


def place(state: State, name: str, count: int) -> tuple[int, ...]:
    """The dnode of each of `count` new vgroups of database `name`, by the rule above;
    VgroupUnavailable when no dnode is ready."""
    registry = state.registry
    ready = sorted(d for d in state.catalog.dnodes if registry is not None and registry.ready(d))
    if not ready:
        raise VgroupUnavailable(
            f"CREATE DATABASE {name}: no dnode is ready to host its vgroups; start "
            "`sqltopic dnode --mnode ...` and admit it (CREATE DNODE 'host:port'), then "
            "check SHOW DNODES"
        )
    load = loads(state.catalog)
    placed = []
    for _ in range(count):
        dnode = min(ready, key=lambda d: (load[d], d))
        load[dnode] += 1
        placed.append(dnode)
    return tuple(placed)


def hosted(catalog: Catalog) -> list[tuple[Database, int, int]]:
    """(database, vgroup, dnode) of every vgroup placed on a dnode."""
    return [
        (db, vgroup, dnode)
        for db in catalog.databases.values()
        if db.placement  # a database of an all-in-one server's directory: local
        for vgroup, dnode in zip(db.vgroups, db.placement, strict=True)
    ]


def loads(catalog: Catalog) -> Counter[int]:
    """How many vgroups each dnode hosts."""
    return Counter(dnode for _db, _vgroup, dnode in hosted(catalog))


def placed_on(catalog: Catalog, dnode: int) -> list[tuple[Database, int]]:
    """The vgroups dnode `dnode` is to host, in vgroup order."""
    return sorted(
        ((db, vgroup) for db, vgroup, on in hosted(catalog) if on == dnode), key=lambda p: p[1]
    )


@dataclass(frozen=True)
class HeartbeatView:
    """What a dnode's heartbeat is answered from, read at one moment (under the engine's
    lock): the placement is never older than the changes it comes with."""

    dnode: Dnode | None  # the admitted dnode at the heartbeat's endpoint
    admitted: tuple[int, ...]  # every admitted dnode's id
    placed: list[tuple[Database, int]]  # what the dnode is to host
    last: int  # the mnode's last change
    changes: list[Change]  # the next changes for the dnode


def heartbeat_view(
    state: State, endpoint: str, after: int, limit: int, max_bytes: int
) -> HeartbeatView:
    """The view for a heartbeat from `endpoint` that applied changes up to `after`: at
    most `limit` changes and `max_bytes` of them (at least one)."""
    catalog = state.catalog
    dnode = next((d for d in catalog.dnodes.values() if d.endpoint == endpoint), None)
    log = state.store.log
    changes: list[Change] = []
    size = 0
    for seq, body in log.after(after, limit):
        size += len(body)
        if changes and size > max_bytes:
            break
        changes.append((seq, body))
    return HeartbeatView(
        dnode, tuple(catalog.dnodes), placed_on(catalog, dnode.id) if dnode else [],
        log.last(), changes,
    )  # fmt: skip


# One vgroup's route: (vgroup, dnode id, the dnode's endpoint; "" for the mnode itself).
VgroupRoute = tuple[int, int, str]


@dataclass(frozen=True)
class Routes:
    """Where the vgroups a user may see are served (Mnode.Routes)."""

    epoch: int  # the mnode's last catalog change: placement changes are catalog changes
    routed: bool  # False: this server serves every vgroup itself
    databases: list[tuple[str, list[VgroupRoute]]]


def routes(state: State, user: str) -> Routes:
    """The routes of every database `user` may see, in name order, each database's
    vgroups in hash order; the caller holds the lock shared."""
    if state.role != "mnode":
        return Routes(0, False, [])
    catalog = state.catalog
    out: list[tuple[str, list[VgroupRoute]]] = []
    for name in sorted(catalog.databases):
        db = catalog.databases[name]
        if not access.visible(catalog, user, db):
            continue
        placement = db.placement or (0,) * len(db.vgroups)  # 0: served by the mnode
        out.append((name, [
            (vgroup, dnode, catalog.dnodes[dnode].endpoint if dnode in catalog.dnodes else "")
            for vgroup, dnode in zip(db.vgroups, placement, strict=True)
        ]))  # fmt: skip
    return Routes(state.store.log.last(), True, out)


def vgroup_source(state: State, vgroup: int) -> tuple[str, int, int]:
    """(endpoint, first retained version, next version) of `vgroup`: "" and its WAL's
    when served here, else its dnode's endpoint and what its last heartbeat reported
    (1, 1 before any); the caller holds the lock shared."""
    local = state.vnodes.get(vgroup)
    if local is not None:
        return "", local.wal.first_version, local.wal.next_version
    dnode = state.placed_dnode(vgroup)
    if dnode is None:
        raise VgroupUnavailable(f"vgroup {vgroup} is on no dnode (SHOW VGROUPS)")
    found = state.catalog.dnodes.get(dnode)
    seen = state.registry.versions(dnode, vgroup) if state.registry is not None else None
    first, last = seen if seen is not None else (1, 0)
    return (found.endpoint if found is not None else ""), first, last + 1
