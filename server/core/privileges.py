"""Database privileges on the engine: GRANT and REVOKE of READ and WRITE, SHOW USER
PRIVILEGES, and `Rights`, the checks statements make (the rules: server/mnode/access.py).

A statement on something its user holds no right on at all answers as if it did not
exist (NotFoundError); on something it may see but not touch, NoPermission, saying
which right it needs and how an administrator grants it. Only root grants and revokes.

A tag condition (GRANT ... ON db.stb WITH condition) is compiled once, at the grant,
with the rules of a stable topic's WHERE; which child tables meet it is evaluated by
DuckDB over their tags and kept until the catalog next changes. A condition that no
longer evaluates (a tag it reads was dropped) matches nothing: access fails closed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import duckdb
import pyarrow as pa

from sqltopic.errors import (
    InvalidValueError,
    NoPermission,
    NotFoundError,
    SqlError,
)
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core.state import State
from sqltopic.server.mnode import access
from sqltopic.server.mnode.access import Scope
from sqltopic.server.mnode.auth import ROOT_USER
from sqltopic.sql import statements as st
from sqltopic.sql.layout import tags_schema
from sqltopic.sql.model import (
    TBNAME,
    Catalog,
    Database,
    Privilege,
    Right,
    SuperTable,
    Table,
    Topic,
    User,
    no_table,
    no_topic,
)
from sqltopic.sql.topic import compile_tag_condition, tables_matching


class Rights:
    """One user's rights over the engine's catalog as it is now: made per statement."""

    def __init__(self, state: State, user: str) -> None:
        self.state = state
        self.catalog = state.catalog  # read once: a failed commit replaces the catalog
        self.user = user
        self.superuser = access.superuser(self.catalog, user)

    # --- databases --------------------------------------------------------------------

    def visible(self, db: Database) -> bool:
        return self.superuser or access.visible(self.catalog, self.user, db)

    def owns(self, db: Database) -> bool:
        return self.superuser or access.owns(self.catalog, self.user, db)

    def require_owner(self, db: Database, action: str) -> None:
        """NoPermission unless root or the database's creator."""
        if not self.owns(db):
            raise NoPermission(
                f"{action} needs root or the creator of database {db.name} ({db.owner}); "
                f"user {self.user} is neither"
            )

    def require_schema(self, db: Database, action: str) -> None:
        """NoPermission unless the user may create, alter and drop `db`'s tables."""
        if not (self.superuser or access.may_write_schema(self.catalog, self.user, db)):
            raise NoPermission(
                f"{action} needs WRITE on database {db.name}; user {self.user} lacks it "
                f"(as root: GRANT WRITE ON {db.name}.* TO {self.user})"
            )

    def require_whole(self, right: Right, db: Database, action: str) -> None:
        """NoPermission unless `right` covers every table of `db`."""
        if not (self.superuser or access.database_wide(self.catalog, self.user, right, db)):
            raise NoPermission(
                f"{action} needs {right.upper()} on all of database {db.name}; user "
                f"{self.user} lacks it (as root: GRANT {right.upper()} ON {db.name}.* TO "
                f"{self.user}, and no narrower grant WITH a condition)"
            )

    # --- tables -----------------------------------------------------------------------

    def scope(self, right: Right, db: Database, table: str) -> Scope | None:
        """What `right` covers of super or normal table `table`; None: nothing."""
        if self.superuser:
            return access.ALL
        return access.scope(self.catalog, self.user, right, db, table)

    def may(self, right: Right, db: Database, table: Table) -> bool:
        """Whether `right` covers normal or child table `table`."""
        if table.stable is None:
            return self.scope(right, db, table.name) is not None
        found = self.scope(right, db, table.stable)
        if found is None or found.condition is None:
            return found is not None
        return table.name in self._matching(db, table.stable, found.condition)

    def may_create(self, right: Right, db: Database, stb: SuperTable, name: str,
                   tags: dict[str, Any]) -> bool:  # fmt: skip
        """Whether `right` covers a child table of `stb` that would have these tags."""
        found = self.scope(right, db, stb.name)
        if found is None or found.condition is None:
            return found is not None
        row = pa.Table.from_pylist(
            [{TBNAME: name, **tags}], schema=tags_schema(stb.tags, db.precision)
        )
        return bool(self._evaluate(found.condition, row))

    def require_unconditioned(self, db: Database, stable: str, action: str) -> None:
        """NoPermission when the user's rights on `db.stable` depend on its child tables'
        tags (a grant WITH a condition): changing tags could then widen them."""
        if self.superuser or access.owns(self.catalog, self.user, db):
            return
        if any(
            p.db == db.name and p.table == stable and p.filter_sql is not None
            for p in access.privileges(self.catalog, self.user)
        ):
            raise NoPermission(
                f"{action}: user {self.user}'s rights on {db.name}.{stable} depend on its "
                "child tables' tags (a grant WITH a condition), which this would change; "
                "ask root or the database's creator"
            )

    def children(self, right: Right, db: Database, stb: SuperTable) -> list[Table]:
        """The child tables of `stb` that `right` covers (all of them, or those whose tags
        meet a condition), in catalog order."""
        all_children = self.catalog.children(db.name, stb.name)
        found = self.scope(right, db, stb.name)
        if found is None:
            return []
        if found.condition is None:
            return all_children
        keep = self._matching(db, stb.name, found.condition)
        return [t for t in all_children if t.name in keep]

    def require(self, right: Right, db: Database, name: str, action: str) -> None:
        """NotFoundError unless the table (super, child or normal) is visible to the user;
        NoPermission unless `right` covers it (on a super table: any of it)."""
        table = self.catalog.tables.get((db.name, name))
        if table is not None:
            allowed = self.may(right, db, table)
            seen = allowed or self.may(_other(right), db, table)
        else:
            allowed = self.scope(right, db, name) is not None
            seen = allowed or self.scope(_other(right), db, name) is not None
        if allowed:
            return
        if not seen:
            raise no_table(db.name, name)
        raise self.refused(right, db, name, action)

    def refused(self, right: Right, db: Database, name: str, action: str) -> NoPermission:
        return NoPermission(
            f"{action} needs {right.upper()} on {db.name}.{name}; user {self.user} lacks it "
            f"(as root: GRANT {right.upper()} ON {db.name}.{name} TO {self.user})"
        )

    def _matching(self, db: Database, stable: str, p: Privilege) -> frozenset[str]:
        """The child tables of `db.stable` meeting `p`'s condition, kept per catalog."""

        def compute() -> frozenset[str]:
            stb = self.catalog.stable(db.name, stable)
            children = self.catalog.children(db.name, stable)
            rows = [{TBNAME: t.name, **t.tags} for t in children]
            tags = pa.Table.from_pylist(rows, schema=tags_schema(stb.tags, db.precision))
            return frozenset(self._evaluate(p, tags))

        return self.state.derived(self.state.grant_scopes, (db.name, stable, p), compute)

    def _evaluate(self, p: Privilege, tags: pa.Table) -> list[str]:
        assert p.filter_sql is not None
        try:
            return tables_matching(p.filter_sql, tags, self.state.duck.get())
        except (duckdb.Error, pa.ArrowException):
            return []  # a condition that no longer evaluates grants nothing

    # --- topics -----------------------------------------------------------------------

    def owns_topic(self, topic: Topic) -> bool:
        if self.superuser:
            return True
        record = self.catalog.users.get(self.user)
        return (
            record is not None
            and topic.owner == self.user
            and (topic.create_us >= record.create_us)
        )

    def reads_topic_source(self, topic: Topic) -> bool:
        """Whether the user may read what `topic` reads (its table, or its database)."""
        db = self.catalog.databases.get(topic.db)
        if db is None or not self.visible(db):
            return False
        if topic.target is None:
            return self.superuser or access.database_wide(self.catalog, self.user, "read", db)
        child = self.catalog.tables.get((db.name, topic.target))
        if child is not None:
            return self.may("read", db, child)
        return self.scope("read", db, topic.target) is not None

    def sees_topic(self, topic: Topic, consumes: bool) -> bool:
        """Whether the topic exists for the user: it may consume it (`consumes`), or read
        what it reads. Otherwise it answers as a missing topic, so names do not leak."""
        return consumes or self.reads_topic_source(topic)

    def require_topic_owner(self, topic: Topic, action: str, consumes: bool) -> None:
        if not self.owns_topic(topic) and not self.sees_topic(topic, consumes):
            raise no_topic(topic.name)
        if not self.owns_topic(topic):
            raise NoPermission(
                f"{action} needs root or the creator of topic {topic.name} ({topic.owner}); "
                f"user {self.user} is neither"
            )


