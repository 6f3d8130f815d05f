"""Where a write goes on a cluster: the routes the mnode gives (`Mnode.Routes`: each
database's vgroups in hash order and the dnode serving each), a table's vgroup by the
documented hash (docs/sql.md, "Placement"), and a write's rows split by the dnode that
hosts them. I/O-free: the sync and aio connections share it (docs/protocol.md,
"Routing").
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from sqltopic.errors import VgroupUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

# The hash space a database's vgroups split into equal ranges.
HASH_SPACE = 1 << 32
# The endpoint of vgroups the mnode serves itself (and of everything on a server that
# is no cluster's mnode).
HERE = ""
# The column of a write through a super table that names each row's child table.
TBNAME = "tbname"
# A write is sent again at most this often after a dnode said its routes were stale
# (the routes are read again before each): one move of a vgroup, and one spare.
ROUTE_ATTEMPTS = 3
# The pause before the n-th attempt is n times this: a restarted dnode answers
# VgroupUnavailable until it caught up with the catalog, within a heartbeat (1 s) of its
# start.
ROUTE_RETRY_S = 0.25


@dataclass(frozen=True)
class Routes:
    """The routes as one answer gave them."""

    epoch: int = 0
    routed: bool = False  # False: send everything to the server connected to
    # database -> (vgroup, the endpoint hosting it) of each of its vgroups, in hash order
    databases: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, answer: pb.RoutesResponse) -> Routes:
        return cls(
            answer.epoch,
            answer.routed,
            {
                d.database: tuple((v.vgroup, v.endpoint) for v in d.vgroups)
                for d in answer.databases
            },
        )

    def split(self, database: str, target: str, data: pa.Table) -> dict[str, pa.Table] | None:
        """The rows of a write to `target` (a table, or a super table with a `tbname`
        column) of `database`, by the endpoint hosting them; None when the routes do
        not know the database (made since they were read: read them again)."""
        if not self.routed:
            return {HERE: data}
        found = self.databases.get(database)
        if found is None:
            return None
        endpoints = tuple(endpoint for _vgroup, endpoint in found)
        names = _tbname(data)
        if names is None:  # one table: all rows in its vgroup
            return {endpoints[_slot(database, target.rpartition(".")[2], endpoints)]: data}
        encoded = pc.dictionary_encode(names)
        slots = [_slot(database, n, endpoints) for n in encoded.dictionary.to_pylist()]
        distinct = sorted({endpoints[s] for s in slots})
        if len(distinct) == 1:  # the common case on few dnodes: no copy
            return {distinct[0]: data}
        number = {endpoint: i for i, endpoint in enumerate(distinct)}
        per_name = pa.array([number[endpoints[s]] for s in slots], pa.int32())
        per_row = pc.take(per_name, encoded.indices)
        return {e: data.filter(pc.equal(per_row, i)) for e, i in number.items()}


def database_of(target: str, database: str | None) -> str | None:
    """The database a write to `[db.]target` goes to, lower-case (names are
    case-insensitive); None when neither names one."""
    qualifier = target.rpartition(".")[0]
    name = qualifier or database
    return name.lower() if name else None


def _slot(database: str, table: str, endpoints: tuple[str, ...]) -> int:
    digest = xxhash.xxh32_intdigest(f"{database}.{table.lower()}".encode())
    return digest * len(endpoints) // HASH_SPACE


def _tbname(data: pa.Table) -> pa.Array | None:
    """The write's table names, lower-case, when it is a write through a super table
    (None otherwise). Names the server would refuse (NULL, not text) go as they are:
    the dnode that gets them says what is wrong."""
    found = [i for i, name in enumerate(data.column_names) if name.lower() == TBNAME]
    if not found:
        return None
    column = data.column(found[0])
    if column.null_count or not pa.types.is_string(column.type):
        try:
            column = column.cast(pa.string()).fill_null("")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return pa.nulls(len(data), pa.string()).fill_null("")
    return pc.utf8_lower(column.combine_chunks())


@dataclass(frozen=True)
class SendPart:
    """Write `data` at `endpoint`."""

    endpoint: str
    data: pa.Table


@dataclass(frozen=True)
class SendParts:
    """Write every part at once, one call per endpoint; answered with each part's outcome
    in order (`outcomes_of`): the rows written, or the VgroupUnavailable of a dnode that
    said the routes are stale (nothing written there)."""

    parts: tuple[SendPart, ...]


@dataclass(frozen=True)
class ReadRoutes:
    """Wait `pause_s`, then read the routes again; answered with the new Routes."""

    pause_s: float = 0.0


WriteStep = SendParts | ReadRoutes
# A part's outcome: its rows written, or its dnode's word that the routes are stale.
Outcome = int | VgroupUnavailable


def write_flow(
    routes: Routes, database: str, target: str, data: pa.Table
) -> Generator[WriteStep, Any, int]:
    """A write on a cluster, I/O-free: its parts sent at once, each to the endpoint
    hosting it; the parts a dnode refused as stale sent again after the routes were
    read anew, at most ROUTE_ATTEMPTS times in all; the rows written."""
    written, pending = 0, [data]
    stale: VgroupUnavailable | None = None
    for attempt in range(ROUTE_ATTEMPTS):
        if attempt:  # a dnode catching up serves within a heartbeat or two: give it time
            routes = yield ReadRoutes(ROUTE_RETRY_S * attempt)
        parts = _parts(routes, database, target, pending)
        outcomes: list[Outcome] = yield SendParts(parts)
        pending = []
        for part, outcome in zip(parts, outcomes, strict=True):
            if isinstance(outcome, VgroupUnavailable):
                pending.append(part.data)
                stale = outcome
            else:
                written += outcome
        if not pending:
            return written
    assert stale is not None
    raise stale


def _parts(
    routes: Routes, database: str, target: str, tables: list[pa.Table]
) -> tuple[SendPart, ...]:
    """The rows of `tables` by endpoint (a database the routes do not know goes to the
    server connected to, which says why), one part per endpoint, each table's rows in
    their order."""
    by_endpoint: dict[str, list[pa.Table]] = {}
    for table in tables:
        for endpoint, part in (routes.split(database, target, table) or {HERE: table}).items():
            by_endpoint.setdefault(endpoint, []).append(part)
    return tuple(
        SendPart(endpoint, found[0] if len(found) == 1 else pa.concat_tables(found))
        for endpoint, found in by_endpoint.items()
    )


def outcomes_of(results: Sequence[int | BaseException]) -> list[Outcome]:
    """Each part's outcome for `write_flow`, once every part was answered: the first
    error other than stale routes is raised (the other parts' rows were written)."""
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, VgroupUnavailable):
            raise result
    return [r for r in results if isinstance(r, int | VgroupUnavailable)]
