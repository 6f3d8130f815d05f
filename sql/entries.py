"""A WAL data entry's form, shared by the server and Spark: which table owns an entry,
and the entry projected onto its table's current schema.

A data entry is one Arrow record batch of one table; its schema metadata names the table
(and its super table) and the ids of its columns, so an entry is self-describing in WAL
order. Entries keep the schema they were written with; after ALTER STABLE ADD/DROP
COLUMN the current schema differs, and readers `conform` every entry to it (a missing
column reads as NULL, a dropped one disappears). Moved here from server/vnode.py and
server/batches.py so that spark_jobs can read entries exactly as the server does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from sqltopic.sql.layout import CIDS_KEY
from sqltopic.sql.model import Table

TABLE_KEY = b"sqltopic.table"
STABLE_KEY = b"sqltopic.stable"
UID_KEY = b"sqltopic.uid"


def vnode_dir(data_dir: Path, vgroup: int) -> Path:
    """The directory of one vnode in a data directory (its WAL is `wal/` inside)."""
    return data_dir / "vnode" / f"vnode{vgroup}"


def tag_batch(batch: pa.RecordBatch, table: Table) -> pa.RecordBatch:
    """`batch` with the schema metadata that names its table."""
    meta = {
        **(batch.schema.metadata or {}),
        TABLE_KEY: table.name.encode(),
        STABLE_KEY: (table.stable or "").encode(),
        UID_KEY: str(table.uid).encode(),
    }
    return batch.replace_schema_metadata(meta)


@dataclass(frozen=True, slots=True)
class EntryTable:
    """Who a data entry belongs to: table name, super table, table uid."""

    name: str
    stable: str | None
    uid: int

    def is_of(self, table: Table) -> bool:
        return self.name == table.name and self.uid == table.uid


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
