"""Database, super table and table DDL: checks, WAL meta events, catalog changes."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqltopic.errors import (
    AlreadyExistsError,
    LimitExceeded,
    NoPermission,
    NotFoundError,
    SchemaInUseError,
    SqlError,
)
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core.placement import place
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.routing import vgroup_for
from sqltopic.server.core.state import State
from sqltopic.server.mnode.auth import ROOT_USER
from sqltopic.server.vnode.vnode import (
    WAL_OPTION_FIELDS,
    create_vnodes,
    discard_vnodes,
    wal_options,
)
from sqltopic.sql import events
from sqltopic.sql import statements as st
from sqltopic.sql.entries import vnode_dir
from sqltopic.sql.layout import RESERVED
from sqltopic.sql.model import TBNAME, Column, Database, SuperTable, Table, new_uid, no_database
from sqltopic.sql.names import NameKind, check_name
from sqltopic.sql.types import PRECISIONS
from sqltopic.sql.values import convert_value

# TDengine's defaults and limits for a database's vgroups.
DEFAULT_VGROUPS = 2
MAX_VGROUPS = 1024
# TDengine: a super table has at most 4096 columns and 128 tags.
MAX_COLUMNS = 4096
MAX_TAGS = 128


# --- databases -------------------------------------------------------------------------


def create_database(state: State, session: Session, stmt: st.CreateDatabase) -> Result:
    name = stmt.name
    if name in state.catalog.databases:
        if stmt.if_not_exists:
            return Result()
        raise AlreadyExistsError(f"database {name} already exists; use IF NOT EXISTS")
    check_name("database", name)
    vgroups, precision, wal = _database_options(stmt.options)
    _check_vgroups_of(state, session.user, vgroups)
    first = state.catalog.next_vgroup
    db = Database(
        name, tuple(range(first, first + vgroups)), precision, wal, state.now_us(), session.user
    )
    if state.role == "mnode":  # the dnodes open them once their heartbeats learn of them
        db = replace(db, placement=place(state, name, vgroups))
        state.catalog.databases[name] = db
        state.catalog.next_vgroup = first + vgroups
        state.commit([("database", "", name)])
        return Result(affected_rows=0)
    opened = create_vnodes(state.data_dir, db, clock=state.clock, scheduler=state.scheduler)
    state.catalog.databases[name] = db
    state.catalog.next_vgroup = first + vgroups
    state.vnodes.update({v.vgroup: v for v in opened})
    try:
        state.commit([("database", "", name)])
    except BaseException:
        for vnode in opened:  # the catalog was reloaded without the database
            state.vnodes.pop(vnode.vgroup, None)
        discard_vnodes(state.data_dir, db.vgroups, opened)
        raise
    return Result(affected_rows=0)


def _check_vgroups_of(state: State, user: str, more: int) -> None:
    """LimitExceeded when a user other than root would own more vgroups than the
    server's --max-vgroups-per-user."""
    if user == ROOT_USER:
        return
    limit = state.limits.max_vgroups_per_user
    owned = sum(len(db.vgroups) for db in state.catalog.databases.values() if db.owner == user)
    if owned + more > limit:
        raise LimitExceeded(
            f"user {user}'s databases have {owned} vgroups; {more} more would pass the "
            f"server's --max-vgroups-per-user ({limit}): use fewer vgroups, or drop a "
            "database first"
        )


def _database_options(options: dict[str, Any]) -> tuple[int, Any, dict[str, int]]:
    vgroups = options.get("VGROUPS", DEFAULT_VGROUPS)
    if not isinstance(vgroups, int) or not 1 <= vgroups <= MAX_VGROUPS:
        raise SqlError(f"VGROUPS = {vgroups} is out of range; use 1..{MAX_VGROUPS}")
    precision = options.get("PRECISION", "ms")
    if precision not in PRECISIONS:
        raise SqlError(f"PRECISION {precision!r} is not supported; use 'ms', 'us' or 'ns'")
    wal = {k: v for k, v in options.items() if k in WAL_OPTION_FIELDS}
    wal_options(wal)  # checks every WAL_* value, naming a bad one
    return vgroups, precision, wal


def alter_database(state: State, session: Session, stmt: st.AlterDatabase) -> Result:
    db = state.db_of(session, stmt.name)
    Rights(state, session.user).require_owner(db, "ALTER DATABASE")
    unknown = [k for k in stmt.options if k not in WAL_OPTION_FIELDS]
    if unknown:
        raise SqlError(f"ALTER DATABASE can change WAL_* options only, not {', '.join(unknown)}")
    wal = {**db.wal, **stmt.options}
    options = wal_options(wal)
    state.catalog.databases[db.name] = replace(db, wal=wal)
    state.commit([("database", "", db.name)])
    for vgroup in db.vgroups:
        if db.dnode_of(vgroup) is None:  # a dnode's takes the options from its heartbeat
            state.vnode(vgroup).wal.set_options(options)
    return Result()


