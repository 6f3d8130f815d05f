"""Reading a topic from one vnode: WAL entries in, blocks of rows and meta events out.

A read takes a run of WAL entries from the requested version and keeps those the topic
is about. A query topic's data entries are concatenated into one batch and its compiled
SQL runs over all of them in a single DuckDB query (one query per entry would cost
~1 ms each). Stable and database topics deliver the entries' rows as they are, in the
table's current columns, one block per run of rows from one table. WITH META and ONLY
META topics also return the DDL events, in WAL order among the blocks.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

from sqltopic.errors import Error, NotFoundError
from sqltopic.server.core.bindings import BindingSet
from sqltopic.server.core.duck import SPLIT_PARTS
from sqltopic.server.core.state import State
from sqltopic.server.core.topic_tables import interest, row_sql, topic_tables
from sqltopic.server.core.topic_tables import prepare as tables_prepare
from sqltopic.sql import layout
from sqltopic.sql.entries import EntryTable, conform
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import TBNAME, Catalog, Table, Topic
from sqltopic.sql.topic.duck import query
from sqltopic.sql.topic.evaluate import (
    ARROW_EVAL_MAX_ROWS,
    QueryShape,
    each_run,
    small_evaluation,
)
from sqltopic.sql.topic.params import split_subscription, subscribed, topic_of
from sqltopic.wal import EntryType, WalReader, WalRecord

# Entries one read looks at, at most: enough to amortise a DuckDB query (~1 ms) over
# many entries, bounded so that a read of tiny entries returns promptly.
READ_ENTRIES = 8192
# A large read of a selective topic runs as SPLIT_PARTS single-threaded DuckDB queries
# over parts of its batch at once (server/core/duck.py): its cost is the scan, which one
# query does on about one core. A topic keeping more of its rows is bound by building
# the result, which one query does faster on every core (bench/engine_bench.py: split,
# a 1 %-selective read gains ~15 %, a 50 % one loses ~30 %). So the split is chosen by
# the share of rows the topic's previous large read kept, at most SPLIT_MAX_KEPT.
SPLIT_MAX_KEPT = 0.1
# Rows each part has at least: a part costs another query's fixed ~1 ms.
SPLIT_MIN_ROWS = 131_072
# Bytes of entries one read holds, at most: keeps a message well inside gRPC limits.
READ_BYTES = 64 << 20
# Entries fetched from the WAL at a time while a read fills up to max_rows, at most: a
# read stops once it has enough rows, and should not verify many entries it then
# leaves for the next read. Fetches start at one entry and double up to this, since a
# read of a few large entries (a shared group's lease) stops after the first.
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


class Subscriptions(dict[str, Any]):
    """The subscriptions of one topic waiting for a shared pass, by name (the values are
    the caller's). `version` changes after each name added (`added`): a version whose
    bindings a pass registered needs no new look at its thousand names, which are cold
    in the cache by the next write. None until a name is noted: always looked at."""

    version: int | None = None

    def added(self) -> None:
        """Note a name added (call after adding it)."""
        self.version = next(_versions)


_versions = itertools.count(1)  # unique across every Subscriptions: a version is its own
# What a shared pass reads for: topic -> its subscriptions waiting. A mapping the caller
# keeps and may change on another thread meanwhile (one look-up at a time is safe), not a
# copy made per pass: touching a thousand entries costs ~150 us once they left the cache.
Waiting = Mapping[str, Subscriptions]
# (a query topic's form, its entries' (version, batch) identities): what its evaluation is
EvaluationKey = tuple[str, tuple[tuple[int, int], ...]]
Evaluated = dict[EvaluationKey, TopicBlock]  # the evaluations of a shared pass


def read_topic(
    state: State, topic_name: str, vgroup: int, from_version: int, max_rows: int,
    max_bytes: int = READ_BYTES,
) -> tuple[list[TopicItem], int]:  # fmt: skip
    """The topic's items from `from_version` on, and the version to read next. The read
    stops after the entry that brings the rows it looked at to `max_rows`, or their
    bodies' bytes to `max_bytes`.

    Raises `VersionNotRetained` when retention removed `from_version`.
    """
    base, bound = split_subscription(topic_name)
    topic = state.catalog.topic(base)
    _check_vgroup(state, topic, vgroup)
    collector = _Collector(_Scope.of(state, topic, vgroup))
    vnode = state.vnode(vgroup)
    known = vnode.entry_names
    next_version = from_version
    for rec in bounded_records(vnode.reader(), from_version, max_bytes):
        next_version = rec.version + 1
        if rec.entry_type is EntryType.META and topic.meta != "none":
            collector.meta(rec.version, rec.json())
        elif rec.entry_type is EntryType.DATA and topic.meta != "only":
            for owner, rows in known.runs(rec, collector.scope.tables):
                collector.data(rec.version, owner, rows)
        if collector.rows >= max_rows:
            break
    items = collector.finish()
    if topic.params or bound is not None:  # ConfigError for a bad or missing binding
        name = subscribed(topic, topic_name)
        items = _bound(state, topic, items, {name}).get(name, [])
    return items, next_version


def read_topics(
    state: State, waiting: Waiting, vgroup: int, from_version: int, max_bytes: int = READ_BYTES,
) -> tuple[dict[str, list[TopicItem]], int]:  # fmt: skip
    """The shared pass: what `read_topic` answers for each subscription in `waiting`
    (by topic, of topics of `vgroup`'s database; one dropped meanwhile is left out)
    from `from_version`, the entries read and decoded once for all of them. Only the
    topics with a table among the entries (or a DDL event, for WITH META topics) are
    evaluated; the others, which have no items, are left out of the answer. Reads every
    entry up to the WAL's end, at most READ_ENTRIES of them and `max_bytes` of bodies;
    its caller (server/dnode/live.py) uses it for topics whose readers are caught up,
    where that is a few entries. Its work grows with the topics evaluated and the
    subscriptions answered, not with those waiting: a thousand may wait, a write
    reaches a few.

    Raises `VersionNotRetained` when retention removed `from_version`.
    """
    known = state.catalog.topics
    index = interest(state, vgroup)
    entries, next_version = _decoded(state, vgroup, from_version, max_bytes, index)
    mine = _by_topic(entries, index)
    has_meta = any(e.owner is None for e in entries)
    # only topics with something among the entries, unless a DDL event is (each taken
    # once: the caller may drop a topic meanwhile)
    asked = (
        list(waiting.items())
        if has_meta
        else [(name, subs) for name in mine if (subs := waiting.get(name)) is not None]
    )
    shared: Evaluated = {}  # topics of the same form over the same entries: one evaluation
    collected: list[tuple[Topic, Subscriptions, _Collector]] = []
    plans: dict[str, _Plan] = state.derived(state.pass_plans, vgroup, dict)
    for name, subs in asked:
        plan = plans.get(name)
        if plan is None:
            topic = known.get(name)
            if topic is None:
                continue  # dropped meanwhile
            _check_vgroup(state, topic, vgroup)
            plan = plans[name] = _Plan(topic, topic_tables(state, topic, vgroup))
        topic = plan.topic
        if topic.name not in mine and not (has_meta and topic.meta != "none"):
            continue
        collector = _Collector(_Scope(state, topic, plan.tables, shared), plan)
        collector.feed(entries if has_meta else mine[topic.name])
        collected.append((topic, subs, collector))
    _together(state, [c for _, _, c in collected], shared, entries)
    found: dict[str, list[TopicItem]] = {}
    for topic, subs, collector in collected:
        items = collector.finish()
        if topic.params:  # one evaluation, one partition among the bindings
            found |= _bound(state, topic, items, subs.keys(), subs.version)
        else:
            found[topic.name] = items
    return found, next_version


def _by_topic(
    entries: list[_Decoded], index: Mapping[str, Iterable[str]]
) -> dict[str, list[_Decoded]]:
    """Each topic's data entries in WAL order: those of its tables (`index`: table ->
    the topics that deliver it, made of the topics' tables). A topic then looks at its
    few entries, not at those of every table a write names."""
    mine: dict[str, list[_Decoded]] = {}
    for e in entries:
        if e.owner is not None:
            for name in index.get(e.owner.name, ()):
                mine.setdefault(name, []).append(e)
    return mine


def _together(
    state: State, collectors: list[_Collector], shared: Evaluated, entries: list[_Decoded]
) -> None:
    """Evaluate at once the entries that topics of one form have pending over different
    runs of tables (a thousand device-set topics, each over a few of the tables a write
    names): one evaluation of every run they have, each topic's rows its runs' slices,
    put in `shared` and handed to each collector (`evaluated`). A form with one set of
    entries, or that pyarrow cannot run exactly, is evaluated once per set of entries,
    as `_run_query` would."""
    forms: dict[str, tuple[_Shape, dict[EvaluationKey, tuple[Topic, list[_Entry]]]]] = {}
    keyed: list[tuple[_Collector, EvaluationKey]] = []
    for collector in collectors:
        topic = collector.scope.topic
        if topic.kind != "query" or topic.params or not collector.pending:
            continue
        plan = collector.plan
        assert plan is not None  # a shared pass's collectors come with their plans
        if plan.shape is None:
            plan.shape = _Shape.of_state(state, topic)
        shape = plan.shape
        key = _key(shape, collector.pending)
        keyed.append((collector, key))
        if key not in shared:
            subsets = forms.setdefault(shape.form, (shape, {}))[1]
            subsets.setdefault(key, (topic, collector.pending))
    rank: dict[int, int] | None = None
    for shape, subsets in forms.values():
        if len(subsets) > 1:
            if rank is None:
                rank = {id(e.batch): i for i, e in enumerate(entries)}
            _slice_among(shape, {k: pending for k, (_, pending) in subsets.items()}, shared, rank)
        for key, (topic, pending) in subsets.items():
            if key not in shared:  # alone in its form, or beyond pyarrow together
                shared[key] = _evaluated(state, topic, shape, pending)
    for collector, key in keyed:  # its shape and key looked up once
        collector.evaluated = shared[key]


def _slice_among(
    shape: _Shape, subsets: dict[EvaluationKey, list[_Entry]], shared: Evaluated,
    rank: dict[int, int],
) -> None:  # fmt: skip
    """`subsets` of runs (a topic's pending entries each) evaluated as one, in WAL order
    (`rank` of each run's batch); each subset's block into `shared`."""
    union: dict[int, _Entry] = {}
    for pending in subsets.values():
        for e in pending:
            union.setdefault(id(e.batch), e)
    runs = sorted(union.values(), key=lambda e: rank[id(e.batch)])
    tables, batches = [e.table for e in runs], [e.batch for e in runs]
    slices = each_run(shape, shape.row_sql, tables, batches, shape.out)
    if slices is None:
        return
    of_run = {id(e.batch): rows for e, rows in zip(runs, slices, strict=True)}
    for key, pending in subsets.items():
        parts = [of_run[id(e.batch)] for e in pending]
        data = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        shared[key] = TopicBlock(_only(pending), data, pending[0].version, pending[-1].version)


def prepare(state: State, topic: Topic) -> None:
    """Derive a new topic's condition on tables and a query topic's shapes now, at its
    CREATE TOPIC: otherwise the first write after a thousand CREATE TOPICs derives them
    all in one shared pass (~4 ms each: a 4 s stall for every consumer waiting on it).
    What cannot be derived is left for the first read to report, as without this."""
    with contextlib.suppress(Error):
        tables_prepare(state, topic)
        if topic.kind == "query":
            _Shape.of_state(state, topic)


def waiting_of(names: Iterable[str]) -> Waiting:
    """Subscription names as `read_topics` takes them: by topic."""
    out: dict[str, Subscriptions] = {}
    for name in names:
        out.setdefault(topic_of(name), Subscriptions())[name] = None
    for subs in out.values():
        subs.added()
    return out


def _bound(
    state: State, topic: Topic, items: list[TopicItem], names: AbstractSet[str],
    version: int | None = None,
) -> dict[str, list[TopicItem]]:  # fmt: skip
    """The items of each subscription in `names` (bindings of parameterized `topic`),
    from items of its shared form: each block split among the bindings (only those
    with rows are in the answer). A block's table is the bound `tbname` when the topic
    binds one by `=`, as its only source."""
    bindings = _binding_set(state, topic)
    tbname = next((i for i, p in enumerate(topic.params) if p.name == TBNAME and p.op == "="),
                  None)  # fmt: skip
    out: dict[str, list[TopicItem]] = {}
    for item in items:
        assert isinstance(item, TopicBlock)
        for name, rows in bindings.split(item.data, names, version).items():
            table = item.table_name
            if table is None and tbname is not None:
                table = bindings.binding(name).values[tbname][0]
            block = TopicBlock(table, rows, item.first_version, item.last_version)
            out.setdefault(name, []).append(block)
    return out


def _binding_set(state: State, topic: Topic) -> BindingSet:
    key = (topic.name, topic.create_us)
    found = state.binding_sets.get(key)
    if found is None:
        found = state.binding_sets.setdefault(
            key, BindingSet(topic, _Shape.of_state(state, topic).out)
        )
    return found  # type: ignore[no-any-return]


def _check_vgroup(state: State, topic: Topic, vgroup: int) -> None:
    if vgroup not in state.catalog.database(topic.db).vgroups:
        raise NotFoundError(f"vgroup {vgroup} is not a vgroup of database {topic.db}")


def bounded_records(reader: WalReader, from_version: int, max_bytes: int) -> Iterator[WalRecord]:
    """The WAL's entries from `from_version`, fetched a few at a time, ending with the
    READ_ENTRIES-th or the one that brings their bodies to `max_bytes`."""
    size = 0
    seen = 0
    fetch = 1
    while batch := reader.read(from_version, max_entries=fetch):
        for rec in batch:
            size += rec.body.nbytes
            seen += 1
            yield rec
            if seen >= READ_ENTRIES or size >= max_bytes:
                return
        from_version = batch[-1].version + 1
        fetch = min(2 * fetch, FETCH_ENTRIES)


@dataclass
class _Decoded:
    """One WAL entry, decoded once for every topic of a shared pass: a data entry's
    owner and batch, or (owner None) a DDL event, parsed on first use."""

    version: int
    owner: EntryTable | None
    batch: pa.RecordBatch | None
    record: WalRecord | None
    _event: dict[str, Any] | None = None

    def event(self) -> dict[str, Any]:
        if self._event is None:
            assert self.record is not None
            self._event = self.record.json()
        return self._event


def _decoded(
    state: State, vgroup: int, from_version: int, max_bytes: int, keep: Mapping[str, object]
) -> tuple[list[_Decoded], int]:
    """The entries from `from_version` (at most READ_ENTRIES, `max_bytes` of bodies),
    decoded, and the version after the last: a data entry's runs of the tables in
    `keep` (those some topic delivers); an event is parsed when a topic reads it."""
    out: list[_Decoded] = []
    next_version = from_version
    vnode = state.vnode(vgroup)
    known = vnode.entry_names
    records = vnode.reader().read(from_version, max_entries=READ_ENTRIES, max_bytes=max_bytes)
    for rec in records:
        next_version = rec.version + 1
        if rec.entry_type is EntryType.META:
            out.append(_Decoded(rec.version, None, None, rec))
        elif rec.entry_type is EntryType.DATA:
            for owner, rows in known.runs(rec, keep):
                out.append(_Decoded(rec.version, owner, rows, None))
    return out, next_version


@dataclass(eq=False)
class _Plan:
    """What a shared pass needs of one topic in one vgroup, kept until the catalog next
    changes (`State.pass_plans`): a pass looks at the few dozen topics a write reaches,
    and deriving these again for each cost more than collecting its entries."""

    topic: Topic
    tables: dict[str, Table]  # the tables whose data entries it delivers there
    shape: _Shape | None = None  # a query topic's, once a pass evaluated it


class _Collector:
    """One topic's items from entries fed in WAL order: data entries of its tables
    gathered and evaluated together, its DDL events in order among them."""

    def __init__(self, scope: _Scope, plan: _Plan | None = None) -> None:
        self.scope = scope
        self.plan = plan  # in a shared pass: the topic's plan there
        self.items: list[TopicItem] = []
        self.pending: list[_Entry] = []
        self.rows = 0
        # the pending entries' block, when the shared pass evaluated them already
        self.evaluated: TopicBlock | None = None

    def feed(self, entries: Iterable[_Decoded]) -> None:
        """The pass's decoded entries, in WAL order."""
        meta = self.scope.topic.meta
        for e in entries:
            if e.owner is None:
                if meta != "none":
                    self.meta(e.version, e.event())
            elif meta != "only":
                self.data(e.version, e.owner, e.batch)

    def meta(self, version: int, event: dict[str, Any]) -> None:
        if self.scope.wants_event(event):
            self.items += self.scope.flush(self.pending)
            self.pending = []
            self.items.append(TopicMeta(version, event))

    def data(self, version: int, owner: EntryTable, batch: pa.RecordBatch) -> None:
        table = self.scope.table_of(owner)
        if table is not None:
            self.pending.append(_Entry(version, table, batch))
            self.rows += batch.num_rows

    def finish(self) -> list[TopicItem]:
        if self.evaluated is not None:
            self.items.append(self.evaluated)
        else:
            self.items += self.scope.flush(self.pending)
        self.pending = []
        return self.items


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
    shared: Evaluated | None = None  # a shared pass's evaluations, for topics alike

    @classmethod
    def of(cls, state: State, topic: Topic, vgroup: int, shared: Evaluated | None = None) -> _Scope:
        """The topic's tables in `vgroup` (server/core/topic_tables.py)."""
        return cls(state, topic, topic_tables(state, topic, vgroup), shared)

    def table_of(self, owner: EntryTable) -> Table | None:
        """The topic's table that owns an entry's run, or None: another table's, or an
        earlier table's of the same name."""
        table = self.tables.get(owner.name)
        if table is None or not owner.is_of(table):
            return None
        return table

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
            return [_run_query(self.state, self.topic, pending, self.shared)]
        return _runs(self.state.catalog, pending)


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


def _run_query(
    state: State, topic: Topic, pending: list[_Entry], shared: Evaluated | None = None
) -> TopicBlock:
    """Evaluate a query topic over every pending entry at once. In a shared pass, topics
    of one form (the same SQL for rows, over the same columns and tags: a thousand
    device-set topics are one) over the same entries share one evaluation."""
    shape = _Shape.of_state(state, topic)
    if shared is None or topic.params:
        return _evaluated(state, topic, shape, pending)
    key = _key(shape, pending)
    block = shared.get(key)
    if block is None:
        block = shared[key] = _evaluated(state, topic, shape, pending)
    return block


def _evaluated(state: State, topic: Topic, shape: _Shape, pending: list[_Entry]) -> TopicBlock:
    batch = shape.batch([e.table for e in pending], [e.batch for e in pending])
    out = _evaluate(state, topic, batch, shape.row_sql)
    if not topic.params:  # a shared form keeps its hidden columns for the partition
        out = out.cast(shape.out)
    return TopicBlock(_only(pending), out, pending[0].version, pending[-1].version)


def _only(pending: list[_Entry]) -> str | None:
    """The table of entries when they are all one table's."""
    names = {e.table.name for e in pending}
    return next(iter(names)) if len(names) == 1 else None


def _key(shape: _Shape, pending: list[_Entry]) -> EvaluationKey:
    """What an evaluation is a function of: the form, and the entries' identities."""
    if len(pending) == 1:  # most topics a write reaches have one entry in it
        e = pending[0]
        return shape.form, ((e.version, id(e.batch)),)
    return shape.form, tuple([(e.version, id(e.batch)) for e in pending])


@dataclass(frozen=True)
class _Shape(QueryShape):
    """A query topic's shapes (sql/topic/evaluate.py) and the vnode's form of its rows'
    condition, derived once per catalog change: a small read would spend a fifth of its
    time on them."""

    row_sql: str = ""  # what decides a row of a table the topic reads (topic_tables.row_sql)
    # what its rows are a function of besides the entries: equal for topics that
    # evaluate alike (their SQL for rows and every schema)
    form: str = ""

    @classmethod
    def of_state(cls, state: State, topic: Topic) -> _Shape:
        """Kept until the catalog objects it is made of change, not at every catalog
        change: deriving it costs ~2 ms (a parse of the topic's SQL), and one CREATE
        TABLE would otherwise make a thousand topics pay it again in the next pass."""
        key = (topic.name, topic.create_us)
        hit = state.shapes.get(key)
        if hit is not None and hit[0] == state.generation:  # no catalog change since
            return cast("_Shape", hit[2])
        made_of = _made_of(state.catalog, topic)
        if hit is not None and all(a is b for a, b in zip(hit[1], made_of, strict=True)):
            state.shapes[key] = (state.generation, made_of, hit[2])
            return cast("_Shape", hit[2])
        shape = cls._compute(state.catalog, topic)
        state.shapes[key] = (state.generation, made_of, shape)
        return shape

    @classmethod
    def _compute(cls, cat: Catalog, topic: Topic) -> _Shape:
        shape, sql = QueryShape.of(cat, topic), row_sql(cat, topic)
        out = shape.out.to_string(truncate_metadata=False)
        form = "\n".join([sql, shape.data.to_string(), repr(shape.tags), shape.precision,
                           str(shape.tbname), out])  # fmt: skip
        return cls(**vars(shape), row_sql=sql, form=form)


def _made_of(cat: Catalog, topic: Topic) -> tuple[object, ...]:
    """The catalog objects a topic's shape derives from (frozen: a change replaces
    them): the topic, its database, and its target table and super table."""
    target = (topic.db, topic.target or "")
    table = cat.tables.get(target)
    stable = cat.stables.get((topic.db, table.stable)) if table and table.stable else None
    return (cat.topics.get(topic.name), cat.databases.get(topic.db), table, stable,
            cat.stables.get(target))  # fmt: skip


def _evaluate(state: State, topic: Topic, batch: pa.Table, sql: str | None = None) -> pa.Table:
    """The topic's SELECT (or `sql`, a form of it) over `batch`: with pyarrow when the
    batch is small and the topic simple enough to be exact there, else with DuckDB."""
    sql = sql or topic.select_sql
    if batch.num_rows <= ARROW_EVAL_MAX_ROWS:
        out = small_evaluation(sql, batch)
        if out is not None:
            return out
    if batch.num_rows < 2 * SPLIT_MIN_ROWS or SPLIT_PARTS == 1:
        return query(state.duck.get(), sql, layout.BATCH, batch)
    key = (topic.name, topic.create_us)
    if state.kept_share.get(key, 1.0) > SPLIT_MAX_KEPT:
        out = query(state.duck.get(), sql, layout.BATCH, batch)
    else:
        out = _evaluate_split(state, sql, batch)
    state.kept_share[key] = out.num_rows / batch.num_rows
    return out


def _evaluate_split(state: State, sql: str, batch: pa.Table) -> pa.Table:
    """`sql` over parts of `batch` at once, one single-threaded DuckDB query per core
    (server/core/duck.py), the results in the batch's order."""
    parts = min(SPLIT_PARTS, batch.num_rows // SPLIT_MIN_ROWS)
    step = -(-batch.num_rows // parts)
    slices = [batch.slice(start, step) for start in range(0, batch.num_rows, step)]
    return pa.concat_tables(state.duck.query_parts(sql, layout.BATCH, slices))
