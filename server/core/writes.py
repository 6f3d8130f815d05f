"""The write path: INSERT statements and Arrow writes become WAL data entries.

A write is planned completely first (tables resolved, child tables to create, every value
converted and checked) and only then appended, one append per vnode: a bad value
anywhere writes nothing. Writes to existing tables share the engine lock; a write that
creates child tables (USING ... TAGS, or new `tbname`s through a super table) takes it
alone, like DDL.

A write appends one data entry per run of consecutive pieces of one super table in a
vgroup (sql/entries.py): a write through a super table naming a thousand children makes
one multi-table entry per vgroup, its rows grouped by table with a few vectorised steps
(one dictionary encoding of `tbname`, one hash lookup of the names in the super table's
`ChildIndex`, two stable sorts), not a Python loop per table. A vgroup's DDL events of a
write (tables it creates) come before its data entries, in the same append.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.errors import (
    AlreadyExistsError,
    Error,
    InvalidValueError,
    NoPermission,
    NotFoundError,
    SqlError,
    VgroupUnavailable,
    excerpt,
)
from sqltopic.server.common.result import Result, Session
from sqltopic.server.common.rwlock import WouldBlock
from sqltopic.server.core.ddl import tag_values
from sqltopic.server.core.privileges import Rights
from sqltopic.server.core.routing import ChildIndex, vgroup_for
from sqltopic.server.core.state import State
from sqltopic.sql import events
from sqltopic.sql.entries import EntryTable, multi_batch, tag_batch
from sqltopic.sql.insert import Insert, InsertPart
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import TBNAME, Column, Database, SuperTable, Table, new_uid, no_table
from sqltopic.sql.names import check_name
from sqltopic.sql.statements import TableRef
from sqltopic.sql.types import ColumnType, Precision
from sqltopic.sql.values import to_arrow
from sqltopic.wal import WalEntry, data_entry, meta_entry

# TDengine's limit on a table name's length; `tbname` values are checked against it.
TBNAME_TYPE = ColumnType("VARCHAR", 192)


class _NeedsExclusive(Exception):
    """Planning under the shared lock found a table to create: plan again, alone."""


class TablesToCreate(Exception):
    """A dnode's write names child tables that do not exist yet: its mnode creates them
    (server/core/engine.py), since the catalog is the mnode's."""


@dataclass(frozen=True)
class _Piece:
    """Rows a write appends to one vgroup: one table's (`owner`), or runs of rows of
    children of super table `stable` (run i: table names[i] of uid uids[i], the rows up
    to ends[i])."""

    stable: str | None
    batch: pa.RecordBatch
    owner: EntryTable | None = None
    names: pa.Array | None = None
    uids: pa.Array | None = None
    ends: pa.Array | None = None

    def runs(self) -> tuple[pa.Array, pa.Array, pa.Array]:
        """names, uids and run ends (int32), for either kind."""
        if self.owner is not None:
            return (
                pa.array([self.owner.name], pa.string()),
                pa.array([self.owner.uid], pa.int64()),
                pa.array([self.batch.num_rows], pa.int32()),
            )
        assert self.names is not None
        assert self.uids is not None
        assert self.ends is not None
        return self.names, self.uids, self.ends


