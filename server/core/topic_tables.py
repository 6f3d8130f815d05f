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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import duckdb
import pyarrow as pa

from sqltopic.errors import SqlError
from sqltopic.server.core.state import State
from sqltopic.sql import layout
from sqltopic.sql.layout import tags_schema
from sqltopic.sql.model import TBNAME, Catalog, SuperTable, Table, Topic
from sqltopic.sql.topic.scope import (
    row_select,
    simple_mask,
    simple_predicate,
    table_condition,
)
from sqltopic.sql.types import Precision

# Topic conditions evaluated by one DuckDB query (one boolean column each). DuckDB's
# planning grows faster than linearly in them (IN lists above all: 16 take 32 ms, 64
# 0.2 s, 256 8.7 s), so a query holds few; most conditions never get there
# (`_simple`).
CONDITIONS_PER_QUERY = 8
# A catalog change that added at most this many children has their tags decided one
# row at a time in Python (where a condition is simple): below it, a condition's
# kernel calls cost more than its rows.
ROWS_BY_ROW = 64
# Only one thread computes what the conditions keep; the others wait for its answer.
_KEPT_LOCK = threading.Lock()

Kept = dict[str, frozenset[str] | SqlError]  # topic -> tables its condition keeps, or why not


def topic_tables(state: State, topic: Topic, vgroup: int) -> dict[str, Table]:
    """The tables of `vgroup` whose data entries `topic` delivers, by name."""
    key = (topic.name, topic.create_us, vgroup)
    return state.derived(state.scopes, key, lambda: _compute(state, topic, vgroup))


def prepare(state: State, topic: Topic) -> None:
    """Derive a new topic's condition on tables now (at its CREATE TOPIC), not in the
    first shared pass after it, nor the first after a new child: two parses and a
    predicate, ~2 ms, that a thousand new topics would otherwise add to one pass."""
    cat = state.catalog
    if (topic.db, topic.target) in cat.stables:
        condition = _condition(state, topic)
        if condition is not None:
            stb = cat.stable(topic.db, topic.target or "")
            simple_predicate(condition, tags_schema(stb.tags, cat.database(topic.db).precision))


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
    """Looked up by name, not found by a scan of the vgroup's tables: after a catalog
    change every topic's tables are computed again, and a thousand topics of a few
    devices each would scan the vgroup's thousand tables each."""
    cat = state.catalog
    in_vnode = _vnode_tables(state, topic.db, vgroup)
    if topic.kind == "database":
        return {t.name: t for t in in_vnode.tables}
    if (topic.db, topic.target) not in cat.stables:
        table = in_vnode.by_name.get(topic.target or "")
        return {} if table is None else {table.name: table}
    children = in_vnode.by_stable.get(topic.target or "", {})
    kept = _kept(state, topic.db, topic.target or "").get(topic.name)
    if kept is None:  # no condition on tables: every child
        return dict(children)
    if isinstance(kept, SqlError):
        raise kept.with_traceback(None)
    if len(kept) < len(children):
        return {name: children[name] for name in kept if name in children}
    return {name: t for name, t in children.items() if name in kept}


@dataclass(frozen=True)
class _VnodeTables:
    """A database's tables in one vgroup: in catalog order, by name, and each super
    table's children by name."""

    tables: list[Table]
    by_name: dict[str, Table]
    by_stable: dict[str | None, dict[str, Table]]


def _vnode_tables(state: State, db: str, vgroup: int) -> _VnodeTables:
    def compute() -> _VnodeTables:
        tables = [t for t in state.catalog.tables.values() if t.db == db and t.vgroup == vgroup]
        by_stable: dict[str | None, dict[str, Table]] = {}
        for t in tables:
            by_stable.setdefault(t.stable, {})[t.name] = t
        return _VnodeTables(tables, {t.name: t for t in tables}, by_stable)

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
    key = (db, stable)
    with _KEPT_LOCK:  # a catalog change: the first reader computes, the others wait
        hit = state.kept.get(key)
        if hit is not None and hit[0] == state.generation:
            return cast("_KeptOver", hit[1]).kept
        over = _kept_over(state, db, stable, None if hit is None else hit[1])
        state.kept[key] = (state.generation, over)
        return over.kept


