"""The table a topic reads: `[db.]name` resolved in the catalog to a super, child or
normal table, with the columns and tags it offers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
from sqlglot import exp

from sqltopic.errors import NotFoundError, SqlError
from sqltopic.sql import layout
from sqltopic.sql.model import TBNAME, Catalog, Column
from sqltopic.sql.topic.rules import TBNAME_LENGTH
from sqltopic.sql.topic.text import Text
from sqltopic.sql.types import ColumnType, Precision

TBNAME_COLUMN = Column(TBNAME, ColumnType("VARCHAR", TBNAME_LENGTH))


@dataclass(frozen=True, slots=True)
class Target:
    """The table a topic reads, with the columns and tags it offers."""

    db: str
    name: str
    kind: Literal["super", "child", "normal"]
    columns: tuple[Column, ...]
    tags: tuple[Column, ...]  # the super table's tags, for super and child tables
    precision: Precision

    def __str__(self) -> str:
        return f"{self.db}.{self.name}"

    def find(self, name: str) -> Column | None:
        if name == TBNAME:
            return TBNAME_COLUMN
        return next((c for c in (*self.columns, *self.tags) if c.name == name), None)

    def is_tag(self, name: str) -> bool:
        return any(c.name == name for c in self.tags)

    def star(self) -> tuple[Column, ...]:
        """What `SELECT *` means: data columns, then a super table's tags (as TDengine)."""
        return self.columns + self.tags if self.kind == "super" else self.columns

    def in_order(self, names: set[str]) -> tuple[str, ...]:
        return tuple(c.name for c in (*self.columns, *self.tags) if c.name in names)

    def batch_schema(self) -> pa.Schema:
        return layout.batch_schema(self.columns, self.tags, self.precision)


def resolve_target(
    catalog: Catalog,
    db: str | None,
    name: str,
    current_db: str | None,
    text: Text,
    *,
    at: exp.Expr | int | None,
) -> Target:
    """`[db.]name` as a super, child or normal table; errors at `at` (node or offset)."""
    db = db or current_db
    if db is None:
        raise text.error(
            SqlError, f"no database selected for table {name!r}: write db.{name}, or USE db", at
        )
    try:
        return find_target(catalog, db, name)
    except NotFoundError as err:
        raise text.error(NotFoundError, err.message, at) from None


def find_target(catalog: Catalog, db: str, name: str) -> Target:
    """Table `db.name` as a super, child or normal table; raises `NotFoundError`."""
    precision = catalog.database(db).precision
    stb = catalog.stables.get((db, name))
    if stb is not None:
        return Target(db, name, "super", stb.columns, stb.tags, precision)
    table = catalog.tables.get((db, name))
    if table is None:
        raise NotFoundError(
            f"table {db}.{name} does not exist; check the name with SHOW TABLES or SHOW STABLES"
        )
    if table.stable is None:
        return Target(db, name, "normal", table.columns, (), precision)
    stb = catalog.stable(db, table.stable)
    return Target(db, name, "child", stb.columns, stb.tags, precision)
