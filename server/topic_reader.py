"""Reading a topic from one vnode: WAL entries in, blocks of rows and meta events out.

A read takes a run of WAL entries from the requested version and keeps those the topic
is about. A query topic's data entries are concatenated into one batch and its compiled
SQL runs over all of them in a single DuckDB query (one query per entry would cost
~1 ms each). Stable and database topics deliver the entries' rows as they are, in the
table's current columns, one block per run of rows from one table. WITH META and ONLY
META topics also return the DDL events, in WAL order among the blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sqltopic.errors import NotFoundError
from sqltopic.server.batches import conform, with_context
from sqltopic.server.duck import SPLIT_PARTS, query
from sqltopic.server.state import State
from sqltopic.server.vnode import entry_runs
from sqltopic.sql import layout
from sqltopic.sql.layout import data_schema, tags_schema
from sqltopic.sql.model import TBNAME, Catalog, Column, Table, Topic
from sqltopic.sql.topic import matching_tables, topic_schema
from sqltopic.sql.topic.arrow_eval import ArrowPlan, arrow_plan
from sqltopic.wal import EntryType, WalReader, WalRecord

# Entries one read looks at, at most: enough to amortise a DuckDB query (~1 ms) over
# many entries, bounded so that a read of tiny entries returns promptly.
READ_ENTRIES = 8192
# Rows up to which a simple topic (sql/topic/arrow_eval.py) runs with pyarrow: DuckDB's
# ~1 ms per query dominates small reads (a consumer keeping up reads a few rows per
# poll); on large ones DuckDB's parallel scan wins.
ARROW_EVAL_MAX_ROWS = 65_536
# A large read of a selective topic runs as SPLIT_PARTS single-threaded DuckDB queries
# over parts of its batch at once (server/duck.py): its cost is the scan, which one
# query does on about one core. A topic keeping more of its rows is bound by building
# the result, which one query does faster on every core (bench/engine_bench.py: split,
# a 1 %-selective read gains ~15 %, a 50 % one loses ~30 %). So the split is chosen by
# the share of rows the topic's previous large read kept, at most SPLIT_MAX_KEPT.
SPLIT_MAX_KEPT = 0.1
# Rows each part has at least: a part costs another query's fixed ~1 ms.
SPLIT_MIN_ROWS = 131_072
# Bytes of entries one read holds, at most: keeps a message well inside gRPC limits.
READ_BYTES = 64 << 20
# Entries fetched from the WAL at a time while a read fills up to max_rows: a read
# stops once it has enough rows, and should not verify many entries it then leaves
# for the next read.
FETCH_ENTRIES = 16


@dataclass(frozen=True)
class TopicBlock:
    """Rows of one read: `table_name` is the source table when the rows come from one."""

    table_name: str | None
    data: pa.Table
    first_version: int
    last_version: int


@dataclass(frozen=True)
class TopicMeta:
    """A DDL event (create/alter/drop) for WITH META and ONLY META topics."""

    version: int
    event: dict[str, Any]


TopicItem = TopicBlock | TopicMeta


def read_topic(
    state: State, topic_name: str, vgroup: int, from_version: int, max_rows: int,
    max_bytes: int = READ_BYTES,
) -> tuple[list[TopicItem], int]:  # fmt: skip
    """The topic's items from `from_version` on, and the version to read next. The read
    stops after the entry that brings the rows it looked at to `max_rows`, or their
    bodies' bytes to `max_bytes`.

    Raises `VersionNotRetained` when retention removed `from_version`.
    """
    topic = state.catalog.topic(topic_name)
    if vgroup not in state.catalog.database(topic.db).vgroups:
        raise NotFoundError(f"vgroup {vgroup} is not a vgroup of database {topic.db}")
    scope = _Scope.of(state, topic, vgroup)
    items: list[TopicItem] = []
    pending: list[_Entry] = []
    rows = size = 0
    next_version = from_version
    records = _records(state.vnode(vgroup).reader(), from_version)
    for seen, rec in enumerate(records, start=1):
        next_version = rec.version + 1
        size += rec.body.nbytes
        if rec.entry_type is EntryType.META and topic.meta != "none":
            event = rec.json()
            if scope.wants_event(event):
                items += scope.flush(pending)
                pending = []
                items.append(TopicMeta(rec.version, event))
        elif rec.entry_type is EntryType.DATA and topic.meta != "only":
            for entry in scope.entries(rec):
                pending.append(entry)
                rows += entry.batch.num_rows
        if rows >= max_rows or seen >= READ_ENTRIES or size >= max_bytes:
            break
    items += scope.flush(pending)
    return items, next_version


def _records(reader: WalReader, from_version: int) -> Iterator[WalRecord]:
    """The WAL's entries from `from_version`, fetched a few at a time."""
    for batch in reader.batches(from_version, max_entries=FETCH_ENTRIES):
        yield from batch


