"""Dnodes and vgroups as SQL sees them: CREATE DNODE, DROP DNODE, SHOW DNODES and SHOW
VGROUPS (TDengine's statements and column names where they exist).

The all-in-one server is one dnode, id 1, that hosts every vgroup itself (TDengine's
first dnode, which runs its mnode too): it admits no other dnode. A cluster's mnode
admits dnodes with CREATE DNODE (root only), keeps them in the catalog, and learns from
their heartbeats whether each is `ready` or `offline` (`State.liveness`, the mnode's
registry); a database's vgroups each live on one dnode (`Database.placement`).
"""

from __future__ import annotations

import re

import pyarrow as pa

from sqltopic.errors import (
    AlreadyExistsError,
    InvalidValueError,
    NoPermission,
    NotFoundError,
    SchemaInUseError,
    UnsupportedStatement,
    excerpt,
)
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core.placement import loads, placed_on
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.state import LOCAL_DNODE, State
from sqltopic.server.mnode.access import superuser
from sqltopic.server.mnode.dnode_registry import DnodeStatus
from sqltopic.sql import statements as st
from sqltopic.sql.model import Database, Dnode

TS = pa.timestamp("us", tz="UTC")
DNODES = pa.schema(
    [("id", pa.int32()), ("endpoint", pa.string()), ("status", pa.string()),
     ("vgroups", pa.int32()), ("since", TS)]
)  # fmt: skip
VGROUPS = pa.schema(
    [("database", pa.string()), ("vgroup", pa.int32()), ("dnode", pa.int32()),
     ("endpoint", pa.string()), ("status", pa.string()), ("versions", pa.string())]
)  # fmt: skip
# host:port, the host a DNS name or an IPv4 address (an IPv6 one in brackets): what a
# gRPC client dials. Longer than any DNS name (253) is a mistake, not a host.
_ENDPOINT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,252}))?:(\d{1,5})$")
MAX_PORT = 65535


def create_dnode(state: State, session: Session, stmt: st.CreateDnode) -> Result:
    _require_superuser(state, session, "CREATE DNODE")
    if state.role != "mnode":
        raise UnsupportedStatement(
            f"CREATE DNODE {excerpt(stmt.endpoint)}: this server is all-in-one (sqltopic "
            "server): it is dnode 1 and hosts every vgroup itself. Dnodes join a cluster's "
            "mnode (sqltopic mnode; docs/operations.md, 'A cluster')"
        )
    endpoint = check_endpoint(stmt.endpoint)
    for dnode in state.catalog.dnodes.values():
        if dnode.endpoint == endpoint:
            raise AlreadyExistsError(f"dnode {dnode.id} already has endpoint {endpoint}")
    dnode = Dnode(state.catalog.next_dnode, endpoint, state.now_us())
    state.catalog.dnodes[dnode.id] = dnode
    state.catalog.next_dnode += 1
    state.commit([("dnode", "", str(dnode.id))])
    return Result()


def drop_dnode(state: State, session: Session, stmt: st.DropDnode) -> Result:
    """Drops a dnode that hosts no vgroup (TDengine would move them: no replicas yet)."""
    _require_superuser(state, session, "DROP DNODE")
    if state.role != "mnode":
        if stmt.dnode in (LOCAL_DNODE, state.endpoint):
            raise SchemaInUseError(
                f"DROP DNODE {stmt.dnode}: dnode 1 is this all-in-one server itself"
            )
        raise NotFoundError(f"dnode {excerpt(str(stmt.dnode))} does not exist (SHOW DNODES)")
    dnode = _find(state, stmt.dnode)
    hosted = placed_on(state.catalog, dnode.id)
    if hosted:
        names = ", ".join(sorted({db.name for db, _ in hosted}))
        raise SchemaInUseError(
            f"dnode {dnode.id} ({dnode.endpoint}) hosts {len(hosted)} vgroups (of databases "
            f"{names}); drop those databases first"
        )
    del state.catalog.dnodes[dnode.id]
    state.commit([("dnode", "", str(dnode.id))])
    if state.registry is not None:  # statements no longer wait for it
        state.registry.forget(dnode.id)
    return Result()


