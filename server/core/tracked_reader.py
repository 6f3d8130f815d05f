"""Reading a topic for a shared group: every row it delivers named by its id, the WAL
version of its entry and its index among the entry's rows (sql/topic/tracked.py).

`read_tracked` reads on from a window's end, as `topic_reader.read_topic` reads from a
position; `read_rows` reads again the rows a window hands out for redelivery, each entry
once. A query topic is evaluated in its tracked form; a stable or database topic
delivers whole runs of entries, whose ids are their positions. A row that a redelivery
no longer finds in the topic (its table dropped, a condition on NOW() that lets it out
by now) is reported as gone, so that its window can count it done.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.errors import ConfigError
from sqltopic.server.common.rwlock import WouldBlock
from sqltopic.server.core.state import State
from sqltopic.server.core.topic_reader import (
    READ_BYTES,
    TopicBlock,
    _check_vgroup,
    _evaluate,
    _Scope,
    _Shape,
    bounded_records,
)
from sqltopic.server.vnode.row_runs import runs_of_lists
from sqltopic.server.vnode.share_window import KeyPieces, RowId, Run, cut
from sqltopic.sql.entries import conform, entry_runs
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import Table, Topic
from sqltopic.sql.topic.params import split_subscription
from sqltopic.sql.topic.tracked import split_ids, tracked_sql, with_row_ids
from sqltopic.wal import EntryType

# Spans of an entry that `read_rows` tests an index against one by one; past this many
# it looks the indexes up in a set of every row instead.
MAX_SPAN_TESTS = 8
# A run of an entry's rows from one table: (version, first index, end index, table).
TableRun = tuple[int, int, int, str]


@dataclass(frozen=True)
class TrackedBlock:
    """Rows of one read with the id of each: `versions[i]`, `indexes[i]` name row i;
    `tables` says which table each input row came from (a key_shared group's key)."""

    block: TopicBlock
    versions: pa.Array
    indexes: pa.Array
    tables: tuple[TableRun, ...] = ()

    @functools.cached_property
    def id_lists(self) -> tuple[list[int], list[int]]:
        """The rows' versions and indexes as lists (made once: a lease needs them twice)."""
        return self.versions.to_pylist(), self.indexes.to_pylist()

    def ids(self) -> list[RowId]:
        return list(zip(*self.id_lists, strict=True))

    def runs(self) -> list[Run]:
        """The block's rows as runs (server/vnode/row_runs.py)."""
        return runs_of_lists(*self.id_lists)


def table_of(blocks: Iterable[TrackedBlock]) -> KeyPieces:
    """The pieces of a run of `blocks`' rows by the table they came from ("" for rows
    they do not cover)."""
    tables: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for block in blocks:
        for version, lo, hi, table in block.tables:
            tables[version].append((lo, hi, table))

    def pieces(version: int, lo: int, hi: int) -> Iterator[tuple[int, int, str]]:
        for a, b, table in cut(lo, hi, tables.get(version, ())):
            yield a, b, table or ""

    return pieces


@dataclass(frozen=True)
class _Part:
    """A run of one table in an entry: its rows, and where they start in the entry."""

    version: int
    table: Table
    batch: pa.RecordBatch
    first: int


def read_tracked(
    state: State, topic_name: str, vgroup: int, from_version: int, max_rows: int,
    max_bytes: int = READ_BYTES, inline_bytes: int | None = None,
    end_version: int | None = None,
) -> tuple[list[TrackedBlock], int]:  # fmt: skip
    """The topic's rows from `from_version` on with their ids, and the version to read
    next; the read stops as `read_topic`'s does. DDL events are not delivered to shared
    groups. Raises `VersionNotRetained` when retention removed `from_version`. With
    `inline_bytes` (a read on the event loop) the read also stops before the entry that
    would bring its bodies past it, and raises WouldBlock when that is the first one (a
    worker decodes it). With `end_version` it stops before that version (Vnode.ReadTopic
    reads a range)."""
    topic, scope = _scope(state, topic_name, vgroup)
    parts: list[_Part] = []
    rows = size = 0
    next_version = from_version
    for rec in bounded_records(state.vnode(vgroup).reader(), from_version, max_bytes):
        if end_version is not None and rec.version >= end_version:
            break
        size += rec.body.nbytes
        if inline_bytes is not None and size > inline_bytes:
            if next_version == from_version:
                raise WouldBlock
            break
        next_version = rec.version + 1
        if rec.entry_type is EntryType.DATA and topic.meta != "only":
            found = _parts(scope, rec.version, *rec.arrow_keyed())
            parts += found
            rows += sum(p.batch.num_rows for p in found)
        if rows >= max_rows:
            break
    return _evaluated(state, topic, parts), next_version


def read_rows(
    state: State, topic_name: str, vgroup: int, runs: Iterable[Run]
) -> tuple[list[TrackedBlock], list[Run]]:
    """The rows of `runs` (which overlap nowhere), read again (each entry once), in
    id order; and the runs of rows the topic no longer delivers. Raises
    `VersionNotRetained` for an entry that retention removed."""
    topic, scope = _scope(state, topic_name, vgroup)
    wanted: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for version, lo, hi in runs:
        wanted[version].append((lo, hi))
    reader = state.vnode(vgroup).reader()
    blocks: list[TrackedBlock] = []
    found: list[Run] = []
    for version in sorted(wanted):
        parts = []
        for rec in reader.read(version, max_entries=1):
            if rec.version == version and rec.entry_type is EntryType.DATA:
                parts = _parts(scope, version, *rec.arrow_keyed())
        for tracked in _evaluated(state, topic, parts):
            keep = within(tracked.indexes, wanted[version])
            if pc.any(keep).as_py():
                block = filtered(tracked, keep)
                blocks.append(block)
                found += block.runs()
    gone = _without(sorted((v, lo, hi) for v, pairs in wanted.items() for lo, hi in pairs), found)
    return blocks, gone


def within(indexes: pa.Array, spans: list[tuple[int, int]]) -> pa.Array:
    """Which of `indexes` fall in one of `spans` ([lo, hi) each)."""
    if len(spans) > MAX_SPAN_TESTS:  # one look-up beats many comparisons then
        rows = pa.array([i for lo, hi in spans for i in range(lo, hi)], indexes.type)
        return pc.is_in(indexes, value_set=rows)
    inside = [pc.and_(pc.greater_equal(indexes, lo), pc.less(indexes, hi)) for lo, hi in spans]
    keep = inside[0]
    for more in inside[1:]:
        keep = pc.or_(keep, more)
    return keep


def _without(runs: list[Run], found: list[Run]) -> list[Run]:
    """The rows of `runs` (sorted) not in `found` (sorted, within them), as runs."""
    found_by: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    for version, lo, hi in found:
        found_by[version].append((lo, hi, True))
    return [
        (version, a, b)
        for version, lo, hi in runs
        for a, b, hit in cut(lo, hi, found_by.get(version, ()))
        if hit is None
    ]


def _scope(state: State, topic_name: str, vgroup: int) -> tuple[Topic, _Scope]:
    base, bound = split_subscription(topic_name)
    topic = state.catalog.topic(base)
    if topic.params or bound is not None:
        raise ConfigError(
            f"topic {topic.name}: a parameterized topic is not offered to shared groups; "
            "consume it in a vgroup group"
        )
    _check_vgroup(state, topic, vgroup)
    return topic, _Scope.of(state, topic, vgroup)


def _parts(scope: _Scope, version: int, batch: pa.RecordBatch, key: bytes | None) -> list[_Part]:
    """The topic's runs of a data entry, each with the index of its first row."""
    parts = []
    first = 0
    for owner, rows in entry_runs(batch, key):  # every run: the indexes count them all
        table = scope.table_of(owner)
        if table is not None:
            parts.append(_Part(version, table, rows, first))
        first += rows.num_rows
    return parts


def _evaluated(state: State, topic: Topic, parts: list[_Part]) -> list[TrackedBlock]:
    if not parts:
        return []
    if topic.kind == "query":
        return [_query(state, topic, parts)]
    return _runs(state, parts)


def _query(state: State, topic: Topic, parts: list[_Part]) -> TrackedBlock:
    """The tracked form over every part at once (as `_run_query` evaluates a topic)."""
    shape = _Shape.of_state(state, topic)
    lengths = [p.batch.num_rows for p in parts]
    batch = shape.batch([p.table for p in parts], [p.batch for p in parts])
    batch = with_row_ids(batch, [p.version for p in parts], lengths, [p.first for p in parts])
    own, versions, indexes = split_ids(
        _evaluate(state, topic, batch, tracked_sql(topic.select_sql))
    )
    names = {p.table.name for p in parts}
    only = next(iter(names)) if len(names) == 1 else None
    block = TopicBlock(only, own.cast(shape.out), parts[0].version, parts[-1].version)
    return TrackedBlock(block, versions, indexes, _tables(parts))


def _runs(state: State, parts: list[_Part]) -> list[TrackedBlock]:
    """One block per run of consecutive parts of one table, in current columns."""
    out: list[TrackedBlock] = []
    start = 0
    catalog = state.catalog
    for i in range(1, len(parts) + 1):
        if i < len(parts) and parts[i].table.name == parts[start].table.name:
            continue
        run = parts[start:i]
        table = run[0].table
        db = catalog.database(table.db)
        schema = data_schema(catalog.columns_of(table.db, table.name), db.precision)
        data = pa.Table.from_batches([conform(p.batch, schema) for p in run], schema=schema)
        ided = with_row_ids(data, [p.version for p in run], [p.batch.num_rows for p in run],
                            [p.first for p in run])  # fmt: skip
        block = TopicBlock(table.name, data, run[0].version, run[-1].version)
        versions = ided.column("__row_version").combine_chunks()
        indexes = ided.column("__row_index").combine_chunks()
        out.append(TrackedBlock(block, versions, indexes, _tables(run)))
        start = i
    return out


def filtered(tracked: TrackedBlock, keep: pa.Array) -> TrackedBlock:
    block = tracked.block
    data = block.data.filter(keep)
    return TrackedBlock(
        TopicBlock(block.table_name, data, block.first_version, block.last_version),
        tracked.versions.filter(keep), tracked.indexes.filter(keep), tracked.tables,
    )  # fmt: skip


def _tables(parts: list[_Part]) -> tuple[TableRun, ...]:
    return tuple((p.version, p.first, p.first + p.batch.num_rows, p.table.name) for p in parts)