def drop_database(state: State, session: Session, stmt: st.DropDatabase) -> Result:
    cat = state.catalog
    rights = Rights(state, session.user)
    found = cat.databases.get(stmt.name)
    if found is None or not rights.visible(found):
        if stmt.if_exists:
            return Result()
        raise no_database(stmt.name)
    rights.require_owner(found, "DROP DATABASE")
    topics = sorted(t.name for t in cat.topics.values() if t.db == stmt.name)
    if topics:
        raise SchemaInUseError(
            f"database {stmt.name} has topics ({', '.join(topics)}); drop them first"
        )
    db = cat.databases.pop(stmt.name)
    keys: list[Any] = [("database", "", db.name)]
    keys += [("stable", d, n) for (d, n) in list(cat.stables) if d == db.name]
    keys += [("table", d, n) for (d, n) in list(cat.tables) if d == db.name]
    for _, d, n in keys[1:]:
        cat.stables.pop((d, n), None)
        cat.tables.pop((d, n), None)
    state.commit(keys)
    state.store.forget_vgroups(db.vgroups)
    for vgroup in db.vgroups:
        if db.dnode_of(vgroup) is not None:
            continue  # its dnode drops it when its heartbeat no longer lists it
        state.vnodes.pop(vgroup).close()
        shutil.rmtree(vnode_dir(state.data_dir, vgroup), ignore_errors=True)
    if session.db == db.name:
        session.db = None
    return Result()


def use(state: State, session: Session, stmt: st.Use) -> Result:
    session.db = state.db_of(session, stmt.name).name
    return Result()


# --- super tables and tables -----------------------------------------------------------


def create_stable(state: State, session: Session, stmt: st.CreateStable) -> Result:
    db = state.db_of(session, stmt.table)
    Rights(state, session.user).require_schema(db, "CREATE STABLE")
    name = stmt.table.name
    if _exists(state, db.name, name, stmt.if_not_exists, "super table"):
        return Result()
    check_name("super table", name)
    columns = _columns(stmt.columns, "column")
    tags = _columns(stmt.tags, "tag")
    _check_schema(columns, tags)
    stb = SuperTable(db.name, name, columns, tags, state.now_us())
    event = events.create_stable(stb)
    state.commit_events({v: [event] for v in db.vgroups})
    return Result()


def create_table(state: State, session: Session, stmt: st.CreateTable) -> Result:
    """A normal table needs WRITE on the database; a child table that too, or WRITE on
    its super table covering the new tags."""
    table = _new_table(state, session, stmt, Rights(state, session.user), set())
    if table is not None:
        state.commit_events({table.vgroup: [events.create_table(table)]})
    return Result()


def create_tables(state: State, session: Session, stmt: st.CreateTables) -> Result:
    """Several child tables: all are checked before any is created, so an error creates
    none (TDengine's batch form; IF NOT EXISTS applies to each table on its own)."""
    rights = Rights(state, session.user)
    named: set[tuple[str, str]] = set()
    by_vgroup: dict[int, list[events.Event]] = {}
    for one in stmt.tables:
        table = _new_table(state, session, one, rights, named)
        if table is not None:
            by_vgroup.setdefault(table.vgroup, []).append(events.create_table(table))
    if by_vgroup:
        state.commit_events(by_vgroup)
    return Result()


def _new_table(
    state: State, session: Session, stmt: st.CreateTable, rights: Rights,
    named: set[tuple[str, str]],
) -> Table | None:  # fmt: skip
    """The table `stmt` creates, checked, or None when it exists (IF NOT EXISTS) or is
    named earlier in the same statement (`named`, updated)."""
    db = state.db_of(session, stmt.table)
    if stmt.using is None:
        rights.require_schema(db, "CREATE TABLE")
    name = stmt.table.name
    if (db.name, name) in named:
        if stmt.if_not_exists:
            return None
        raise AlreadyExistsError(f"table {db.name}.{name} is named twice in one CREATE TABLE")
    if _exists(state, db.name, name, stmt.if_not_exists, "table"):
        return None
    check_name("table", name)
    named.add((db.name, name))
    now = state.now_us()
    vgroup = vgroup_for(db, name)
    if stmt.using is None:
        columns = _columns(stmt.columns, "column")
        _check_schema(columns, ())
        return Table(db.name, name, vgroup, now, columns=columns, uid=new_uid())
    stb = state.catalog.stable(state.db_of(session, stmt.using).name, stmt.using.name)
    if stb.db != db.name:
        raise SqlError("a child table must be in the database of its super table")
    tags = tag_values(stb, stmt.tag_names, stmt.tag_values, db.precision, now)
    if not rights.may_create("write", db, stb, name, tags):
        action = f"CREATE TABLE {name} USING {stb.name}"
        rights.require("write", db, stb.name, action)
        raise NoPermission(
            f"{action}: user {session.user}'s WRITE on {db.name}.{stb.name} covers only "
            "child tables whose tags meet its condition, and these tags do not"
        )
    return Table(db.name, name, vgroup, now, stable=stb.name, tags=tags, uid=new_uid())