def _other(right: Right) -> Right:
    return "write" if right == "read" else "read"


# --- GRANT and REVOKE --------------------------------------------------------------------


def grant(state: State, session: Session, stmt: st.GrantRights) -> Result:
    """GRANT or REVOKE READ/WRITE on a level; granting again replaces the condition,
    revoking what was not granted changes nothing."""
    verb = "REVOKE" if stmt.revoke else "GRANT"
    if not access.superuser(state.catalog, session.user):
        raise NoPermission(
            f"{verb} needs the superuser: user {session.user} may not run it; log in as root"
        )
    if stmt.user == ROOT_USER:
        raise InvalidValueError(f"{verb} names root, the superuser: it holds every right")
    user = state.catalog.users.get(stmt.user)
    if user is None:
        raise NotFoundError(f"user {stmt.user} does not exist; SHOW USERS lists the users")
    new = [] if stmt.revoke else _privileges(state.catalog, stmt)
    level = (stmt.db, stmt.table)
    kept = [
        p for p in user.privileges
        if access.current(state.catalog, p)
        and not (p.right in stmt.rights and (p.db, p.table) == level)
    ]  # fmt: skip
    state.catalog.users[user.name] = replace(user, privileges=(*kept, *new))
    state.commit([("user", "", user.name)])
    return Result()


