"""Which tables each topic delivers rows of, in each vgroup, and the reverse index the
shared pass uses (table -> topics).

A stable topic's tag condition, and the conjuncts of a query topic's WHERE that read only
`tbname` and tags (sql/topic/scope.py), decide per table. They are evaluated for every
topic of a super table at once, as the columns of one DuckDB query over the super
table's tags (a few hundred topics a query), so that a catalog change (a child table
created by a write) costs one pass over the children, not one query per topic and
vgroup. Everything here is derived from the catalog and kept until it next changes
(`State.derived`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import duckdb
import pyarrow as pa

from sqltopic.errors import SqlError
from sqltopic.server.core.state import State
from sqltopic.sql import layout
from sqltopic.sql.layout import tags_schema
from sqltopic.sql.model import TBNAME, Catalog, Table, Topic
from sqltopic.sql.topic.scope import row_select, simple_mask, table_condition

# Topic conditions evaluated by one DuckDB query (one boolean column each). DuckDB's
# planning grows faster than linearly in them (IN lists above all: 16 take 32 ms, 64
# 0.2 s, 256 8.7 s), so a query holds few; most conditions never get there
# (`_simple`).
CONDITIONS_PER_QUERY = 8
# Only one thread computes what the conditions keep; the others wait for its answer.
_KEPT_LOCK = threading.Lock()

Kept = dict[str, frozenset[str] | SqlError]  # topic -> tables its condition keeps, or why not


def topic_tables(state: State, topic: Topic, vgroup: int) -> dict[str, Table]:
    """The tables of `vgroup` whose data entries `topic` delivers, by name."""
    key = (topic.name, topic.create_us, vgroup)
    return state.derived(state.scopes, key, lambda: _compute(state, topic, vgroup))


def interest(state: State, vgroup: int) -> dict[str, tuple[str, ...]]:
    """Table name -> the topics that may deliver rows of it in `vgroup`."""

    def compute() -> dict[str, tuple[str, ...]]:
        index: dict[str, list[str]] = {}
        for topic in state.catalog.topics.values():
            if vgroup not in state.catalog.database(topic.db).vgroups:
                continue
            for table in topic_tables(state, topic, vgroup):
                index.setdefault(table, []).append(topic.name)
        return {table: tuple(names) for table, names in index.items()}

    return state.derived(state.interest, vgroup, compute)


def _compute(state: State, topic: Topic, vgroup: int) -> dict[str, Table]:
    cat = state.catalog
    in_vnode = _vnode_tables(state, topic.db, vgroup)
    if topic.kind == "database":
        tables = in_vnode
    elif (topic.db, topic.target) in cat.stables:
        tables = [t for t in in_vnode if t.stable == topic.target]
        if _condition(state, topic) is not None:
            kept = _kept(state, topic.db, topic.target or "")[topic.name]
            if isinstance(kept, SqlError):
                raise kept.with_traceback(None)
            tables = [t for t in tables if t.name in kept]
    else:
        tables = [t for t in in_vnode if t.name == topic.target]
    return {t.name: t for t in tables}


def _vnode_tables(state: State, db: str, vgroup: int) -> list[Table]:
    def compute() -> list[Table]:
        return [t for t in state.catalog.tables.values() if t.db == db and t.vgroup == vgroup]

    return state.derived(state.vnode_tables, (db, vgroup), compute)


def _condition(state: State, topic: Topic) -> str | None:
    """The topic's condition on tables: a stable topic's tag condition, or the
    per-table conjuncts of a query topic's WHERE; None when every table qualifies."""
    if topic.kind == "stable":
        return topic.filter_sql or None
    if topic.kind != "query":
        return None
    return table_condition(topic.select_sql, per_table_columns(state.catalog, topic))


def per_table_columns(cat: Catalog, topic: Topic) -> frozenset[str]:
    """What a per-table conjunct of a topic over a super table reads: `tbname` and the
    tags, lower-case."""
    stb = cat.stable(topic.db, topic.target or "")
    return frozenset({TBNAME, *(t.name.lower() for t in stb.tags)})


def row_sql(cat: Catalog, topic: Topic) -> str:
    """The SELECT that decides each row of `topic` from the tables `topic_tables` gives
    it: without the per-table conjuncts of its WHERE, which those tables passed already
    (only where `_compute` applied them: a query topic over a super table; a
    parameterized topic keeps its form for the partition among its bindings)."""
    if topic.kind != "query" or topic.params or (topic.db, topic.target) not in cat.stables:
        return topic.select_sql
    return row_select(topic.select_sql, per_table_columns(cat, topic))


def _kept(state: State, db: str, stable: str) -> Kept:
    """For every topic of `db.stable` with a condition, the child tables it keeps."""

    def compute() -> Kept:
        topics = [t for t in state.catalog.topics.values() if t.db == db and t.target == stable]
        conditions = {t.name: c for t in topics if (c := _condition(state, t)) is not None}
        if not conditions:
            return {}
        tags = _tags(state, db, stable)
        kept: Kept = {}
        rest: list[str] = []
        for name, condition in conditions.items():
            mask = simple_mask(condition, tags)
            if mask is None:
                rest.append(name)
            else:
                kept[name] = frozenset(str(n) for n in tags.column(TBNAME).filter(mask).to_pylist())
        con = state.duck.get()
        for start in range(0, len(rest), CONDITIONS_PER_QUERY):
            chunk = rest[start : start + CONDITIONS_PER_QUERY]
            kept |= _evaluate(con, tags, chunk, [conditions[n] for n in chunk])
        return kept

    with _KEPT_LOCK:  # a catalog change: the first reader computes, the others wait
        return state.derived(state.kept, (db, stable), compute)


def _tags(state: State, db: str, stable: str) -> pa.Table:
    """Every child of `db.stable` with its tags, as the tags relation."""
    stb = state.catalog.stable(db, stable)
    schema = tags_schema(stb.tags, state.catalog.database(db).precision)
    children = [t for t in state.catalog.tables.values() if t.db == db and t.stable == stable]
    return pa.Table.from_pylist([{TBNAME: t.name, **t.tags} for t in children], schema=schema)


def _evaluate(
    con: duckdb.DuckDBPyConnection, tags: pa.Table, topics: Sequence[str],
    conditions: Sequence[str],
) -> Kept:  # fmt: skip
    """The tables each condition keeps, in one query; a failing one alone fails."""
    columns = ", ".join(f"COALESCE(({c}), FALSE)" for c in conditions)
    query = f'SELECT "{TBNAME}", {columns} FROM "{layout.TAGS}"'
    con.register(layout.TAGS, tags)
    try:
        try:
            result = con.sql(query).to_arrow_table()
        except duckdb.Error as err:
            if len(conditions) == 1:
                failed = SqlError(f"the tag condition of topic {topics[0]!r} failed: {err}")
                return {topics[0]: failed}
            result = None
    finally:
        con.unregister(layout.TAGS)
    if result is None:  # find the failing ones, one at a time
        kept: Kept = {}
        for topic, condition in zip(topics, conditions, strict=True):
            kept |= _evaluate(con, tags, [topic], [condition])
        return kept
    names = result.column(0)
    return {
        topic: frozenset(str(n) for n in names.filter(result.column(i + 1)).to_pylist())
        for i, topic in enumerate(topics)
    }
