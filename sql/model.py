"""The catalog model: databases, super tables, tables, topics and users as records.

Pure data and lookups; persistence and the WAL belong to the server. Names are stored
lower-case: identifiers are case-insensitive, as in TDengine.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pyarrow as pa

from sqltopic.errors import NotFoundError, TopicNotFound, excerpt, shorten
from sqltopic.sql.types import ColumnType, Precision

TopicKind = Literal["query", "stable", "database"]
MetaMode = Literal["none", "with", "only"]
TableKind = Literal["child", "normal"]
# What a topic parameter compares: a tag, the table name, or a data column.
ParamKind = Literal["tag", "tbname", "column"]
# How: `col = ?` binds one value, `col IN (?)` a list.
ParamOp = Literal["=", "in"]

# The pseudo-column naming a row's table, as in TDengine.
TBNAME = "tbname"


@dataclass(frozen=True, slots=True)
class Column:
    """A data column or a tag. `cid` identifies a data column for life: a column dropped
    and added again under its old name is a new column, and rows written before read
    NULL in it (0 for tags, which live in the catalog, not in data entries)."""

    name: str
    type: ColumnType
    cid: int = 0

    def to_json(self) -> list[Any]:
        return [self.name, self.type.sql(), self.cid]

    @classmethod
    def from_json(cls, raw: list[Any]) -> Column:
        return cls(raw[0], ColumnType.parse(raw[1]), raw[2] if len(raw) > 2 else 0)


@dataclass(frozen=True, slots=True)
class Database:
    name: str
    vgroups: tuple[int, ...]  # server-wide vgroup ids, in hash-range order
    precision: Precision
    wal: dict[str, int]  # WAL_* options as given: keyword -> value
    create_us: int
    owner: str = "root"  # the creator, who holds every right on it
    # the dnode hosting each vgroup, in `vgroups` order; () when the server hosts every
    # vgroup itself (all-in-one, and every catalog from before clusters)
    placement: tuple[int, ...] = ()

    def dnode_of(self, vgroup: int) -> int | None:
        """The dnode id hosting `vgroup` of this database; None: the server itself."""
        if not self.placement:
            return None
        return self.placement[self.vgroups.index(vgroup)]


@dataclass(frozen=True, slots=True)
class SuperTable:
    db: str
    name: str
    columns: tuple[Column, ...]
    tags: tuple[Column, ...]
    create_us: int

    def column(self, name: str) -> Column | None:
        return _find(self.columns, name)

    def tag(self, name: str) -> Column | None:
        return _find(self.tags, name)


def new_uid() -> int:
    """A table uid: random, so that no counter has to survive a crash."""
    return secrets.randbits(62)


@dataclass(frozen=True, slots=True)
class Table:
    """A child table (`stable` set, `tags` its values) or a normal table (`columns`)."""

    db: str
    name: str
    vgroup: int
    create_us: int
    stable: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    columns: tuple[Column, ...] = ()
    # Tells this table's data entries from those of an earlier table of the same name
    # (dropped, then created again): entries carry it, readers compare it.
    uid: int = 0

    @property
    def kind(self) -> TableKind:
        return "child" if self.stable is not None else "normal"


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter of a query topic (`WHERE col = ?` or `col IN (?)`), named after its
    column; `precision` is the database's, in which a TIMESTAMP value is bound."""

    name: str
    kind: ParamKind
    type: ColumnType
    op: ParamOp
    precision: Precision = "ms"

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "type": self.type.sql(), "op": self.op,
                "precision": self.precision}  # fmt: skip

    @classmethod
    def from_json(cls, raw: dict[str, str]) -> Param:
        """A parameter as `to_json` wrote it; ValueError on anything else."""
        kind, op, precision = raw["kind"], raw["op"], raw.get("precision", "ms")
        if kind not in get_args(ParamKind) or op not in get_args(ParamOp):
            raise ValueError(f"a topic parameter of kind {kind!r} and op {op!r}")
        if precision not in get_args(Precision):
            raise ValueError(f"a topic parameter of precision {precision!r}")
        return cls(raw["name"], kind, ColumnType.parse(raw["type"]), op, precision)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    db: str
    kind: TopicKind
    sql: str  # as the user wrote it
    meta: MetaMode
    target: str | None  # the FROM table (query), the super table (stable), None (database)
    output: tuple[Column, ...]  # fixed output schema of a query topic
    select_sql: str  # compiled DuckDB SELECT over the coalesced batch (query topics)
    filter_sql: str | None  # tag condition of a stable topic, as DuckDB SQL
    uses: tuple[str, ...]  # columns and tags of the target the topic depends on
    owner: str
    create_us: int
    output_schema: pa.Schema | None = None  # exact Arrow output of a query topic
    # A parameterized query topic's parameters, in the order written; its `select_sql`
    # is then the shared form (sql/topic/params.py): the WHERE without them, and the
    # parameters' columns as hidden outputs after `output`.
    params: tuple[Param, ...] = ()


