"""Who holds which database right, read from the catalog alone (docs/sql.md §10).

* root, and any superuser, holds every right.
* A database's creator (`Database.owner`) holds every right on it, unless the database
  is older than the user: a user created again under a dropped user's name inherits
  nothing.
* A privilege (`User.privileges`) gives READ or WRITE on `*.*`, `db.*` or `db.table`
  while the database and table it names are the ones it was granted on. For one right
  and one table, a grant on the table decides; without one, a grant on its database
  (or `*.*`). A table grant with a tag condition covers only the child tables whose
  tags meet it: server/core/privileges.py evaluates that.

Everything here is a lookup in a few dicts, for the checks every statement makes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqltopic.server.mnode.auth import ROOT_USER
from sqltopic.sql.model import Catalog, Database, Privilege, Right, User


@dataclass(frozen=True)
class Scope:
    """What a right covers on one table: all of it (`condition` None), or, on a super
    table, the child tables that meet the privilege's tag condition."""

    condition: Privilege | None = None


ALL = Scope()


def superuser(catalog: Catalog, user: str) -> bool:
    if user == ROOT_USER:
        return True
    record = catalog.users.get(user)
    return record is not None and record.superuser


def owns(catalog: Catalog, user: str, db: Database) -> bool:
    """Whether `user` holds every right on `db`: a superuser, or its creator."""
    if superuser(catalog, user):
        return True
    record = catalog.users.get(user)
    return record is not None and db.owner == user and db.create_us >= record.create_us


def privileges(catalog: Catalog, user: str) -> list[Privilege]:
    """The user's privileges that still apply (on the objects they were granted on)."""
    record: User | None = catalog.users.get(user)
    if record is None:
        return []
    return [p for p in record.privileges if current(catalog, p)]


def current(catalog: Catalog, p: Privilege) -> bool:
    """Whether the database and table a privilege names are still the granted ones."""
    if p.db is None:
        return True
    db = catalog.databases.get(p.db)
    if db is None or db.create_us != p.db_us:
        return False
    if p.table is None:
        return True
    table = catalog.stables.get((p.db, p.table)) or catalog.tables.get((p.db, p.table))
    return table is not None and table.create_us == p.table_us


def visible(catalog: Catalog, user: str, db: Database) -> bool:
    """Whether `user` holds any right in `db`: otherwise it does not exist for it."""
    if owns(catalog, user, db):
        return True
    return any(p.db in (None, db.name) for p in privileges(catalog, user))


def scope(catalog: Catalog, user: str, right: Right, db: Database, table: str) -> Scope | None:
    """What `right` covers of super or normal table `db.table` for `user`; None: nothing."""
    if owns(catalog, user, db):
        return ALL
    held = privileges(catalog, user)
    for p in held:
        if p.right == right and p.db == db.name and p.table == table:
            return ALL if p.filter_sql is None else Scope(p)
    if any(p.right == right and p.db in (None, db.name) and p.table is None for p in held):
        return ALL
    return None


def database_wide(catalog: Catalog, user: str, right: Right, db: Database) -> bool:
    """Whether `right` covers all of `db`: its creator, or a grant on `db.*` or `*.*` that
    no conditioned table grant of the same right narrows."""
    if owns(catalog, user, db):
        return True
    held = privileges(catalog, user)
    whole = any(p.right == right and p.db in (None, db.name) and p.table is None for p in held)
    narrowed = any(p.right == right and p.db == db.name and p.filter_sql is not None for p in held)
    return whole and not narrowed


def may_write_schema(catalog: Catalog, user: str, db: Database) -> bool:
    """Whether `user` may create, alter and drop the tables of `db`: WRITE on the
    database (a table grant allows writing rows, not DDL)."""
    if owns(catalog, user, db):
        return True
    return any(
        p.right == "write" and p.db in (None, db.name) and p.table is None
        for p in privileges(catalog, user)
    )