@dataclass
class Plan:
    """What a write will append, per vgroup, and the DDL events among it."""

    rights: Rights
    entries: dict[int, list[WalEntry]] = field(default_factory=dict)
    created: dict[tuple[str, str], Table] = field(default_factory=dict)
    rows: int = 0
    exclusive: bool = False
    # the rows, per vgroup in write order: they become entries at `finish`
    pieces: dict[int, list[_Piece]] = field(default_factory=dict)

    def check_write(self, db: Database, table: Table) -> None:
        """NotFoundError or NoPermission unless the user may write rows to `table`."""
        if not self.rights.may("write", db, table):
            self.rights.require("write", db, table.name, "writing rows")

    def check_create(self, db: Database, stb: SuperTable, name: str, tags: dict[str, Any]) -> None:
        """NoPermission unless the user may create child table `name` of `stb` with these
        tags: WRITE on the database, or on `stb` covering the tags."""
        rights = self.rights
        if rights.may_create("write", db, stb, name, tags):
            return
        rights.require("write", db, stb.name, "writing rows")
        raise NoPermission(
            f"creating child table {db.name}.{name} of {stb.name} with these tags needs "
            f"WRITE on them; user {rights.user}'s WRITE on {db.name}.{stb.name} covers only "
            "child tables whose tags meet its condition"
        )

    def add_data(self, table: Table, batch: pa.RecordBatch) -> None:
        owner = EntryTable(table.name, table.stable, table.uid)
        self.add_piece(table.vgroup, _Piece(table.stable, batch, owner))

    def add_piece(self, vgroup: int, piece: _Piece) -> None:
        self.pieces.setdefault(vgroup, []).append(piece)
        self.rows += piece.batch.num_rows

    def finish(self) -> Plan:
        """The data entries, after each vgroup's DDL events: one per run of consecutive
        pieces of one super table (a normal table's pieces stay one entry each)."""
        for vgroup, pieces in self.pieces.items():
            out = self.entries.setdefault(vgroup, [])
            group: list[_Piece] = []
            for piece in pieces:
                if group and not _joins(group[-1], piece):
                    out.append(data_entry(_entry_batch(group)))
                    group = []
                group.append(piece)
            out.append(data_entry(_entry_batch(group)))
        self.pieces = {}
        return self

    def add_create(self, table: Table) -> None:
        if not self.exclusive:
            raise _NeedsExclusive
        event = events.create_table(table)
        self.entries.setdefault(table.vgroup, []).append(meta_entry(event))
        self.created[(table.db, table.name)] = table


def _joins(last: _Piece, piece: _Piece) -> bool:
    """Whether `piece` goes into the entry of `last`: children of the same super table,
    both holding rows (a run is never empty)."""
    return (
        piece.stable is not None
        and piece.stable == last.stable
        and piece.batch.num_rows > 0
        and last.batch.num_rows > 0
    )


def _entry_batch(group: list[_Piece]) -> pa.RecordBatch:
    """One entry's batch for consecutive pieces: single-table when they hold one run."""
    first = group[0]
    if len(group) == 1 and first.owner is not None:
        return tag_batch(first.batch, first.owner)
    if len(group) == 1:
        names, uids, ends = first.runs()
        data = first.batch
    else:
        names, uids, ends = _joined_runs(group)
        data = pa.concat_batches([p.batch for p in group])
    if len(ends) == 1:
        owner = EntryTable(names[0].as_py(), first.stable, uids[0].as_py())
        return tag_batch(data, owner)
    assert first.stable is not None
    return multi_batch(data, first.stable, names, uids, ends)


