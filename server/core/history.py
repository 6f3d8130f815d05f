"""Reads of history for readers outside the server (Spark's tasks, users' jobs): the raw
entries of a vgroup's WAL (Vnode.ReadEntries) and the catalog objects needed to make
sense of them (Mnode.ReadCatalog), with the rights they need: READ on all of the
database, since a vgroup's WAL holds every table's rows and every column, whatever a
topic delivers of them; and SUBSCRIBE on the topic read through, if one is named."""

from __future__ import annotations

from sqltopic.errors import NotFoundError, SqlError
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.state import State
from sqltopic.server.core.users import check_subscribe
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.catalog_store import object_row
from sqltopic.sql.model import Catalog, Database
from sqltopic.sql.topic.params import topic_of

# (kind, key, body) of one catalog object (sql/catalog_store.object_row)
Row = tuple[str, str, str]


def history_vnode(state: State, user: str, topic: str, database: str, vgroup: int) -> Vnode:
    """The vnode of `vgroup` once `user` may read its history: of `topic`'s database
    (SUBSCRIBE on it) or of `database`, with READ on all of that database. The caller
    holds the lock shared."""
    db = _readable(state, user, topic, database)
    if vgroup not in db.vgroups:
        raise NotFoundError(
            f"vgroup {vgroup} is not a vgroup of database {db.name} (its vgroups: "
            f"{', '.join(map(str, db.vgroups))})"
        )
    return state.vnode(vgroup)


def catalog_rows(state: State, user: str, topic: str, database: str, table: str) -> list[Row]:
    """What a reader of `topic` (or of `database.table`) needs of the catalog: the
    database, the table read with its super table or child tables, and the topic. Never
    users. The caller holds the lock shared."""
    catalog = state.catalog
    db = _readable(state, user, topic, database)
    rows: list[Row] = [object_row("database", db)]
    if topic:
        found = catalog.topic(topic_of(topic))
        rows.append(object_row("topic", found))
        table = found.target or ""
    if table:
        rows += _table_rows(catalog, db, table.lower())
    return rows


def _readable(state: State, user: str, topic: str, database: str) -> Database:
    if topic:
        check_subscribe(state, user, topic)
        db = state.catalog.database(state.catalog.topic(topic_of(topic)).db)
    elif not database:
        raise SqlError("give the topic read, or the database and table")
    else:
        db = state.catalog.database(database.lower())
    # the WAL holds every table's rows, every column: not only what a topic delivers
    Rights(state, user).require_whole("read", db, "reading the WAL of a database")
    return db


def _table_rows(catalog: Catalog, db: Database, name: str) -> list[Row]:
    stable = catalog.stables.get((db.name, name))
    if stable is not None:
        children = [t for t in catalog.tables.values() if t.db == db.name and t.stable == name]
        return [object_row("stable", stable), *(object_row("table", t) for t in children)]
    table = catalog.table(db.name, name)
    rows = [object_row("table", table)]
    if table.stable is not None:
        rows.insert(0, object_row("stable", catalog.stable(db.name, table.stable)))
    return rows