@dataclass(frozen=True)
class _Entry:
    version: int
    table: Table
    batch: pa.RecordBatch


@dataclass
class _Scope:
    """What one topic wants from one vgroup: which tables, in which columns."""

    state: State
    topic: Topic
    tables: dict[str, Table]  # the tables whose data entries the topic delivers

    @classmethod
    def of(cls, state: State, topic: Topic, vgroup: int) -> _Scope:
        """The topic's tables in `vgroup`, recomputed only when the catalog changed (a
        stable topic's tag filter costs a DuckDB query)."""
        key = (topic.name, topic.create_us, vgroup)
        tables = state.derived(state.scopes, key, lambda: cls._tables(state, topic, vgroup))
        return cls(state, topic, tables)

    @staticmethod
    def _tables(state: State, topic: Topic, vgroup: int) -> dict[str, Table]:
        cat = state.catalog
        in_vnode = [t for t in cat.tables.values() if t.db == topic.db and t.vgroup == vgroup]
        if topic.kind == "database":
            tables = in_vnode
        elif (topic.db, topic.target) in cat.stables:
            tables = [t for t in in_vnode if t.stable == topic.target]
            if topic.kind == "stable" and topic.filter_sql:
                tables = _matching(state, topic, tables)
        else:
            tables = [t for t in in_vnode if t.name == topic.target]
        return {t.name: t for t in tables}

    def entries(self, rec: WalRecord) -> list[_Entry]:
        """The runs of a data entry (either form: sql/entries.py) that are the topic's
        tables' rows; not another table's, nor an earlier table's of the same name."""
        batch, key = rec.arrow_keyed()
        out = []
        for owner, rows in entry_runs(batch, key, self.tables):
            table = self.tables[owner.name]
            if owner.is_of(table):
                out.append(_Entry(rec.version, table, rows))
        return out

    def wants_event(self, event: dict[str, Any]) -> bool:
        if self.topic.kind == "database":
            return True
        name, kind = event.get("tableName"), event.get("tableType")
        if kind == "super":
            return bool(name == self.topic.target)
        # a child's events while it is one of the topic's tables; its drop may be read
        # after the catalog forgot it, and names the super table it belonged to
        if name in self.tables:
            return True
        return bool(event.get("type") == "drop" and event.get("using") == self.topic.target)

    def flush(self, pending: list[_Entry]) -> list[TopicItem]:
        if not pending:
            return []
        if self.topic.kind == "query":
            return [_run_query(self.state, self.topic, pending)]
        return _runs(self.state.catalog, pending)


def _matching(state: State, topic: Topic, children: list[Table]) -> list[Table]:
    """The children whose tags pass a stable topic's condition (evaluated by DuckDB)."""
    stb = state.catalog.stable(topic.db, topic.target or "")
    db = state.catalog.database(topic.db)
    schema = tags_schema(stb.tags, db.precision)
    rows = [{TBNAME: t.name, **t.tags} for t in children]
    tags = pa.Table.from_pylist(rows, schema=schema)
    keep = set(matching_tables(topic, tags, state.duck.get()))
    return [t for t in children if t.name in keep]


def _runs(catalog: Catalog, pending: list[_Entry]) -> list[TopicItem]:
    """One block per run of consecutive entries of one table, in current columns."""
    blocks: list[TopicItem] = []
    start = 0
    for i in range(1, len(pending) + 1):
        if i == len(pending) or pending[i].table.name != pending[start].table.name:
            run = pending[start:i]
            table = run[0].table
            db = catalog.database(table.db)
            schema = data_schema(catalog.columns_of(table.db, table.name), db.precision)
            data = pa.Table.from_batches([conform(e.batch, schema) for e in run], schema=schema)
            blocks.append(TopicBlock(table.name, data, run[0].version, run[-1].version))
            start = i
    return blocks


