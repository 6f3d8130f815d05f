"""A WAL data entry's form, shared by the server and Spark: which tables own an entry's
rows, and the rows projected onto their table's current schema.

A data entry is one Arrow record batch in one of two forms (docs/wal.md, "Data entry
bodies"). A *single-table* entry holds one table's rows; its schema metadata names the
table, its super table and its uid. A *multi-table* entry holds the rows of many child
tables of one super table, grouped by table into runs; its last column is a directory,
run-end encoded (one run per table run: name and uid), and its schema metadata names
the super table and marks the form. Both carry the ids of their data columns, so an
entry is self-describing in WAL order, and readers take its runs with `entry_runs`
(zero-copy slices, either form). Entries keep the schema they were written with; after
ALTER STABLE ADD/DROP COLUMN the current schema differs, and readers `conform` every
run to it (a missing column reads as NULL, a dropped one disappears). Moved here from
server/vnode/vnode.py and server/core/batches.py so that spark_jobs can read entries exactly as
the server does.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.sql.layout import CIDS_KEY
from sqltopic.sql.model import Table

TABLE_KEY = b"sqltopic.table"
STABLE_KEY = b"sqltopic.stable"
UID_KEY = b"sqltopic.uid"
# In a multi-table entry's schema metadata: the form and its version (its last column is
# the directory). A reader meeting another version refuses it rather than misread it.
TABLES_KEY = b"sqltopic.tables"
TABLES_FORMAT = b"runs/1"
# The directory column: one run per run of rows of one table (a table may have several
# runs when an INSERT names it more than once), in row order.
DIRECTORY_FIELD = pa.field(
    "sqltopic.tables",
    pa.run_end_encoded(pa.int32(), pa.struct([("name", pa.string()), ("uid", pa.int64())])),
    nullable=False,
)


def vnode_dir(data_dir: Path, vgroup: int) -> Path:
    """The directory of one vnode in a data directory (its WAL is `wal/` inside)."""
    return data_dir / "vnode" / f"vnode{vgroup}"


def tag_batch(batch: pa.RecordBatch, table: Table | EntryTable) -> pa.RecordBatch:
    """`batch` with the schema metadata that names its table: a single-table entry."""
    meta = {
        **(batch.schema.metadata or {}),
        TABLE_KEY: table.name.encode(),
        STABLE_KEY: (table.stable or "").encode(),
        UID_KEY: str(table.uid).encode(),
    }
    return batch.replace_schema_metadata(meta)


def multi_batch(
    data: pa.RecordBatch, stable: str, names: pa.Array, uids: pa.Array, run_ends: pa.Array
) -> pa.RecordBatch:
    """A multi-table entry: `data` (rows of children of `stable`, grouped in runs) with
    the directory column; run i holds the rows [run_ends[i-1], run_ends[i]) of table
    names[i] (uid uids[i]). `run_ends` strictly increase and end at the row count."""
    values = pa.StructArray.from_arrays([names, uids], fields=list(DIRECTORY_FIELD.type.value_type))
    if run_ends.type != pa.int32():
        run_ends = pc.cast(run_ends, pa.int32())
    # (from_buffers validates the run ends; RunEndEncodedArray.from_arrays would try a
    # missing import on every call, ~200 µs)
    directory = pa.Array.from_buffers(
        DIRECTORY_FIELD.type, data.num_rows, [None], children=[run_ends, values]
    )
    meta = {**(data.schema.metadata or {}), STABLE_KEY: stable.encode(), TABLES_KEY: TABLES_FORMAT}
    # (append_column: a third of the cost of from_arrays with a new schema)
    return data.append_column(DIRECTORY_FIELD, directory).replace_schema_metadata(meta)


def entry_runs(
    batch: pa.RecordBatch, key: bytes | None = None, keep: Container[str] | None = None
) -> list[EntryRun]:
    """The runs of a data entry of either form, in row order: who owns them, and their
    rows as zero-copy slices in the columns they were written with (without the
    directory). With `keep`, only the runs of tables named there (a reader of a few
    tables skips the others' runs without slicing them). `key` (the entry's schema
    bytes, see decode_arrow_keyed) lets a single-table entry's owner be remembered."""
    meta = batch.schema.metadata or {}
    form = meta.get(TABLES_KEY)
    if form is None:
        owner = entry_table(batch) if key is None else entry_table_keyed(batch, key)
        return [(owner, batch)] if keep is None or owner.name in keep else []
    if form != TABLES_FORMAT:
        raise ValueError(
            f"a data entry of form {form!r}, which this version does not read (it reads "
            f"{TABLES_FORMAT!r}): written by a newer sqltopic"
        )
    last = batch.num_columns - 1
    directory = batch.column(last)
    if batch.schema.field(last).type != DIRECTORY_FIELD.type or directory.offset:
        raise ValueError("a multi-table data entry whose last column is not its directory")
    data = batch.select(range(last))
    stable = meta.get(STABLE_KEY, b"").decode() or None
    values = directory.values
    ends = directory.run_ends.to_pylist()
    names = values.field(0).to_pylist()
    uids = values.field(1).to_pylist()
    runs: list[EntryRun] = []
    start = 0
    for end, name, uid in zip(ends, names, uids, strict=True):
        if keep is None or name in keep:
            runs.append((EntryTable(name, stable, uid), data.slice(start, end - start)))
        start = end
    return runs


