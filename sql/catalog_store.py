"""The catalog on disk: an SQLite database in the data directory, one row per object.

SQLite gives crash-safe transactions (WAL journal, synchronous=FULL): a torn write never
leaves a catalog that does not load. Each DDL commits the objects it changed together
with the WAL versions of the events it applied (`applied`), which start-up replay uses.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from sqltopic.errors import DataFileDamaged
from sqltopic.sql.change_log import CHANGES_SCHEMA, ChangeLog
from sqltopic.sql.events import Key
from sqltopic.sql.model import (
    Catalog,
    Column,
    Database,
    Dnode,
    Param,
    Privilege,
    SuperTable,
    Table,
    Topic,
    User,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (kind, key));
CREATE TABLE IF NOT EXISTS applied (vgroup INTEGER PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# A DDL waits this long for another process's lock before failing; only one server
# opens a data directory, so waiting means something is wrong.
BUSY_TIMEOUT_S = 5.0


# The catalog's file name in a data directory.
CATALOG_FILE = "catalog.sqlite"
CATALOG_DAMAGED = (
    "the catalog is damaged; restore catalog.sqlite (with its -wal file) from a backup of "
    'the data directory (docs/operations.md, "Damaged files")'
)
# SQLite's result codes for a file that is not a database or is corrupt.
_SQLITE_DAMAGE = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


@contextmanager
def damage_reported(path: Path, what_to_do: str) -> Iterator[None]:
    """DataFileDamaged naming `path` for an SQLite file that is not a database or is
    corrupt, or whose rows do not decode; other errors (no descriptors, no permission)
    pass as they are."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) not in _SQLITE_DAMAGE:
            raise
        raise DataFileDamaged(f"{path}: {what_to_do} ({exc})", path=str(path)) from None
    except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise DataFileDamaged(
            f"{path}: {what_to_do} (a row does not decode: {type(exc).__name__})", path=str(path)
        ) from None


def load_readonly(path: Path) -> tuple[Catalog, dict[int, int]]:
    """The catalog in `path`, read without writing anything (a server may be running on
    it: SQLite's WAL journal lets a reader see the last committed state)."""
    if not path.is_file():
        raise FileNotFoundError(f"no catalog at {path}: is this a sqltopic data directory?")
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        return _load(con)
    finally:
        con.close()


class CatalogStore:
    """Reads the whole catalog at open; writes changed objects in one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            with damage_reported(path, CATALOG_DAMAGED):
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(SCHEMA + CHANGES_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        self._db.close()

    # --- reading -----------------------------------------------------------------------

    def load(self) -> tuple[Catalog, dict[int, int]]:
        """The catalog and, per vgroup, the last WAL version applied to it."""
        with damage_reported(self.path, CATALOG_DAMAGED):
            return _load(self._db)

    # --- writing -------------------------------------------------------------------------

    def commit(
        self,
        catalog: Catalog,
        keys: Iterable[Key | tuple[str, str, str]],
        applied: dict[int, int] | None = None,
        log: dict[str, Any] | None = None,
    ) -> int | None:
        """Persist the objects named by `keys` as they now are in `catalog` (deleting
        those that are gone), and the applied versions, atomically. With `log` (a
        cluster's mnode: what else its dnodes must do, e.g. `entries`, vgroup -> DDL
        events for its WAL), record the change too and return its seq."""
        settings = {"next_vgroup": catalog.next_vgroup, "next_dnode": catalog.next_dnode}
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            rows = [self._write_one(cur, catalog, kind, db, name) for kind, db, name in keys]
            for vgroup, version in (applied or {}).items():
                cur.execute("INSERT OR REPLACE INTO applied VALUES (?, ?)", (vgroup, version))
            cur.executemany(
                "INSERT OR REPLACE INTO settings VALUES (?, ?)",
                [(name, str(value)) for name, value in settings.items()],
            )
            seq = None
            if log is not None:
                seq = ChangeLog.append(cur, {**log, "objects": rows, "settings": settings})
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return seq

    @property
    def log(self) -> ChangeLog:
        """The change log of a cluster's catalog (sql/change_log.py)."""
        return ChangeLog(self._db)

    def cluster_id(self) -> str:
        """The id of the cluster whose mnode owns this catalog, made at its first use:
        dnodes keep it and join no other cluster."""
        row = self._db.execute("SELECT value FROM settings WHERE name='cluster_id'").fetchone()
        if row is not None:
            return str(row[0])
        made = uuid.uuid4().hex
        self._db.execute("INSERT OR IGNORE INTO settings VALUES ('cluster_id', ?)", (made,))
        row = self._db.execute("SELECT value FROM settings WHERE name='cluster_id'").fetchone()
        return str(row[0])

    def forget_vgroups(self, vgroups: Iterable[int]) -> None:
        self._db.executemany("DELETE FROM applied WHERE vgroup = ?", [(v,) for v in vgroups])

    def _write_one(
        self, cur: sqlite3.Cursor, catalog: Catalog, kind: str, db: str, name: str
    ) -> tuple[str, str, str | None]:
        key = f"{db}.{name}" if db else name
        obj = _lookup(catalog, kind, db, name)
        if obj is None:
            cur.execute("DELETE FROM objects WHERE kind = ? AND key = ?", (kind, key))
            return kind, key, None
        body = json.dumps(_DUMPERS[kind](obj), separators=(",", ":"))
        cur.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", (kind, key, body))
        return kind, key, body