def show_dnodes(state: State, session: Session, stmt: st.Show) -> Result:
    if state.role != "mnode":
        count = sum(len(db.vgroups) for db in state.catalog.databases.values())
        row = (LOCAL_DNODE, state.endpoint, "ready", count, state.since_us)
        return Result.of_rows(DNODES, [row])
    rows = []
    load = loads(state.catalog)
    for dnode in sorted(state.catalog.dnodes.values(), key=lambda d: d.id):
        status, since = _liveness(state, dnode.id)
        rows.append((dnode.id, dnode.endpoint, status, load[dnode.id], since or dnode.create_us))
    return Result.of_rows(DNODES, rows)


def show_vgroups(state: State, session: Session, stmt: st.Show) -> Result:
    """The vgroups of `db.`, of the session's database, or of every database the user
    may see (TDengine wants a database; listing all is what an operator asks first)."""
    if stmt.db is not None or session.db is not None:
        databases = [state.db_of(session, stmt.db)]
    else:
        rights = Rights(state, session.user)
        databases = [d for d in state.catalog.databases.values() if rights.visible(d)]
    rows = []
    for db in sorted(databases, key=lambda d: d.name):
        for vgroup in db.vgroups:
            rows.append((db.name, vgroup, *_host(state, db, vgroup)))
    return Result.of_rows(VGROUPS, rows)


def _host(state: State, db: Database, vgroup: int) -> tuple[int, str, str, str]:
    """dnode, endpoint, status (`ready`; `placing` until its dnode reports it; `offline`
    with its dnode) and versions of one vgroup."""
    dnode_id = db.dnode_of(vgroup)
    if dnode_id is None:
        wal = state.vnode(vgroup).wal
        return (
            LOCAL_DNODE,
            state.endpoint,
            "ready",
            versions_text(wal.first_version, wal.last_version),
        )
    dnode = state.catalog.dnodes.get(dnode_id)
    alive, _since = _liveness(state, dnode_id)
    found = state.registry.versions(dnode_id, vgroup) if state.registry is not None else None
    # `placing`: its dnode has not reported it yet (it will within a heartbeat)
    status = "placing" if alive == "ready" and found is None else alive
    versions = "" if found is None else versions_text(*found)
    return dnode_id, dnode.endpoint if dnode is not None else "", status, versions


def _liveness(state: State, dnode_id: int) -> tuple[DnodeStatus, int]:
    if state.registry is None:
        return "offline", 0
    return state.registry.status(dnode_id)


def versions_text(first: int, last: int) -> str:
    """A WAL's retained versions as SHOW VGROUPS shows them: `first..last`, or `empty`."""
    return f"{first}..{last}" if last >= first else "empty"


def check_endpoint(text: str) -> str:
    """`host:port` as a dnode's endpoint, or InvalidValueError saying what is wrong."""
    match = _ENDPOINT.match(text)
    if match is None or not match.group(1):
        raise InvalidValueError(
            f"dnode endpoint {excerpt(text)}: expected host:port, e.g. 'h1.example.com:6030' "
            "or '10.0.0.5:6030'"
        )
    port = int(match.group(3))
    if not 0 < port <= MAX_PORT:
        raise InvalidValueError(f"dnode endpoint {excerpt(text)}: port {port} is not 1..65535")
    return text.lower()


def _find(state: State, ref: int | str) -> Dnode:
    for dnode in state.catalog.dnodes.values():
        if ref in (dnode.id, dnode.endpoint):
            return dnode
    raise NotFoundError(f"dnode {excerpt(str(ref))} does not exist (SHOW DNODES lists them)")


def _require_superuser(state: State, session: Session, what: str) -> None:
    if not superuser(state.catalog, session.user):
        raise NoPermission(f"{what}: only root (or a superuser) manages dnodes")