def entry_names(batch: pa.RecordBatch, key: bytes | None = None) -> frozenset[str]:
    """The names of the tables a data entry of either form holds rows of."""
    meta = batch.schema.metadata or {}
    if meta.get(TABLES_KEY) is None:
        owner = entry_table(batch) if key is None else entry_table_keyed(batch, key)
        return frozenset((owner.name,))
    directory = batch.column(batch.num_columns - 1)
    return frozenset(directory.values.field(0).to_pylist())


@dataclass(frozen=True, slots=True)
class EntryTable:
    """Who a data entry belongs to: table name, super table, table uid."""

    name: str
    stable: str | None
    uid: int

    def is_of(self, table: Table) -> bool:
        return self.name == table.name and self.uid == table.uid


# One run of a data entry: its table, and its rows.
EntryRun = tuple[EntryTable, pa.RecordBatch]


def entry_table_keyed(batch: pa.RecordBatch, key: bytes) -> EntryTable:
    """`entry_table`, remembered under the entry's schema bytes (see decode_arrow_keyed)."""
    owner = _OWNERS.get(key)
    if owner is None:
        if len(_OWNERS) >= OWNERS_KEPT:
            _OWNERS.clear()
        owner = _OWNERS[key] = entry_table(batch)
    return owner


# Entry schemas whose owner is remembered: one per table written, tiny each.
OWNERS_KEPT = 16_384
_OWNERS: dict[bytes, EntryTable] = {}


def entry_table(batch: pa.RecordBatch) -> EntryTable:
    meta = batch.schema.metadata or {}
    stable = meta.get(STABLE_KEY, b"").decode()
    uid = int(meta.get(UID_KEY, b"0"))
    return EntryTable(meta.get(TABLE_KEY, b"").decode(), stable or None, uid)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly the columns of `schema` (a `data_schema`), in its order and
    types. Columns match by id: one dropped and added again under its name is NULL, one
    renamed (a normal table's RENAME COLUMN) keeps its values. Without ids (0, entries
    older than ids) they match by name."""
    have = _ids(batch.schema)
    want = _ids(schema)
    if have == want and batch.schema.equals(schema, check_metadata=False):
        return batch
    positions = {cid: i for i, cid in enumerate(have)}
    arrays = []
    for field, cid in zip(schema, want, strict=True):
        i = positions.get(cid, -1)
        if i < 0 or (cid == b"0" and batch.schema.field(i).name != field.name):
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        col = batch.column(i)
        arrays.append(col if col.type == field.type else col.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _ids(schema: pa.Schema) -> list[bytes]:
    raw: bytes | None = (schema.metadata or {}).get(CIDS_KEY)
    if raw is None:  # no ids recorded: match by name
        return [f.name.encode() for f in schema]
    return raw.split(b",")