@dataclass(frozen=True)
class _KeptOver:
    """What each condition kept, and what it was evaluated over: the next catalog
    change evaluates a condition seen before only over the children it added (a
    thousand topics' conditions over a thousand children, again for each child a write
    creates, would cost a pass ~0.1 s)."""

    stable: SuperTable  # its tags (replaced when they change) and
    precision: Precision  # the database's precision make the tags relation's schema
    conditions: dict[str, str]  # topic -> its condition
    children: dict[str, Table]  # name -> the child as evaluated (replaced when its tags are)
    kept: Kept


def _kept_over(state: State, db: str, stable: str, before: _KeptOver | None) -> _KeptOver:
    cat = state.catalog
    stb, precision = cat.stable(db, stable), cat.database(db).precision
    topics = [t for t in cat.topics.values() if t.db == db and t.target == stable]
    conditions = {t.name: c for t in topics if (c := _condition(state, t)) is not None}
    children = {t.name: t for t in cat.children(db, stable)} if conditions else {}
    now = _KeptOver(stb, precision, conditions, children, {})
    if not conditions:
        return now
    if before is None or not _unchanged(before, now):  # evaluate everything again
        now.kept.update(_evaluate_all(state, _tags(stb, precision, children.values()), conditions))
        return now
    added = [t for name, t in children.items() if name not in before.children]
    gone = {name for name in before.children if name not in children}
    again = {n: c for n, c in conditions.items() if before.conditions.get(n) == c}
    again = {n: c for n, c in again.items() if not isinstance(before.kept.get(n), SqlError)}
    fresh = {n: c for n, c in conditions.items() if n not in again}
    if fresh:
        now.kept.update(_evaluate_all(state, _tags(stb, precision, children.values()), fresh))
    more = _evaluate_added(state, _tags(stb, precision, added), added, again) if again else {}
    for name in again:
        was = cast("frozenset[str]", before.kept[name])
        found = more.get(name, frozenset())
        now.kept[name] = found if isinstance(found, SqlError) else (was - gone) | found
    return now


def _unchanged(before: _KeptOver, now: _KeptOver) -> bool:
    """Whether what `before` evaluated is evaluated alike now: the same tags relation,
    and every child it saw either gone or the same (its tags not set since)."""
    if before.stable is not now.stable or before.precision != now.precision:
        return False
    return all(now.children.get(name, t) is t for name, t in before.children.items())


def _evaluate_added(
    state: State, tags: pa.Table, added: list[Table], conditions: dict[str, str]
) -> Kept:
    """`_evaluate_all` over the children a catalog change added: a few (a write's
    auto-created tables) are decided row by row (scope.simple_predicate), which costs
    microseconds a condition where a pyarrow mask costs a tenth of a millisecond."""
    if not added:
        return {}
    if len(added) > ROWS_BY_ROW:
        return _evaluate_all(state, tags, conditions)
    rows = [(t.name, _tag_row(t)) for t in added]
    kept: Kept = {}
    rest: dict[str, str] = {}
    for name, condition in conditions.items():
        predicate = simple_predicate(condition, tags.schema)
        if predicate is None:
            rest[name] = condition
        else:
            kept[name] = frozenset(table for table, row in rows if predicate(row))
    return kept | _evaluate_all(state, tags, rest) if rest else kept


def _evaluate_all(state: State, tags: pa.Table, conditions: dict[str, str]) -> Kept:
    """The tables of `tags` each condition keeps: pyarrow for the simple ones, DuckDB a
    few at a time for the rest."""
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


def _tags(stb: SuperTable, precision: Precision, children: Iterable[Table]) -> pa.Table:
    """Children of `stb` with their tags, as the tags relation."""
    schema = tags_schema(stb.tags, precision)
    return pa.Table.from_pylist([_tag_row(t) for t in children], schema=schema)


def _tag_row(child: Table) -> dict[str, object]:
    """A child's row of the tags relation: its name and its tags."""
    return {TBNAME: child.name, **child.tags}


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