def _run_query(state: State, topic: Topic, pending: list[_Entry]) -> TopicBlock:
    """Evaluate a query topic over every pending entry at once."""
    shape = _Shape.of(state, topic)
    data = pa.Table.from_batches([conform(e.batch, shape.data) for e in pending], schema=shape.data)
    batch = with_context(
        data, [e.table for e in pending], [e.batch.num_rows for e in pending], shape.tags,
        shape.precision, tbname=shape.tbname,
    )  # fmt: skip
    out = _evaluate(state, topic, batch).cast(shape.out)
    names = {e.table.name for e in pending}
    only = next(iter(names)) if len(names) == 1 else None
    return TopicBlock(only, out, pending[0].version, pending[-1].version)


@dataclass(frozen=True)
class _Shape:
    """A query topic's batch and output schemas (derived from the catalog once per
    catalog change: a small read would spend a fifth of its time on them)."""

    data: pa.Schema  # the target's data columns now
    tags: tuple[Column, ...]  # the tags the topic's SQL names (only those are added)
    precision: str
    tbname: bool  # the compiled SQL quotes every identifier: `"tbname"` iff it names it
    out: pa.Schema

    @classmethod
    def of(cls, state: State, topic: Topic) -> _Shape:
        return state.derived(state.shapes, (topic.name, topic.create_us),
                             lambda: cls._compute(state.catalog, topic))  # fmt: skip

    @classmethod
    def _compute(cls, cat: Catalog, topic: Topic) -> _Shape:
        db = cat.database(topic.db)
        return cls(
            data=data_schema(cat.columns_of(topic.db, topic.target or ""), db.precision),
            tags=_used_tags(cat, topic),
            precision=db.precision,
            tbname=f'"{TBNAME}"' in topic.select_sql,
            out=topic_schema(topic, cat),
        )


def _evaluate(state: State, topic: Topic, batch: pa.Table) -> pa.Table:
    """The topic's SELECT over `batch`: with pyarrow when the batch is small and the
    topic simple enough to be exact there, else with DuckDB."""
    if batch.num_rows <= ARROW_EVAL_MAX_ROWS:
        plan = _arrow_plan(topic.select_sql)
        out = plan.run(batch) if plan is not None else None
        if out is not None:
            return out
    if batch.num_rows < 2 * SPLIT_MIN_ROWS or SPLIT_PARTS == 1:
        return query(state.duck.get(), topic.select_sql, layout.BATCH, batch)
    key = (topic.name, topic.create_us)
    if state.kept_share.get(key, 1.0) > SPLIT_MAX_KEPT:
        out = query(state.duck.get(), topic.select_sql, layout.BATCH, batch)
    else:
        out = _evaluate_split(state, topic, batch)
    state.kept_share[key] = out.num_rows / batch.num_rows
    return out


def _evaluate_split(state: State, topic: Topic, batch: pa.Table) -> pa.Table:
    """The SELECT over parts of `batch` at once, one single-threaded DuckDB query per
    core (server/duck.py), the results in the batch's order."""
    parts = min(SPLIT_PARTS, batch.num_rows // SPLIT_MIN_ROWS)
    step = -(-batch.num_rows // parts)
    slices = [batch.slice(start, step) for start in range(0, batch.num_rows, step)]
    return pa.concat_tables(state.duck.query_parts(topic.select_sql, layout.BATCH, slices))


@functools.lru_cache(maxsize=1024)
def _arrow_plan(select_sql: str) -> ArrowPlan | None:
    return arrow_plan(select_sql)


def _used_tags(cat: Catalog, topic: Topic) -> tuple[Column, ...]:
    """The tags the topic's SQL names (only those are added to the batch)."""
    table = cat.tables.get((topic.db, topic.target or ""))
    stable = table.stable if table is not None else topic.target
    stb = cat.stables.get((topic.db, stable or ""))
    if stb is None:
        return ()
    return tuple(t for t in stb.tags if t.name in topic.uses)