def _load(db: sqlite3.Connection) -> tuple[Catalog, dict[int, int]]:
    catalog = Catalog()
    for kind, body in db.execute("SELECT kind, body FROM objects"):
        _LOADERS[kind](catalog, json.loads(body))
    settings = dict(db.execute("SELECT name, value FROM settings").fetchall())
    catalog.next_vgroup = int(settings.get("next_vgroup", 1))
    catalog.next_dnode = int(settings.get("next_dnode", 1))
    applied = dict(db.execute("SELECT vgroup, version FROM applied").fetchall())
    return catalog, applied


def object_row(kind: str, obj: Any) -> tuple[str, str, str]:
    """(kind, key, body) of a catalog object (a database, super table, table, topic or
    dnode) as the objects table and the change log hold it."""
    if kind in ("stable", "table"):
        key = f"{obj.db}.{obj.name}"
    elif kind == "dnode":
        key = str(obj.id)
    else:
        key = obj.name
    return kind, key, json.dumps(_DUMPERS[kind](obj), separators=(",", ":"))


def catalog_of(rows: Iterable[tuple[str, str, str]]) -> Catalog:
    """A catalog of the objects `rows` hold (`object_row`'s form)."""
    catalog = Catalog()
    apply_change(catalog, {"objects": [list(r) for r in rows]})
    return catalog


def apply_change(catalog: Catalog, change: dict[str, Any]) -> None:
    """Apply a logged change's objects and settings (sql/change_log.py) to `catalog` in
    memory, as `ChangeLog.apply` writes them to disk: a dnode's catalog follows its
    mnode's without reading the whole catalog again per change."""
    if change.get("snapshot"):
        fresh = Catalog()
        for name in ("databases", "stables", "tables", "topics", "users", "dnodes"):
            setattr(catalog, name, getattr(fresh, name))
    for kind, key, body in change["objects"]:
        if body is None:
            _forget(catalog, str(kind), str(key))
        else:
            _LOADERS[kind](catalog, json.loads(body))
    settings = change.get("settings") or {}
    catalog.next_vgroup = int(settings.get("next_vgroup", catalog.next_vgroup))
    catalog.next_dnode = int(settings.get("next_dnode", catalog.next_dnode))


def _forget(catalog: Catalog, kind: str, key: str) -> None:
    """Remove the object stored under `key` (`_write_one`'s form: `db.name` for super
    and child tables, the name otherwise)."""
    if kind in ("stable", "table"):
        db, _, name = key.partition(".")
        (catalog.stables if kind == "stable" else catalog.tables).pop((db, name), None)
    elif kind == "dnode":
        catalog.dnodes.pop(int(key), None)
    elif kind == "database":
        catalog.databases.pop(key, None)
    elif kind == "topic":
        catalog.topics.pop(key, None)
    else:
        catalog.users.pop(key, None)


def _lookup(catalog: Catalog, kind: str, db: str, name: str) -> Any:
    if kind == "database":
        return catalog.databases.get(name)
    if kind == "stable":
        return catalog.stables.get((db, name))
    if kind == "table":
        return catalog.tables.get((db, name))
    if kind == "topic":
        return catalog.topics.get(name)
    if kind == "dnode":
        return catalog.dnodes.get(int(name))
    return catalog.users.get(name)


# --- JSON forms ------------------------------------------------------------------------