Right = Literal["read", "write"]


@dataclass(frozen=True, slots=True)
class Privilege:
    """A database privilege: `right` on table `table` of database `db` (None: every
    table; both None: every database), for a super table optionally only on the child
    tables whose tags meet `condition`. `db_us` and `table_us` are the creation times of
    the database and table granted on, so that a grant never carries over to a namesake
    created after a DROP."""

    right: Right
    db: str | None
    table: str | None
    condition: str | None = None  # the tag condition as written (TDengine SQL)
    filter_sql: str | None = None  # ... compiled: DuckDB SQL over the tags relation
    uses: tuple[str, ...] = ()  # the tags the condition reads
    db_us: int = 0
    table_us: int = 0

    @property
    def level(self) -> str:
        """`db.table`, `db.*` or `*.*`, as GRANT writes it."""
        return f"{self.db or '*'}.{self.table or '*'}"


@dataclass(frozen=True, slots=True)
class User:
    """A user created with CREATE USER (root is built in: its password is the server's
    setting). `subscribe` maps each topic granted SUBSCRIBE on to that topic's creation
    time, so that a grant never carries over to a namesake created after a DROP TOPIC."""

    name: str
    password_hash: str  # "scrypt$N$r$p$<hex digest>" (server/mnode/passwords.py); never clear
    salt: str  # hex, random per user and per password change
    superuser: bool
    create_us: int
    subscribe: dict[str, int] = field(default_factory=dict)  # topic -> its create_us
    privileges: tuple[Privilege, ...] = ()


@dataclass(frozen=True, slots=True)
class Dnode:
    """A vnode host a cluster's mnode admitted (CREATE DNODE): its id, for good, and the
    endpoint it serves clients and the mnode at."""

    id: int
    endpoint: str  # host:port
    create_us: int
    # the data directory it joined with (made there at its first start); "" until it
    # joined: a blank directory at its endpoint later is another instance, not it
    instance: str = ""


@dataclass(slots=True)
class Catalog:
    """Every object, keyed by lower-case name; (db, name) for tables."""

    databases: dict[str, Database] = field(default_factory=dict)
    stables: dict[tuple[str, str], SuperTable] = field(default_factory=dict)
    tables: dict[tuple[str, str], Table] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    users: dict[str, User] = field(default_factory=dict)
    dnodes: dict[int, Dnode] = field(default_factory=dict)
    next_vgroup: int = 1
    next_dnode: int = 1

    def database(self, name: str) -> Database:
        db = self.databases.get(name)
        if db is None:
            raise no_database(name)
        return db

    def stable(self, db: str, name: str) -> SuperTable:
        self.database(db)
        stb = self.stables.get((db, name))
        if stb is None:
            raise NotFoundError(f"super table {db}.{shorten(name)} does not exist")
        return stb

    def table(self, db: str, name: str) -> Table:
        self.database(db)
        tb = self.tables.get((db, name))
        if tb is None:
            raise no_table(db, name)
        return tb

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise no_topic(name)
        return topic

    def columns_of(self, db: str, name: str) -> tuple[Column, ...]:
        """The data columns of a super, child or normal table."""
        if (db, name) in self.stables:
            return self.stables[(db, name)].columns
        tb = self.table(db, name)
        if tb.stable is not None:
            return self.stables[(db, tb.stable)].columns
        return tb.columns

    def children(self, db: str, stable: str) -> list[Table]:
        return [t for t in self.tables.values() if t.db == db and t.stable == stable]

    def exists(self, db: str, name: str) -> bool:
        return (db, name) in self.tables or (db, name) in self.stables


def no_database(name: str) -> NotFoundError:
    """The error for a database that does not exist (or that the user may not see: the
    same words, so that names do not leak)."""
    return NotFoundError(f"database {excerpt(name)} does not exist; create it first")


def no_table(db: str, name: str) -> NotFoundError:
    """The error for a table that does not exist, or that the user may not see."""
    return NotFoundError(f"table {db}.{shorten(name)} does not exist")


def no_topic(name: str) -> TopicNotFound:
    """The error for a topic that does not exist (or that the user may not see: the
    same words, so that names do not leak)."""
    return TopicNotFound(f"topic {excerpt(name)} does not exist")


def _find(columns: tuple[Column, ...], name: str) -> Column | None:
    for col in columns:
        if col.name == name:
            return col
    return None
