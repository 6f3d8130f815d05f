"""ALTER STABLE and ALTER TABLE's column and tag actions: a super table's columns and
tags, or a normal table's columns, checked and then changed through a WAL meta event.

TDengine's rules: `ALTER TABLE` on a super table means `ALTER STABLE`; a normal table has
columns only and is the only kind whose columns may be renamed; a child table's columns
are its super table's. MODIFY only lengthens a VARCHAR or NCHAR. What a topic or
a privilege's tag condition uses cannot be dropped, renamed or modified.
"""

from __future__ import annotations

from sqltopic.errors import AlreadyExistsError, NotFoundError, SchemaInUseError, SqlError
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core.ddl import MAX_COLUMNS, MAX_TAGS, check_column_name, topics_on
from sqltopic.server.core.privileges import Rights, tags_in_use
from sqltopic.server.core.state import State
from sqltopic.sql import events
from sqltopic.sql import statements as st
from sqltopic.sql.model import Column, Database, SuperTable, Table, new_uid
from sqltopic.sql.types import ColumnType


def alter_stable(state: State, session: Session, stmt: st.AlterStable) -> Result:
    """ALTER STABLE, and ALTER TABLE with a column or tag action."""
    db = state.db_of(session, stmt.table)
    word = "ALTER TABLE" if stmt.via_table else "ALTER STABLE"
    Rights(state, session.user).require_schema(db, word)
    name = stmt.table.name
    if stmt.via_table and (db.name, name) not in state.catalog.stables:
        return _alter_table(state, db, state.catalog.table(db.name, name), stmt)
    stb = state.catalog.stable(db.name, name)
    _check_stable(state, stb, stmt)
    event = events.alter_stable(
        db.name, stb.name, stmt.action, stmt.name, type_=stmt.type, new_name=stmt.new_name,
        cid=new_uid() if stmt.action == "add_column" else 0,
    )  # fmt: skip
    state.commit_events({v: [event] for v in db.vgroups})
    return Result()


def _check_stable(state: State, stb: SuperTable, stmt: st.AlterStable) -> None:
    action, name = stmt.action, stmt.name
    if action == "rename_column":
        raise SqlError(
            f"{stb.name} is a super table: TDengine renames tags of a super table and columns "
            "of a normal table only; add a new column instead"
        )
    kind = "column" if action.endswith("_column") else "tag"
    if action.startswith("add_"):
        _check_new(stb.name, stb.columns, stb.tags, name, kind)
        limit = MAX_COLUMNS if kind == "column" else MAX_TAGS
        if len(stb.columns if kind == "column" else stb.tags) >= limit:
            raise SqlError(f"{stb.name} has {limit} {kind}s, the most it may have")
        return
    found = stb.column(name) if kind == "column" else stb.tag(name)
    if found is None:
        raise NotFoundError(f"super table {stb.name} has no {kind} {name}")
    if action == "drop_column" and stb.columns[0].name == name:
        raise SqlError("the first (timestamp) column cannot be dropped")
    if action == "drop_tag" and len(stb.tags) == 1:
        raise SqlError("a super table keeps at least one tag")
    if action == "rename_tag":
        assert stmt.new_name is not None
        _check_new(stb.name, stb.columns, stb.tags, stmt.new_name, "tag")
    if action.startswith("modify_"):
        assert stmt.type is not None
        _check_widen(stb.name, found, stmt.type)
    _refuse_if_used(state, stb.db, stb.name, name)


def _alter_table(state: State, db: Database, table: Table, stmt: st.AlterStable) -> Result:
    """A normal table's ADD, DROP, MODIFY or RENAME COLUMN."""
    action, name = stmt.action, stmt.name
    if table.stable is not None:
        raise SqlError(
            f"{table.name} is a child table of {table.stable}: its columns and tags are its "
            f"super table's; use ALTER STABLE {table.stable} (or ALTER TABLE ... SET TAG)"
        )
    if not action.endswith("_column"):
        raise SqlError(f"{table.name} is a normal table: it has columns, no tags")
    if action == "add_column":
        _check_new(table.name, table.columns, (), name, "column")
        if len(table.columns) >= MAX_COLUMNS:
            raise SqlError(f"{table.name} has {MAX_COLUMNS} columns, the most it may have")
    else:
        found = next((c for c in table.columns if c.name == name), None)
        if found is None:
            raise NotFoundError(f"table {table.name} has no column {name}")
        if action in ("drop_column", "rename_column") and table.columns[0].name == name:
            raise SqlError("the first (timestamp) column cannot be dropped or renamed")
        if action == "rename_column":
            assert stmt.new_name is not None
            _check_new(table.name, table.columns, (), stmt.new_name, "column")
        if action == "modify_column":
            assert stmt.type is not None
            _check_widen(table.name, found, stmt.type)
        _refuse_if_used(state, db.name, table.name, name)
    event = events.alter_stable(
        db.name, table.name, action, name, type_=stmt.type, new_name=stmt.new_name,
        cid=new_uid() if action == "add_column" else 0, table_type="normal",
    )  # fmt: skip
    state.commit_events({table.vgroup: [event]})
    return Result()


def _check_new(
    table: str, columns: tuple[Column, ...], tags: tuple[Column, ...], name: str, kind: str
) -> None:
    check_column_name(name, "column" if kind == "column" else "tag")
    if any(c.name == name for c in (*columns, *tags)):
        raise AlreadyExistsError(f"{table} already has a column or tag {name}")


def _check_widen(table: str, old: Column, new: ColumnType) -> None:
    """TDengine's MODIFY: the same string type, longer."""
    if not old.type.is_string or old.type.name != new.name:
        raise SqlError(
            f"MODIFY can only lengthen a VARCHAR or NCHAR; {table}.{old.name} is "
            f"{old.type.sql()} and cannot become {new.sql()}"
        )
    if (new.length or 0) <= (old.type.length or 0):
        raise SqlError(
            f"MODIFY can only lengthen {table}.{old.name}: {new.sql()} is not longer than "
            f"{old.type.sql()}"
        )


def _refuse_if_used(state: State, db: str, table: str, name: str) -> None:
    """A topic on the table (or one of a super table's children) may use its columns and
    tags, and a privilege's tag condition its tags."""
    for topic in topics_on(state, db, table):
        if name in topic.uses:
            raise SchemaInUseError(
                f"topic {topic.name} uses {name} of {table}; drop the topic first"
            )
    user = tags_in_use(state.catalog, db, table, name)
    if user is not None:
        raise SchemaInUseError(
            f"a privilege of user {user} on {db}.{table} has a condition on {name}; REVOKE it first"
        )