def _joined_runs(group: list[_Piece]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The runs of consecutive pieces as one directory (names, uids, run ends). An
    INSERT's pieces are one table's each: their runs are built from Python lists at
    once, not as three tiny arrays per piece."""
    if all(p.owner is not None for p in group):
        owners = [p.owner for p in group if p.owner is not None]
        sizes = [p.batch.num_rows for p in group]
        return (
            pa.array([o.name for o in owners], pa.string()),
            pa.array([o.uid for o in owners], pa.int64()),
            pa.array(list(itertools.accumulate(sizes)), pa.int32()),
        )
    runs = [p.runs() for p in group]
    ends_parts, offset = [], 0
    for piece, (_, _, piece_ends) in zip(group, runs, strict=True):
        ends_parts.append(pc.add(piece_ends, pa.scalar(offset, pa.int32())))
        offset += piece.batch.num_rows
    return (
        pa.concat_arrays([r[0] for r in runs]),
        pa.concat_arrays([r[1] for r in runs]),
        pa.concat_arrays(ends_parts),
    )


def _run(state: State, user: str, build: Any) -> int:
    """Plan under the shared lock, or alone if tables must be created; then append. The
    user's rights are read under the lock too: they are the catalog's of the moment."""
    state.logged.seq = 0
    try:
        with state.lock.shared():
            plan = build(Plan(Rights(state, user))).finish()
            if state.lock.no_wait and _blocks(state, plan):
                raise WouldBlock  # acknowledged after an fsync: not on the event loop
            remote = state.take_remote_rows(plan.entries)
            state.write_entries(plan.entries)
    except _NeedsExclusive:
        if state.lock.no_wait:
            raise WouldBlock from None  # tables to create: DDL's lock, or the mnode's call
        if state.role == "dnode":
            raise TablesToCreate from None
        with state.lock.exclusive():
            plan = build(Plan(Rights(state, user), exclusive=True)).finish()
            remote = state.take_remote_rows(plan.entries)
            state.write_entries(plan.entries)
    if remote and state.forward is not None:
        # a cluster's mnode: the rows of vgroups on dnodes go there, after the lock
        # (the dnodes apply the change that made their tables meanwhile)
        state.forward(remote, state.logged.seq)
    return int(plan.rows)


def _blocks(state: State, plan: Plan) -> bool:
    """Whether appending `plan` waits: an fsync, or rows to forward to a dnode."""
    return any(
        vgroup not in state.vnodes or state.vnodes[vgroup].wal.options.level >= 2
        for vgroup in plan.entries
    )


# --- INSERT ----------------------------------------------------------------------------


def insert(state: State, session: Session, stmt: Insert) -> Result:
    now = state.now_us()

    def build(plan: Plan) -> Plan:
        for part in stmt.parts:
            _plan_part(state, session, plan, part, now)
        return plan

    return Result(affected_rows=_run(state, session.user, build))


def _plan_part(state: State, session: Session, plan: Plan, part: InsertPart, now: int) -> None:
    db = state.db_of(session, part.table)
    stb = state.catalog.stables.get((db.name, part.table.name))
    if stb is not None and part.using is None:
        _plan_through_stable(state, plan, db, stb, part, now)
        return
    table = _target(state, session, plan, db, part, now)
    columns = _table_columns(state, plan, table)
    listed = _listed(columns, part.columns, table.name)
    batch = to_arrow(part.rows, listed, db.precision, now, table=table.name, key=columns[0].name)
    plan.add_data(table, _fill(batch, columns, db))


def _target(
    state: State, session: Session, plan: Plan, db: Database, part: InsertPart, now: int
) -> Table:
    """The table written to, created from USING ... TAGS when it does not exist yet."""
    name = part.table.name
    existing = state.catalog.tables.get((db.name, name)) or plan.created.get((db.name, name))
    if existing is None and part.using is None:
        raise no_table(db.name, name)  # (the words of a hidden one: names do not leak)
    if existing is not None:
        using = part.using
        if using is not None and (existing.stable != using.name or using.db not in (None, db.name)):
            raise SqlError(f"table {name} exists and is not a child table of {using}")
        if (db.name, name) not in plan.created:  # those passed check_create
            plan.check_write(db, existing)
        return existing  # as in TDengine, the TAGS of an existing child are not applied
    assert part.using is not None
    if (db.name, name) in state.catalog.stables:
        raise AlreadyExistsError(f"{db.name}.{name} is a super table; name the child table")
    check_name("table", name)
    stb = state.catalog.stable(state.db_of(session, part.using).name, part.using.name)
    if stb.db != db.name:
        raise SqlError(
            f"table {db.name}.{name} cannot use super table {stb.db}.{stb.name}: a child "
            "table is in the database of its super table"
        )
    tags = tag_values(stb, part.tag_names, part.tag_values, db.precision, now)
    plan.check_create(db, stb, name, tags)
    table = Table(
        db.name, name, vgroup_for(db, name), now, stable=stb.name, tags=tags, uid=new_uid()
    )
    plan.add_create(table)
    return table


def _table_columns(state: State, plan: Plan, table: Table) -> tuple[Column, ...]:
    if table.stable is not None:
        return state.catalog.stable(table.db, table.stable).columns
    return table.columns


def _listed(columns: tuple[Column, ...], names: Sequence[str] | None, table: str) -> list[Column]:
    """The columns a column list names, in its order (all of them without a list)."""
    if names is None:
        return list(columns)
    by_name = {c.name: c for c in columns}
    out = []
    for name in names:
        col = by_name.get(name)
        if col is None:
            raise NotFoundError(f"table {table} has no column {name}")
        if col in out:
            raise SqlError(f"column {name} is listed twice")
        out.append(col)
    if columns[0] not in out:
        raise SqlError(f"the column list must include the timestamp column {columns[0].name}")
    return out


def _fill(batch: pa.RecordBatch, columns: Sequence[Column], db: Database) -> pa.RecordBatch:
    """`batch` with every column of the table, in order; unlisted ones NULL."""
    schema = _data_schema(tuple(columns), db.precision)
    arrays = []
    for f in schema:
        i = batch.schema.get_field_index(f.name)
        arrays.append(batch.column(i) if i >= 0 else pa.nulls(batch.num_rows, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@functools.lru_cache(maxsize=1024)
def _data_schema(columns: tuple[Column, ...], precision: Precision) -> pa.Schema:
    """`data_schema`, kept: building it costs more than a one-row entry's other work."""
    return data_schema(columns, precision)


def _plan_through_stable(
    state: State, plan: Plan, db: Database, stb: SuperTable, part: InsertPart, now: int
) -> None:
    """INSERT INTO stable (tbname, ts, ..., tag, ...) VALUES: rows go to their tables."""
    if part.columns is None or TBNAME not in part.columns:
        raise SqlError(f"inserting through super table {stb.name} needs a column list with tbname")
    known = {c.name: c for c in (*stb.columns, *stb.tags)} | {TBNAME: Column(TBNAME, TBNAME_TYPE)}
    unknown = [n for n in part.columns if n not in known]
    if unknown:
        raise NotFoundError(f"super table {stb.name} has no column or tag {unknown[0]}")
    listed = [known[n] for n in part.columns]
    batch = to_arrow(part.rows, listed, db.precision, now, table=stb.name, key=stb.columns[0].name)
    _split_by_table(state, plan, db, stb, pa.Table.from_batches([batch]), now)


def _split_by_table(
    state: State, plan: Plan, db: Database, stb: SuperTable, rows: pa.Table, now: int,
    sizes: Sequence[int] = (),
) -> None:  # fmt: skip
    """The rows of a write through `stb`, routed to their child tables (created from
    the rows' tag values if missing) and grouped per vgroup, with vectorised work.
    `sizes`: the rows of each write of a group, in order (`rows` holds them one after
    the other): each write's rows stay after the previous write's in every vgroup, as
    when the writes are made one by one."""
    if TBNAME not in rows.column_names:
        raise SqlError(f"writing through super table {stb.name} needs a tbname column")
    if rows.column(TBNAME).null_count:
        raise InvalidValueError(f"tbname may not be NULL when writing to {stb.name}")
    listed = [c for c in stb.columns if c.name in rows.column_names]
    if stb.columns[0] not in listed:
        raise SqlError(f"the timestamp column {stb.columns[0].name} must be given")
    if rows.num_rows == 0:
        return
    # unique names in the order they first appear; per row, its name's index there
    encoded = pc.dictionary_encode(_lower(rows.column(TBNAME).combine_chunks()))
    names, per_row = encoded.dictionary, encoded.indices
    uids, vgroups = _resolve(state, plan, db, stb, rows, names, per_row, now)
    data = rows.select([c.name for c in listed]).combine_chunks().to_batches()[0]
    if len(sizes) > 1:
        names, per_row, uids, vgroups = _per_write(names, per_row, uids, vgroups, sizes)
    _add_grouped(plan, stb.name, _fill(data, stb.columns, db), names, per_row, uids, vgroups)


def _per_write(
    names: pa.Array, per_row: pa.Array, uids: pa.Array, vgroups: pa.Array, sizes: Sequence[int]
) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """A group's tables taken per write: each (write, table) pair is a table of its own
    for the grouping, in order of first appearance (the first write's tables first),
    so that the rows of each write stay together after the previous write's."""
    # (scalars typed: a Python int costs pyarrow ~60 µs to convert, the work ~5)
    writes = [pa.repeat(pa.scalar(w * len(names), pa.int64()), n) for w, n in enumerate(sizes)]
    keys = pc.add(pa.concat_arrays(writes), per_row.cast(pa.int64()))
    units = pc.dictionary_encode(keys)
    unit_rows = units.indices
    which = pc.take(per_row, _first_rows(unit_rows, len(units.dictionary)))
    return pc.take(names, which), unit_rows, pc.take(uids, which), pc.take(vgroups, which)


def _lower(names: pa.Array) -> pa.Array:
    """Table names lower-case, as Python's `str.lower` makes them (vectorised when they
    are ASCII, as names nearly always are)."""
    if pc.all(pc.string_is_ascii(names)).as_py():
        return pc.ascii_lower(names)
    return pa.array([n.lower() for n in names.to_pylist()], pa.string())


def _resolve(
    state: State, plan: Plan, db: Database, stb: SuperTable, rows: pa.Table, names: pa.Array,
    per_row: pa.Array, now: int,
) -> tuple[pa.Array, pa.Array]:  # fmt: skip
    """The uid and vgroup of each named table (int64, int32), rights checked. When every
    name is an existing child of `stb`: one hash lookup in its ChildIndex. Otherwise a
    catalog lookup per name, creating the missing children from their first row's tag
    values (gathered for all of them at once)."""
    # (a write planned alone creates children: an index built now is stale at once)
    index = None if plan.exclusive else _child_index(state, db, stb)
    if index is not None:
        found = index.find(names)
        if found.null_count == 0:
            if not _whole(plan, db, stb):
                for i in found.to_pylist():
                    plan.check_write(db, index.tables[i])
            return pc.take(index.uids, found), pc.take(index.vgroups, found)
    tables = _children(state, plan, db, stb, rows, names, per_row, now)
    return (
        pa.array([t.uid for t in tables], pa.int64()),
        pa.array([t.vgroup for t in tables], pa.int32()),
    )


def _whole(plan: Plan, db: Database, stb: SuperTable) -> bool:
    """Whether the user may write every child of `stb`, existing or new (no condition):
    then no table needs a check of its own."""
    scope = plan.rights.scope("write", db, stb.name)
    return scope is not None and scope.condition is None


def _children(
    state: State, plan: Plan, db: Database, stb: SuperTable, rows: pa.Table, names: pa.Array,
    per_row: pa.Array, now: int,
) -> list[Table]:  # fmt: skip
    """The child table of each name, created if missing; checked in the names' order."""
    name_list = names.to_pylist()
    found = [
        state.catalog.tables.get((db.name, n)) or plan.created.get((db.name, n)) for n in name_list
    ]
    missing = [i for i, t in enumerate(found) if t is None]
    tags = _tags_of(stb, rows, per_row, len(name_list), missing) if missing else {}
    whole = _whole(plan, db, stb)
    out = []
    for i, (name, table) in enumerate(zip(name_list, found, strict=True)):
        if table is None:
            out.append(_new_child(state, plan, db, stb, name, tags[i], now, checked=whole))
            continue
        if table.stable != stb.name:
            raise SqlError(f"table {name} is not a child table of {stb.name}")
        if not whole and (db.name, name) not in plan.created:  # those passed check_create
            plan.check_write(db, table)
        out.append(table)
    return out


def _tags_of(
    stb: SuperTable, rows: pa.Table, per_row: pa.Array, count: int, wanted: list[int]
) -> dict[int, dict[str, Any] | None]:
    """For the names at positions `wanted` (of `count`, in first-appearance order), the
    tag values of their first row, as the catalog stores them (timestamps as integers);
    None when the write gives no tag column. One `take` for all of them."""
    given = [t.name for t in stb.tags if t.name in set(rows.column_names)]
    if not given:
        return dict.fromkeys(wanted)
    firsts = pc.take(_first_rows(per_row, count), pa.array(wanted, pa.int32()))
    picked = rows.select(given).take(firsts)
    for i, tag in enumerate(picked.schema):
        if pa.types.is_timestamp(tag.type):
            picked = picked.set_column(i, tag.name, picked.column(i).cast(pa.int64()))
    empty: dict[str, Any] = dict.fromkeys(t.name for t in stb.tags)
    return {i: empty | row for i, row in zip(wanted, picked.to_pylist(), strict=True)}


def _new_child(
    state: State, plan: Plan, db: Database, stb: SuperTable, name: str,
    tags: dict[str, Any] | None, now: int, *, checked: bool,
) -> Table:  # fmt: skip
    """Child table `name` of `stb` with these tags, to be created by the write;
    `checked`: the user's right covers every child of `stb` already."""
    check_name("table", name)
    if (db.name, name) in state.catalog.stables:
        raise AlreadyExistsError(f"{db.name}.{name} is a super table, not a child table name")
    if tags is None:
        raise NotFoundError(
            f"table {db.name}.{name} does not exist; give its tag columns to create it"
        )
    if not checked:
        plan.check_create(db, stb, name, tags)
    table = Table(
        db.name, name, vgroup_for(db, name), now, stable=stb.name, tags=tags, uid=new_uid()
    )
    plan.add_create(table)
    return table


def _first_rows(per_row: pa.Array, count: int) -> pa.Array:
    """For each of `count` names (indices in order of first appearance), its first row."""
    order = pc.sort_indices(per_row)  # stable: a name's rows keep their order
    counts = pc.value_counts(per_row).field("counts")  # names in first-appearance order
    starts = pc.subtract(pc.cumulative_sum(counts), counts)
    assert len(starts) == count
    return pc.take(order, starts)


def _add_grouped(
    plan: Plan, stable: str, data: pa.RecordBatch, names: pa.Array, per_row: pa.Array,
    uids: pa.Array, vgroups: pa.Array,
) -> None:  # fmt: skip
    """`data`'s rows, grouped by table (tables in the order their names first appear,
    each table's rows in their order), as one piece per vgroup."""
    if len(names) == 1:
        owner = EntryTable(names[0].as_py(), stable, uids[0].as_py())
        plan.add_piece(vgroups[0].as_py(), _Piece(stable, data, owner))
        return
    tables = pc.sort_indices(vgroups)  # stable: by vgroup, then first appearance
    rank = pc.sort_indices(tables)  # the inverse permutation: each table's place
    order = pc.sort_indices(pc.take(rank, per_row))  # stable: a table's rows keep order
    grouped = data.take(order)
    # one run per table, in entry order: where its rows end, and which table it is
    runs = pc.run_end_encode(pc.take(per_row, order), run_end_type=pa.int32())
    ends, which = runs.run_ends, runs.values
    names, uids, run_vgroups = (pc.take(a, which) for a in (names, uids, vgroups))
    # one run per vgroup over those runs: where its tables end, and which vgroup it is
    parts = pc.run_end_encode(run_vgroups, run_end_type=pa.int32())
    lo = 0
    for hi, vgroup in zip(parts.run_ends.to_pylist(), parts.values.to_pylist(), strict=True):
        first_row = ends[lo - 1].as_py() if lo else 0
        last_row = ends[hi - 1].as_py()
        part_ends = ends.slice(lo, hi - lo)
        if first_row:  # a run's end counts from its piece's first row
            part_ends = pc.subtract(part_ends, pa.scalar(first_row, pa.int32()))
        piece = _Piece(
            stable,
            grouped.slice(first_row, last_row - first_row),
            names=names.slice(lo, hi - lo),
            uids=uids.slice(lo, hi - lo),
            ends=part_ends,
        )
        plan.add_piece(vgroup, piece)
        lo = hi


def _child_index(state: State, db: Database, stb: SuperTable) -> ChildIndex | None:
    """The children of `stb` as a ChildIndex, kept until the catalog next changes; None
    while the catalog keeps changing. Building one costs a look at every table, so it is
    built only when the catalog did not change since the previous write through `stb`:
    a run of writes that create children each resolves names one by one instead, at a
    cost that follows the write's size rather than the catalog's."""
    cache = _INDEXES.get(id(state))
    if cache is None:
        cache = _INDEXES[id(state)] = {}
        weakref.finalize(state, _INDEXES.pop, id(state), None)
    key = (db.name, stb.name)
    generation, index = cache.get(key, (-1, None))
    if generation == state.generation and index is not None:
        return index
    if generation != state.generation:  # first write since a change: only note it
        if len(cache) >= INDEXES_KEPT:
            cache.clear()
        cache[key] = (state.generation, None)
        return None
    built = ChildIndex.of(state.catalog.children(db.name, stb.name))
    cache[key] = (state.generation, built)
    return built


# Super tables whose ChildIndex an engine keeps: one per super table written through.
INDEXES_KEPT = 1024
# id(State) -> (db, super table) -> (catalog generation, its ChildIndex, or None: not
# built yet); an entry goes with its State (weakref.finalize)
_INDEXES: dict[int, dict[tuple[str, str], tuple[int, ChildIndex | None]]] = {}


# --- Arrow writes ----------------------------------------------------------------------


def write_arrow(
    state: State, session: Session, target: str, data: pa.Table | pa.RecordBatch
) -> int:
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    return _write_tables(state, session, target, [table], grouped=False)


def write_arrow_group(
    state: State, session: Session, target: str, tables: list[pa.Table]
) -> list[int]:
    """Writes of one session to `target` that arrived together, appended as one (group
    commit: one routing, one entry per vgroup and one append each for all of them); the
    rows each wrote. Each table is checked on its own; when one is refused while the
    group is planned, GroupRefused is raised before anything was written, and the
    caller writes them one by one, each to its own answer."""
    _write_tables(state, session, target, tables, grouped=True)
    return [t.num_rows for t in tables]


class Refused:
    """The first VgroupUnavailable refusal among the writes of a Writes stream (or of a
    group of them), after which every write is refused unwritten, so that writes keep
    their order on each vgroup (server/rpc/write_stream.py)."""

    def __init__(self) -> None:
        self.first: VgroupUnavailable | None = None

    def note(self, results: Iterable[int | Error]) -> None:
        """Writes' answers, in order: the first VgroupUnavailable, if any, is the one."""
        if self.first is None:
            self.first = next((r for r in results if isinstance(r, VgroupUnavailable)), None)

    def later(self) -> VgroupUnavailable:
        """The refusal of a write after the first one."""
        return VgroupUnavailable(
            f"not written: an earlier write of this stream was refused ({self.first}); the "
            "writes after it are refused too, so that none lands before it. Send them "
            "again, in order, on a new stream"
        )


class GroupRefused(Exception):
    """A write of a group was refused while the group was planned: nothing was written."""


def _write_tables(
    state: State, session: Session, target: str, tables: list[pa.Table], *, grouped: bool
) -> int:
    db_name, _, name = target.rpartition(".")
    ref = TableRef(db_name.lower() or None, name.lower())
    now = state.now_us()

    def build(plan: Plan) -> Plan:
        try:
            _plan_arrow(state, session, plan, ref, tables, now)
        except Error as exc:
            if grouped:
                raise GroupRefused from exc
            raise
        return plan

    return _run(state, session.user, build)


def _plan_arrow(
    state: State, session: Session, plan: Plan, ref: TableRef, tables: list[pa.Table], now: int
) -> None:
    db = state.db_of(session, ref)
    stb = state.catalog.stables.get((db.name, ref.name))
    if stb is not None:
        key = stb.columns[0].name
        fields = _stable_fields(stb)
        checked = _joined([_check_arrow(t, fields, stb.name, db, key) for t in tables])
        _split_by_table(state, plan, db, stb, checked, now, [t.num_rows for t in tables])
        return
    plan.rights.require("write", db, ref.name, "writing rows")
    tb = state.catalog.table(db.name, ref.name)
    plan.check_write(db, tb)
    columns = _table_columns(state, plan, tb)
    fields = {c.name: c for c in columns}
    checked = _joined([_check_arrow(t, fields, tb.name, db, columns[0].name) for t in tables])
    if columns[0].name not in checked.column_names:
        raise SqlError(f"the timestamp column {columns[0].name} must be given")
    for batch in checked.combine_chunks().to_batches():
        plan.add_data(tb, _fill(batch, columns, db))


def _joined(tables: list[pa.Table]) -> pa.Table:
    """The checked tables of a group as one; GroupRefused when their columns differ."""
    if len(tables) == 1:
        return tables[0]
    first = tables[0].schema
    if any(not t.schema.equals(first) for t in tables[1:]):
        raise GroupRefused("the writes of the group give different columns")
    return pa.concat_tables(tables)


def naming_columns(state: State, session: Session, target: str, table: pa.Table) -> pa.Table:
    """A dnode: the columns of a write through super table `target` that say which child
    tables it names and their tags (`tbname` and the tag columns), for its mnode to
    create the missing ones (`create_children`)."""
    return _naming(_stable_of(state, session, target), table)


def _naming(stb: SuperTable, table: pa.Table) -> pa.Table:
    wanted = {TBNAME} | {t.name for t in stb.tags}
    return table.select([n for n in table.column_names if n.lower() in wanted])


def create_children(state: State, session: Session, target: str, table: pa.Table) -> None:
    """A cluster's mnode: create the child tables of super table `target` that a dnode's
    write names (`table`: its tbname and tag columns; others are ignored) and the
    catalog lacks, from their first row's tags, with the rights checks the write itself
    would make; the tables that exist already are left as they are."""
    with state.lock.exclusive():
        stb = _stable_of(state, session, target)
        db = state.catalog.database(stb.db)
        fields = {t.name: t for t in stb.tags} | {TBNAME: Column(TBNAME, TBNAME_TYPE)}
        rows = _check_arrow(_naming(stb, table), fields, stb.name, db, TBNAME)
        if TBNAME not in rows.column_names:
            raise SqlError(f"writing through super table {stb.name} needs a tbname column")
        if rows.column(TBNAME).null_count:
            raise InvalidValueError(f"tbname may not be NULL when writing to {stb.name}")
        encoded = pc.dictionary_encode(_lower(rows.column(TBNAME).combine_chunks()))
        plan = Plan(Rights(state, session.user), exclusive=True)
        _children(state, plan, db, stb, rows, encoded.dictionary, encoded.indices, state.now_us())
        state.write_entries(plan.entries)


def _stable_of(state: State, session: Session, target: str) -> SuperTable:
    db_name, _, name = target.rpartition(".")
    db = state.db_of(session, TableRef(db_name.lower() or None, name.lower()))
    return state.catalog.stable(db.name, name.lower())


def _stable_fields(stb: SuperTable) -> dict[str, Column]:
    fields = {c.name: c for c in (*stb.columns, *stb.tags)}
    fields[TBNAME] = Column(TBNAME, TBNAME_TYPE)
    return fields


def _check_arrow(
    table: pa.Table, fields: dict[str, Column], target: str, db: Database, key: str
) -> pa.Table:
    """Columns cast to their types and checked (lengths, no NULL in the `key` timestamp);
    unknown columns are errors, naming the column."""
    arrays, names = [], []
    for i, name in enumerate(table.column_names):
        col = fields.get(name.lower())
        if col is None:
            raise NotFoundError(f"{target} has no column {excerpt(name)}")
        if col.name in names:
            raise SqlError(f"column {col.name} is given twice in the write to {target}")
        arrays.append(_cast_column(table.column(i), col, target, db, key=col.name == key))
        names.append(col.name)
    return pa.Table.from_arrays(arrays, names=names)


def _cast_column(
    values: pa.ChunkedArray, col: Column, target: str, db: Database, *, key: bool
) -> pa.ChunkedArray:
    want = col.type.arrow(db.precision)
    try:
        out = values if values.type == want else values.cast(want, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidValueError(
            f"column {col.name} of {target} is {values.type}, which does not convert to "
            f"{col.type.sql()}: {exc}"
        ) from None
    if key and out.null_count:
        first = pc.index(pc.is_null(out), True).as_py()
        raise InvalidValueError(f"NULL timestamp in column {col.name} of {target}, row {first + 1}")
    if col.type.is_string and col.type.length is not None:
        _check_length(out, col, target)
    return out


def _check_length(values: pa.ChunkedArray, col: Column, target: str) -> None:
    measure = pc.utf8_length if col.type.name == "NCHAR" else pc.binary_length
    lengths = measure(values)
    longest = pc.max(lengths).as_py()
    if longest is not None and longest > (col.type.length or 0):
        row = pc.index(lengths, longest).as_py()
        unit = "characters" if col.type.name == "NCHAR" else "bytes"
        raise InvalidValueError(
            f"value {excerpt(str(values[row].as_py()))} for column {col.name} "
            f"({col.type.sql()}) of {target}, row {row + 1}: {longest} {unit} is longer "
            f"than {col.type.length}"
        )
