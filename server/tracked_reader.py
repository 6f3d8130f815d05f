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

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.errors import ConfigError
from sqltopic.server.batches import conform, with_context
from sqltopic.server.share_window import RowId
from sqltopic.server.state import State
from sqltopic.server.topic_reader import (
    READ_BYTES,
    TopicBlock,
    _check_vgroup,
    _evaluate,
    _Scope,
    _Shape,
    bounded_records,
)
from sqltopic.server.vnode import entry_runs
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import Table, Topic
from sqltopic.sql.topic.params import split_subscription
from sqltopic.sql.topic.tracked import split_ids, tracked_sql, with_row_ids
from sqltopic.wal import EntryType

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

    def ids(self) -> list[RowId]:
        return list(zip(self.versions.to_pylist(), self.indexes.to_pylist(), strict=True))


def table_of(blocks: Iterable[TrackedBlock]) -> Callable[[RowId], str]:
    """The table a row id of `blocks` came from ("" for one they do not cover)."""
    runs: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for block in blocks:
        for version, lo, hi, table in block.tables:
            runs[version].append((lo, hi, table))

    def find(rid: RowId) -> str:
        version, index = rid
        return next((t for lo, hi, t in runs.get(version, ()) if lo <= index < hi), "")

    return find


@dataclass(frozen=True)
class _Part:
    """A run of one table in an entry: its rows, and where they start in the entry."""

    version: int
    table: Table
    batch: pa.RecordBatch
    first: int


def read_tracked(
    state: State, topic_name: str, vgroup: int, from_version: int, max_rows: int,
    max_bytes: int = READ_BYTES,
) -> tuple[list[TrackedBlock], int]:  # fmt: skip
    """The topic's rows from `from_version` on with their ids, and the version to read
    next; the read stops as `read_topic`'s does. DDL events are not delivered to shared
    groups. Raises `VersionNotRetained` when retention removed `from_version`."""
    topic, scope = _scope(state, topic_name, vgroup)
    parts: list[_Part] = []
    rows = 0
    next_version = from_version
    for rec in bounded_records(state.vnode(vgroup).reader(), from_version, max_bytes):
        next_version = rec.version + 1
        if rec.entry_type is EntryType.DATA and topic.meta != "only":
            found = _parts(scope, rec.version, *rec.arrow_keyed())
            parts += found
            rows += sum(p.batch.num_rows for p in found)
        if rows >= max_rows:
            break
    return _evaluated(state, topic, parts), next_version


def read_rows(
    state: State, topic_name: str, vgroup: int, ids: Iterable[RowId]
) -> tuple[list[TrackedBlock], list[RowId]]:
    """The rows `ids` name, read again (each entry once), in id order; and the ids of
    rows the topic no longer delivers. Raises `VersionNotRetained` for an entry that
    retention removed."""
    topic, scope = _scope(state, topic_name, vgroup)
    wanted: dict[int, set[int]] = defaultdict(set)
    for version, index in ids:
        wanted[version].add(index)
    reader = state.vnode(vgroup).reader()
    blocks: list[TrackedBlock] = []
    for version in sorted(wanted):
        parts = []
        for rec in reader.read(version, max_entries=1):
            if rec.version == version and rec.entry_type is EntryType.DATA:
                parts = _parts(scope, version, *rec.arrow_keyed())
        for tracked in _evaluated(state, topic, parts):
            keep = pc.is_in(tracked.indexes, pa.array(sorted(wanted[version]), pa.int32()))
            if pc.any(keep).as_py():
                blocks.append(_filtered(tracked, keep))
    found = {rid for block in blocks for rid in block.ids()}
    gone = [(v, i) for v in sorted(wanted) for i in sorted(wanted[v]) if (v, i) not in found]
    return blocks, gone


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
    shape = _Shape.of(state, topic)
    data = pa.Table.from_batches([conform(p.batch, shape.data) for p in parts], schema=shape.data)
    lengths = [p.batch.num_rows for p in parts]
    batch = with_context(
        data, [p.table for p in parts], lengths, shape.tags, shape.precision,
        tbname=shape.tbname,
    )  # fmt: skip
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


def _filtered(tracked: TrackedBlock, keep: pa.Array) -> TrackedBlock:
    block = tracked.block
    data = block.data.filter(keep)
    return TrackedBlock(
        TopicBlock(block.table_name, data, block.first_version, block.last_version),
        tracked.versions.filter(keep), tracked.indexes.filter(keep), tracked.tables,
    )  # fmt: skip


def _tables(parts: list[_Part]) -> tuple[TableRun, ...]:
    return tuple((p.version, p.first, p.first + p.batch.num_rows, p.table.name) for p in parts)
