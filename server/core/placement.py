"""Where a cluster's vgroups live: the rule that places a new database's vgroups on the
dnodes, and the vgroups each dnode is to host (what its heartbeats are answered with).

The rule (docs/cluster.md, "Placement"): each new vgroup goes to the `ready` dnode that
hosts the fewest vgroups (counting those this statement placed already), the lowest id
on a tie: the vgroups of one database spread round-robin over equally loaded dnodes,
and new databases fill the emptiest. Offline dnodes get none; vgroups never move.
"""

from __future__ import annotations

from collections import Counter

from sqltopic.errors import VgroupUnavailable
from sqltopic.server.core.state import State
from sqltopic.sql.model import Catalog, Database


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
    load = Counter(dnode for _db, _vgroup, dnode in hosted(state.catalog))
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
        for vgroup, dnode in zip(db.vgroups, db.placement, strict=True)
    ]


def placed_on(catalog: Catalog, dnode: int) -> list[tuple[Database, int]]:
    """The vgroups dnode `dnode` is to host, in vgroup order."""
    return sorted(
        ((db, vgroup) for db, vgroup, on in hosted(catalog) if on == dnode), key=lambda p: p[1]
    )
