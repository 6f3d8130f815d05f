"""Typed statements: what the parser hands the engine, one dataclass per statement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sqltopic.sql.model import MetaMode, TopicKind
from sqltopic.sql.types import ColumnType

if TYPE_CHECKING:  # only annotations: the client's CLI (load's VALUES) needs no sqlglot
    from sqlglot import exp


@dataclass(frozen=True, slots=True)
class Pos:
    """Where a statement (or a part of it) starts: 1-based line and column."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class TableRef:
    """`[db.]name`, lower-cased; `db` None means the current database (USE)."""

    db: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.db}.{self.name}" if self.db else self.name


@dataclass(frozen=True, slots=True)
class ColumnDef:
    name: str
    type: ColumnType


ValueKind = Literal["number", "string", "null", "bool", "now"]


@dataclass(frozen=True, slots=True)
class Value:
    """A literal as written: kind and text (`now` holds e.g. `NOW+1s`)."""

    kind: ValueKind
    text: str
    pos: Pos | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    sql: str
    pos: Pos


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateDatabase(Statement):
    name: str
    if_not_exists: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # VGROUPS, PRECISION, WAL_*


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterDatabase(Statement):
    name: str
    options: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class DropDatabase(Statement):
    name: str
    if_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateDnode(Statement):
    endpoint: str  # "host:port" as written (checked by the handler)


@dataclass(frozen=True, slots=True, kw_only=True)
class DropDnode(Statement):
    dnode: int | str  # its id, or its endpoint


@dataclass(frozen=True, slots=True, kw_only=True)
class Use(Statement):
    name: str


ShowWhat = Literal[
    "databases",
    "stables",
    "tables",
    "topics",
    "consumers",
    "subscriptions",
    "users",
    "user privileges",
    "dnodes",
    "vgroups",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Show(Statement):
    what: ShowWhat
    db: str | None = None  # SHOW db.STABLES / db.TABLES / db.VGROUPS


@dataclass(frozen=True, slots=True, kw_only=True)
class Describe(Statement):
    table: TableRef


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateStable(Statement):
    table: TableRef
    columns: tuple[ColumnDef, ...]
    tags: tuple[ColumnDef, ...]
    if_not_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTable(Statement):
    """A normal table (`columns`) or a child table (`using`, `tag_names`, `tag_values`)."""

    table: TableRef
    if_not_exists: bool = False
    columns: tuple[ColumnDef, ...] = ()
    using: TableRef | None = None
    tag_names: tuple[str, ...] | None = None
    tag_values: tuple[Value, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTables(Statement):
    """Several child tables in one statement: created all or none."""

    tables: tuple[CreateTable, ...]


AlterAction = Literal[
    "add_column", "drop_column", "modify_column", "rename_column", "add_tag", "drop_tag",
    "modify_tag", "rename_tag",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterStable(Statement):
    """ALTER STABLE, or ALTER TABLE with a column or tag action (`via_table`): a super
    table's or a normal table's schema, told apart when it runs."""

    table: TableRef
    action: AlterAction
    name: str
    type: ColumnType | None = None  # ADD / MODIFY
    new_name: str | None = None  # RENAME
    via_table: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTag(Statement):
    """ALTER TABLE child SET TAG tag = value."""

    table: TableRef
    tag: str
    value: Value


@dataclass(frozen=True, slots=True, kw_only=True)
class DropTable(Statement):
    table: TableRef
    stable: bool  # DROP STABLE
    if_exists: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Select(Statement):
    """An ad hoc query; `tree` is the sqlglot AST in the DuckDB dialect."""

    tree: exp.Expression


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic(Statement):
    name: str
    kind: TopicKind
    if_not_exists: bool = False
    meta: MetaMode = "none"
    query: exp.Select | None = None  # query topics
    query_sql: str | None = None  # the SELECT as written
    target: TableRef | None = None  # the super table of a stable topic
    where: exp.Expression | None = None  # a stable topic's tag condition
    where_sql: str | None = None
    db: str | None = None  # database topics


@dataclass(frozen=True, slots=True, kw_only=True)
class DropTopic(Statement):
    name: str
    if_exists: bool = False
    force: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DropConsumerGroup(Statement):
    group: str
    topic: str
    if_exists: bool = False
    force: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateUser(Statement):
    name: str
    password: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterUser(Statement):
    name: str
    password: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DropUser(Statement):
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant(Statement):
    """GRANT SUBSCRIBE ON topic TO user (`revoke`: REVOKE ... FROM user)."""

    topic: str
    user: str
    revoke: bool = False


Right = Literal["read", "write"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantRights(Statement):
    """GRANT READ | WRITE | ALL [, ...] ON db.table | db.* | *.* [WITH condition] TO user
    (`revoke`: REVOKE ... FROM user). `db` and `table` are None for `*`; `condition` is
    a tag condition (with a super table only), as written in `condition_sql`."""

    rights: tuple[Right, ...]
    db: str | None
    table: str | None
    user: str
    condition: exp.Expression | None = None
    condition_sql: str | None = None
    revoke: bool = False