def _cols(cols: tuple[Column, ...]) -> list[list[str]]:
    return [c.to_json() for c in cols]


def _uncols(raw: list[list[str]]) -> tuple[Column, ...]:
    return tuple(Column.from_json(c) for c in raw)


def _schema_to_json(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _schema_from_json(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def _dump_database(d: Database) -> dict[str, Any]:
    out = {**asdict(d), "vgroups": list(d.vgroups), "placement": list(d.placement)}
    if not d.placement:
        del out["placement"]  # as before clusters: an older server still loads it
    return out


def _dump_stable(s: SuperTable) -> dict[str, Any]:
    return {"db": s.db, "name": s.name, "columns": _cols(s.columns), "tags": _cols(s.tags),
            "create_us": s.create_us}  # fmt: skip


def _dump_table(t: Table) -> dict[str, Any]:
    return {"db": t.db, "name": t.name, "vgroup": t.vgroup, "create_us": t.create_us,
            "stable": t.stable, "tags": t.tags, "columns": _cols(t.columns),
            "uid": t.uid}  # fmt: skip


def _dump_topic(t: Topic) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in t.__dataclass_fields__:
        value = getattr(t, name)
        if isinstance(value, pa.Schema):
            value = {"arrow_schema": _schema_to_json(value)}
        elif name == "output":
            value = _cols(value)
        elif name == "params":
            if not value:
                continue  # as before parameters existed: an older server still loads it
            value = [p.to_json() for p in value]
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def _load_topic(c: Catalog, raw: dict[str, Any]) -> None:
    fields = {name: _topic_field(name, value) for name, value in raw.items()}
    topic = Topic(**fields)
    c.topics[topic.name] = topic


def _topic_field(name: str, value: Any) -> Any:
    if isinstance(value, dict) and "arrow_schema" in value:
        return _schema_from_json(value["arrow_schema"])
    if name == "output":
        return _uncols(value)
    if name == "params":
        return tuple(Param.from_json(p) for p in value)
    return tuple(value) if isinstance(value, list) else value


def _dump_user(u: User) -> dict[str, Any]:
    privileges = [{**asdict(p), "uses": list(p.uses)} for p in u.privileges]
    return {**asdict(u), "subscribe": dict(u.subscribe), "privileges": privileges}


def _load_database(c: Catalog, r: dict[str, Any]) -> None:
    # databases of a data directory from before privileges belong to root
    c.databases[r["name"]] = Database(
        r["name"], tuple(r["vgroups"]), r["precision"], r["wal"], r["create_us"],
        str(r.get("owner") or "root"), tuple(int(d) for d in r.get("placement") or ()),
    )  # fmt: skip


def _load_stable(c: Catalog, r: dict[str, Any]) -> None:
    c.stables[(r["db"], r["name"])] = SuperTable(
        r["db"], r["name"], _uncols(r["columns"]), _uncols(r["tags"]), r["create_us"]
    )


def _load_table(c: Catalog, r: dict[str, Any]) -> None:
    c.tables[(r["db"], r["name"])] = Table(
        r["db"],
        r["name"],
        r["vgroup"],
        r["create_us"],
        stable=r["stable"],
        tags=r["tags"],
        columns=_uncols(r["columns"]),
        uid=r["uid"],
    )


def _load_user(c: Catalog, r: dict[str, Any]) -> None:
    granted = {str(t): int(us) for t, us in (r.get("subscribe") or {}).items()}
    privileges = tuple(
        Privilege(**{**p, "uses": tuple(p.get("uses") or ())}) for p in r.get("privileges") or ()
    )
    user = User(r["name"], r["password_hash"], r["salt"], bool(r.get("superuser")),
                r["create_us"], granted, privileges)  # fmt: skip
    c.users[user.name] = user


def _load_dnode(c: Catalog, r: dict[str, Any]) -> None:
    dnode = Dnode(int(r["id"]), str(r["endpoint"]), int(r["create_us"]), str(r.get("instance", "")))
    c.dnodes[dnode.id] = dnode


_DUMPERS: dict[str, Any] = {
    "database": _dump_database,
    "stable": _dump_stable,
    "table": _dump_table,
    "topic": _dump_topic,
    "user": _dump_user,
    "dnode": asdict,
}
_LOADERS: dict[str, Any] = {
    "database": _load_database,
    "stable": _load_stable,
    "table": _load_table,
    "topic": _load_topic,
    "user": _load_user,
    "dnode": _load_dnode,
}
