"""SHOW and DESCRIBE: the catalog as result tables, with TDengine's column names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from sqltopic.errors import NoPermission
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core import dnodes, show_groups
from sqltopic.server.core.privileges import Rights, privilege_rows
from sqltopic.server.core.state import State
from sqltopic.server.core.users import may_consume, may_subscribe
from sqltopic.server.vnode.vnode import wal_options
from sqltopic.sql import statements as st
from sqltopic.sql.model import Catalog, Database, Table

TS = pa.timestamp("us", tz="UTC")

DATABASES = pa.schema(
    [("name", pa.string()), ("create_time", TS), ("vgroups", pa.int32()),
     ("ntables", pa.int64()), ("precision", pa.string()), ("wal_level", pa.int32()),
     ("wal_fsync_period", pa.int32()), ("wal_retention_period", pa.int32()),
     ("wal_retention_size", pa.int64()), ("wal_segment_size", pa.int64()),
     ("wal_roll_period", pa.int32())]
)  # fmt: skip
STABLES = pa.schema(
    [("stable_name", pa.string()), ("db_name", pa.string()), ("create_time", TS),
     ("columns", pa.int32()), ("tags", pa.int32())]
)  # fmt: skip
TABLES = pa.schema(
    [("table_name", pa.string()), ("db_name", pa.string()), ("create_time", TS),
     ("columns", pa.int32()), ("stable_name", pa.string()), ("vgroup_id", pa.int32()),
     ("type", pa.string())]
)  # fmt: skip
TOPICS = pa.schema(
    [("topic_name", pa.string()), ("db_name", pa.string()), ("create_time", TS),
     ("sql", pa.string()), ("type", pa.string()), ("meta", pa.string()),
     ("owner", pa.string())]
)  # fmt: skip
CONSUMERS = pa.schema(
    [("consumer_id", pa.string()), ("consumer_group", pa.string()), ("client_id", pa.string()),
     ("user", pa.string()), ("fqdn", pa.string()), ("status", pa.string()),
     ("topic", pa.string()), ("up_time", TS), ("subscribe_time", TS),
     ("rebalance_time", TS), ("parameters", pa.string()), ("mode", pa.string())]
)  # fmt: skip
SUBSCRIPTIONS = pa.schema(
    [("topic_name", pa.string()), ("consumer_group", pa.string()), ("vgroup_id", pa.int32()),
     ("consumer_id", pa.string()), ("user", pa.string()), ("fqdn", pa.string()),
     ("offset", pa.string()), ("rows", pa.int64()), ("lag", pa.int64()),
     ("mode", pa.string()), ("in_flight", pa.int64()), ("acked", pa.int64()),
     ("redelivered", pa.int64()), ("dead_lettered", pa.int64()), ("lag_rows", pa.int64()),
     ("lag_ms", pa.int64()), ("last_poll", TS), ("last_commit", TS)]
)  # fmt: skip
USERS = pa.schema([("name", pa.string()), ("super", pa.bool_()), ("create_time", TS)])
USER_PRIVILEGES = pa.schema(
    [("user_name", pa.string()), ("privilege", pa.string()), ("db_name", pa.string()),
     ("table_name", pa.string()), ("condition", pa.string()), ("notes", pa.string())]
)  # fmt: skip
DESCRIBE = pa.schema(
    [("field", pa.string()), ("type", pa.string()), ("length", pa.int32()),
     ("note", pa.string())]
)  # fmt: skip


def show(state: State, session: Session, stmt: st.Show) -> Result:
    return _SHOWS[stmt.what](state, session, stmt)


def _databases(state: State, session: Session, stmt: st.Show) -> Result:
    cat = state.catalog
    rights = Rights(state, session.user)
    rows = []
    for db in sorted(cat.databases.values(), key=lambda d: d.name):
        if not rights.visible(db):
            continue
        opts = wal_options(db.wal)
        ntables = sum(1 for t in cat.tables.values() if t.db == db.name and _sees(rights, db, t))
        rows.append((
            db.name, db.create_us, len(db.vgroups), ntables, db.precision, opts.level,
            opts.fsync_period_ms, opts.retention_period_s, opts.retention_size_kb,
            opts.segment_size_kb, opts.roll_period_s,
        ))  # fmt: skip
    return Result.of_rows(DATABASES, rows)


def _stables(state: State, session: Session, stmt: st.Show) -> Result:
    db = state.db_of(session, stmt.db)
    rights = Rights(state, session.user)
    stables = sorted((s for s in state.catalog.stables.values()
                      if s.db == db.name and _sees_stable(rights, db, s.name)),
                     key=lambda s: s.name)  # fmt: skip
    rows = [(s.name, s.db, s.create_us, len(s.columns), len(s.tags)) for s in stables]
    return Result.of_rows(STABLES, rows)


def _tables(state: State, session: Session, stmt: st.Show) -> Result:
    db = state.db_of(session, stmt.db)
    cat = state.catalog
    rights = Rights(state, session.user)
    rows = []
    for t in sorted((t for t in cat.tables.values() if t.db == db.name), key=lambda t: t.name):
        if not _sees(rights, db, t):
            continue
        ncols = len(cat.columns_of(db.name, t.name))
        kind = "CHILD_TABLE" if t.stable else "NORMAL_TABLE"
        rows.append((t.name, t.db, t.create_us, ncols, t.stable, t.vgroup, kind))
    return Result.of_rows(TABLES, rows)


def _topics(state: State, session: Session, stmt: st.Show) -> Result:
    """Topics the user may consume, or whose source (table or database) it may read."""
    rights = Rights(state, session.user)
    catalog = state.catalog
    topics = sorted(
        (t for t in catalog.topics.values()
         if rights.sees_topic(t, may_consume(catalog, session.user, t))),
        key=lambda t: t.name,
    )  # fmt: skip
    rows = [(t.name, t.db, t.create_us, t.sql, t.kind, t.meta, t.owner) for t in topics]
    return Result.of_rows(TOPICS, rows)


def _users(state: State, session: Session, stmt: st.Show) -> Result:
    users = sorted(state.catalog.users.values(), key=lambda u: u.name)
    rows: list[tuple[Any, ...]] = [(u.name, u.superuser, u.create_us) for u in users]
    if "root" not in state.catalog.users:
        rows.insert(0, ("root", True, None))
    return Result.of_rows(USERS, rows)


def _consumers(state: State, session: Session, stmt: st.Show) -> Result:
    return _of_topics_consumed(state, session, show_groups.consumers(state, CONSUMERS), "topic")


def _subscriptions(state: State, session: Session, stmt: st.Show) -> Result:
    rows = show_groups.subscriptions(state, SUBSCRIPTIONS)
    return _of_topics_consumed(state, session, rows, "topic_name")


def _of_topics_consumed(state: State, session: Session, result: Result, column: str) -> Result:
    """The rows of topics the user may consume (every row for root)."""
    if Rights(state, session.user).superuser:
        return result
    topics = result.table.column(column).to_pylist()
    keep = [may_subscribe(state, session.user, t) for t in topics]
    return Result(result.table.filter(pa.array(keep, pa.bool_())))


def _user_privileges(state: State, session: Session, stmt: st.Show) -> Result:
    return Result.of_rows(USER_PRIVILEGES, privilege_rows(state, session))


def _sees(rights: Rights, db: Database, table: Table) -> bool:
    return rights.superuser or rights.may("read", db, table) or rights.may("write", db, table)


def _sees_stable(rights: Rights, db: Database, name: str) -> bool:
    return rights.scope("read", db, name) is not None or rights.scope("write", db, name) is not None


_SHOWS: dict[str, Callable[[State, Session, st.Show], Result]] = {
    "databases": _databases,
    "stables": _stables,
    "tables": _tables,
    "topics": _topics,
    "users": _users,
    "consumers": _consumers,
    "subscriptions": _subscriptions,
    "user privileges": _user_privileges,
    "dnodes": dnodes.show_dnodes,
    "vgroups": dnodes.show_vgroups,
}


def describe(state: State, session: Session, stmt: st.Describe) -> Result:
    """DESCRIBE needs READ or WRITE on the table (a writer needs its columns)."""
    db = state.db_of(session, stmt.table)
    rights = Rights(state, session.user)
    name = stmt.table.name
    try:
        rights.require("read", db, name, "DESCRIBE")
    except NoPermission:
        rights.require("write", db, name, "DESCRIBE")
    return Result.of_rows(DESCRIBE, describe_rows(state.catalog, db.name, name))


def describe_rows(cat: Catalog, db: str, name: str) -> list[tuple[Any, ...]]:
    """field, type, length, note (TAG for tags) of a super, child or normal table."""
    stb = cat.stables.get((db, name))
    if stb is None:
        table = cat.table(db, name)
        stb = cat.stables.get((db, table.stable)) if table.stable else None
    columns = cat.columns_of(db, name)
    tags = stb.tags if stb is not None else ()
    rows = [(c.name, c.type.name, length(c.type), "") for c in columns]
    rows += [(t.name, t.type.name, length(t.type), "TAG") for t in tags]
    return rows


_FIXED_LENGTHS = {
    "TIMESTAMP": 8, "BOOL": 1, "TINYINT": 1, "SMALLINT": 2, "INT": 4, "BIGINT": 8,
    "TINYINT UNSIGNED": 1, "SMALLINT UNSIGNED": 2, "INT UNSIGNED": 4, "BIGINT UNSIGNED": 8,
    "FLOAT": 4, "DOUBLE": 8,
}  # fmt: skip


def length(t: Any) -> int:
    """TDengine's `length` of a type: bytes of a fixed type, the declared length of a string."""
    return t.length if t.length is not None else _FIXED_LENGTHS[t.name]
