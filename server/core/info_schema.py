"""TDengine's `information_schema` views for ad hoc SELECT: `ins_databases`,
`ins_stables`, `ins_tables`, `ins_topics`, `ins_consumers`, `ins_subscriptions`,
`ins_users` and `ins_user_privileges`, so that scripts written for TDengine
(`SELECT * FROM information_schema.ins_topics`, its subscription tests among them) run.

Each view holds what the matching SHOW shows the caller (the same rights decide), over
every database at once. `ins_topics` has TDengine's own columns and values (`schema` as
JSON, `meta` yes/no, `type` column/stable/db) rather than SHOW TOPICS' sqltopic ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa

from sqltopic.errors import NotFoundError
from sqltopic.server.common.result import Result, Session
from sqltopic.server.core import show
from sqltopic.server.core.state import State
from sqltopic.sql import statements as st
from sqltopic.sql.model import Column, Topic

SCHEMA = "information_schema"

INS_TOPICS = pa.schema(
    [("topic_name", pa.string()), ("db_name", pa.string()), ("create_time", show.TS),
     ("sql", pa.string()), ("schema", pa.string()), ("meta", pa.string()),
     ("type", pa.string())]
)  # fmt: skip
# TDengine's words for a topic's kind in ins_topics.
_TYPES = {"query": "column", "stable": "stable", "database": "db"}

View = Callable[[State, Session], pa.Table]


def relation(state: State, session: Session, name: str) -> pa.Table:
    """The rows of view `name` (lower case) as the caller may see them."""
    view = VIEWS.get(name)
    if view is None:
        raise NotFoundError(
            f"{SCHEMA}.{name} does not exist; sqltopic has {', '.join(sorted(VIEWS))}"
        )
    return view(state, session)


def _show(what: st.ShowWhat, db: str | None = None) -> st.Show:
    return st.Show(sql=f"SHOW {what}", pos=st.Pos(1, 1), what=what, db=db)


def _shown(what: st.ShowWhat) -> View:
    return lambda state, session: show.show(state, session, _show(what)).table


def _per_database(what: st.ShowWhat, schema: pa.Schema) -> View:
    """SHOW STABLES / SHOW TABLES of every database the caller sees, in name order."""

    def view(state: State, session: Session) -> pa.Table:
        names = show.show(state, session, _show("databases")).table.column("name")
        parts = [show.show(state, session, _show(what, db)).table for db in names.to_pylist()]
        return pa.concat_tables(parts) if parts else schema.empty_table()

    return view


def _topics(state: State, session: Session) -> pa.Table:
    shown = show.show(state, session, _show("topics")).table.column("topic_name").to_pylist()
    rows = []
    for name in shown:
        topic = state.catalog.topics[name]
        rows.append((
            topic.name, topic.db, topic.create_us, topic.sql, _schema_json(state, topic),
            "no" if topic.meta == "none" else "yes", _TYPES[topic.kind],
        ))  # fmt: skip
    return Result.of_rows(INS_TOPICS, rows).table


def _schema_json(state: State, topic: Topic) -> str | None:
    """TDengine's `schema` of a topic: its output columns (a query topic) or its super
    table's columns (a stable topic), as [{"name", "type", "length"}]; NULL for a
    database topic."""
    columns: tuple[Column, ...]
    if topic.kind == "query":
        columns = topic.output
    elif topic.kind == "stable" and topic.target is not None:
        stb = state.catalog.stables.get((topic.db, topic.target))
        if stb is None:
            return None
        columns = stb.columns
    else:
        return None
    fields = [{"name": c.name, "type": c.type.name, "length": show.length(c.type)} for c in columns]
    return json.dumps(fields, separators=(",", ":"))


VIEWS: dict[str, View] = {
    "ins_databases": _shown("databases"),
    "ins_stables": _per_database("stables", show.STABLES),
    "ins_tables": _per_database("tables", show.TABLES),
    "ins_topics": _topics,
    "ins_consumers": _shown("consumers"),
    "ins_subscriptions": _shown("subscriptions"),
    "ins_users": _shown("users"),
    "ins_user_privileges": _shown("user privileges"),
}