def tag_values(
    stb: SuperTable,
    names: Sequence[str] | None,
    values: Sequence[st.Value],
    precision: Any,
    now_us: int,
) -> dict[str, Any]:
    """A child table's tag values, converted and checked; unnamed tags are NULL."""
    names = list(names) if names is not None else [t.name for t in stb.tags]
    if len(names) != len(values):
        raise SqlError(f"{len(names)} tags named but {len(values)} values given")
    out: dict[str, Any] = dict.fromkeys((t.name for t in stb.tags), None)
    for tag_name, value in zip(names, values, strict=True):
        tag = stb.tag(tag_name)
        if tag is None:
            raise NotFoundError(f"super table {stb.name} has no tag {tag_name}")
        out[tag_name] = convert_value(value, tag, precision, now_us)
    return out


def _exists(state: State, db: str, name: str, if_not_exists: bool, what: str) -> bool:
    if not state.catalog.exists(db, name):
        return False
    if if_not_exists:
        return True
    raise AlreadyExistsError(f"{what} {db}.{name} already exists; use IF NOT EXISTS")


def _columns(defs: Sequence[st.ColumnDef], what: str) -> tuple[Column, ...]:
    """Data columns get an id for life (see `Column.cid`); tags do not need one."""
    return tuple(Column(d.name, d.type, new_uid() if what == "column" else 0) for d in defs)


def _check_schema(columns: Sequence[Column], tags: Sequence[Column]) -> None:
    if not columns or columns[0].type.name != "TIMESTAMP":
        raise SqlError("the first column must be a TIMESTAMP (the row's key), e.g. ts TIMESTAMP")
    if len(columns) > MAX_COLUMNS or len(tags) > MAX_TAGS:
        raise SqlError(f"at most {MAX_COLUMNS} columns and {MAX_TAGS} tags")
    seen: set[str] = set()
    for col in columns:
        check_column_name(col.name, "column")
    for col in tags:
        check_column_name(col.name, "tag")
    for col in (*columns, *tags):
        if col.name in seen:
            raise SqlError(f"duplicate column or tag name {col.name}")
        seen.add(col.name)


def check_column_name(name: str, kind: NameKind) -> None:
    check_name(kind, name)
    if name == TBNAME or name in RESERVED or name.startswith("__"):
        raise SqlError(f"{name} is a reserved name; choose another")


# --- ALTER and DROP --------------------------------------------------------------------


def topics_on(state: State, db: str, name: str) -> list[Any]:
    """Topics reading `name`: on it, or (for a super table) on one of its children."""
    cat = state.catalog
    children = {t.name for t in cat.children(db, name)}
    return [
        t for t in cat.topics.values() if t.db == db and (t.target == name or t.target in children)
    ]


def set_tag(state: State, session: Session, stmt: st.SetTag) -> Result:
    db = state.db_of(session, stmt.table)
    rights = Rights(state, session.user)
    rights.require_schema(db, "ALTER TABLE ... SET TAG")
    table = state.catalog.table(db.name, stmt.table.name)
    if table.stable is None:
        raise SqlError(f"{table.name} is a normal table; only child tables have tags")
    rights.require_unconditioned(db, table.stable, f"ALTER TABLE {table.name} SET TAG")
    stb = state.catalog.stable(db.name, table.stable)
    value = tag_values(stb, [stmt.tag], [stmt.value], db.precision, state.now_us())[stmt.tag]
    state.commit_events({table.vgroup: [events.set_tag(table, stmt.tag, value)]})
    return Result()


def drop_table(state: State, session: Session, stmt: st.DropTable) -> Result:
    db = state.db_of(session, stmt.table)
    Rights(state, session.user).require_schema(db, "DROP STABLE" if stmt.stable else "DROP TABLE")
    name = stmt.table.name
    cat = state.catalog
    target = cat.stables.get((db.name, name)) if stmt.stable else cat.tables.get((db.name, name))
    if target is None:
        if stmt.if_exists:
            return Result()
        what = "super table" if stmt.stable else "table"
        raise NotFoundError(f"{what} {db.name}.{name} does not exist")
    users = sorted(t.name for t in topics_on(state, db.name, name))
    if users:
        raise SchemaInUseError(f"{name} is used by topics {', '.join(users)}; drop them first")
    if isinstance(target, SuperTable):
        state.commit_events({v: [events.drop(db.name, name, "super")] for v in db.vgroups})
    else:
        event = events.drop(db.name, name, target.kind, target.stable)
        state.commit_events({target.vgroup: [event]})
    return Result()