def _privileges(catalog: Catalog, stmt: st.GrantRights) -> list[Privilege]:
    """The privileges a GRANT adds, once the level and condition are checked."""
    if stmt.db is None:
        if stmt.table is not None:
            raise SqlError(f"ON *.{stmt.table}: name the database (db.{stmt.table}) or use *.*")
        if stmt.condition is not None:
            raise SqlError("WITH applies to a super table (db.stable), not to *.*")
        return [Privilege(right, None, None) for right in stmt.rights]
    db = catalog.database(stmt.db)
    if stmt.table is None:
        if stmt.condition is not None:
            raise SqlError(f"WITH applies to a super table ({db.name}.stable), not to {db.name}.*")
        return [Privilege(right, db.name, None, db_us=db.create_us) for right in stmt.rights]
    return _table_privileges(catalog, db, stmt)


def _table_privileges(catalog: Catalog, db: Database, stmt: st.GrantRights) -> list[Privilege]:
    name = stmt.table or ""
    stb = catalog.stables.get((db.name, name))
    table = catalog.tables.get((db.name, name))
    if stb is None and table is None:
        raise no_table(db.name, name)
    if table is not None and table.stable is not None:
        raise SqlError(
            f"{db.name}.{name} is a child table: grant on its super table {table.stable}, "
            f"WITH a tag condition to pick child tables (e.g. WITH tbname = '{name}')"
        )
    filter_sql: str | None = None
    uses: tuple[str, ...] = ()
    if stmt.condition is not None:
        if stb is None:
            raise SqlError(f"WITH applies to a super table; {db.name}.{name} is a normal table")
        filter_sql, uses = compile_tag_condition(stmt, catalog, db.name, name, stmt.condition)
    created = stb.create_us if stb is not None else table.create_us if table else 0
    condition = stmt.condition_sql
    return [
        Privilege(right, db.name, name, condition, filter_sql, uses, db.create_us, created)
        for right in stmt.rights
    ]


# --- SHOW USER PRIVILEGES ------------------------------------------------------------------


def privilege_rows(state: State, session: Session) -> list[tuple[Any, ...]]:
    """user_name, privilege, db_name, table_name, condition, notes: every user's for
    root, the caller's own for anyone else. Root's and creators' implicit rights are
    listed too ("superuser", "owner"), then grants, then SUBSCRIBE grants ("topic")."""
    catalog = state.catalog
    everyone = access.superuser(catalog, session.user)
    names = sorted(catalog.users) if everyone else [session.user]
    rows: list[tuple[Any, ...]] = []
    if everyone:
        rows.append((ROOT_USER, "all", "*", "*", None, "superuser"))
    for name in names:
        rows += _rows_of(catalog, catalog.users.get(name), name)
    return rows


def _rows_of(catalog: Catalog, user: User | None, name: str) -> list[tuple[Any, ...]]:
    if user is None:
        return []
    rows: list[tuple[Any, ...]] = []
    for db in sorted(catalog.databases.values(), key=lambda d: d.name):
        if db.owner == name and access.owns(catalog, name, db):
            rows.append((name, "all", db.name, "*", None, "owner"))
    held = access.privileges(catalog, name)
    for p in sorted(held, key=lambda p: (p.db or "", p.table or "", p.right)):
        both = any(q.right != p.right and _same_level(p, q) for q in held)
        if both and p.right == "write":
            continue  # listed once, as "all", with its read twin
        rows.append((name, "all" if both else p.right, p.db or "*", p.table or "*",
                     p.condition, None))  # fmt: skip
    for topic_name in sorted(user.subscribe):
        topic = catalog.topics.get(topic_name)
        if topic is not None and topic.create_us == user.subscribe[topic_name]:
            rows.append((name, "subscribe", topic.db, topic.name, None, "topic"))
    return rows


def _same_level(p: Privilege, q: Privilege) -> bool:
    return (p.db, p.table, p.condition) == (q.db, q.table, q.condition)


def tags_in_use(catalog: Catalog, db: str, stable: str, tag: str) -> str | None:
    """A user whose privilege condition on `db.stable` reads `tag`, if any (the tag then
    cannot be dropped or renamed, as a topic's cannot)."""
    for user in catalog.users.values():
        for p in user.privileges:
            if p.db == db and p.table == stable and tag in p.uses and access.current(catalog, p):
                return user.name
    return None
