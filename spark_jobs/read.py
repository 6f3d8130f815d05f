"""Reading one piece in a Spark task: WAL records to Arrow batches in Spark's types.

Runs in a Python worker. Data entries only, of either form (sql/entries.py): a run of
rows counts when its table (name and uid, as the live path checks) is one of the spec's
tables in that vgroup. Each run is conformed to the current schema
(`sql/entries.conform`, exactly as the server does), given its tag values, `tbname`,
`_vgroup` and `_version`, and runs are coalesced into batches of about `BATCH_ROWS`
rows before one cast to the Spark schema.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from sqltopic.errors import BackfillError, VersionNotRetained
from sqltopic.spark_jobs import types
from sqltopic.spark_jobs.pieces import Piece, open_wal
from sqltopic.spark_jobs.remote import Remote, entries
from sqltopic.spark_jobs.spec import VERSION, VGROUP, Spec
from sqltopic.sql.entries import conform, entry_runs
from sqltopic.sql.model import TBNAME
from sqltopic.wal import EntryType
from sqltopic.wal.codec import decode_arrow_keyed

# Rows per batch handed to Spark: big batches amortise the Arrow hand-over to the JVM
# (~0.1 ms each), and stay a few MB.
BATCH_ROWS = 65_536
# WAL entries fetched per read: bounded so that a piece of tiny entries stays in memory.
READ_ENTRIES = 4096


def read_piece(spec: Spec, piece: Piece) -> Iterator[pa.RecordBatch]:
    """The rows of `piece`, in WAL order, as batches of `spec.spark` (without the rows
    `spec.prefilter` rejects)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in _entry_batches(spec, piece):
        pending.append(batch)
        rows += batch.num_rows
        if rows >= BATCH_ROWS:
            yield from _flush(pending, spec)
            pending, rows = [], 0
    if pending:
        yield from _flush(pending, spec)


def _flush(pending: list[pa.RecordBatch], spec: Spec) -> Iterator[pa.RecordBatch]:
    batch = pending[0] if len(pending) == 1 else pa.concat_batches(pending)
    if spec.prefilter is not None:
        # rows the topic's condition rejects never reach the JVM (Spark applies the
        # topic's SQL anyway: this only spares it the work)
        kept = spec.prefilter.filter(pa.Table.from_batches([batch]))
        if kept is not None:
            if not kept.num_rows:
                return
            batch = kept.combine_chunks().to_batches()[0]
    yield types.to_spark(batch, spec.spark)


def _entry_batches(spec: Spec, piece: Piece) -> Iterator[pa.RecordBatch]:
    tables = spec.tables.get(piece.vgroup, {})
    for version, name, rows in piece_runs(spec.data_dir, spec.remote, tables, piece):
        yield _run_batch(spec, tables[name], name, piece.vgroup, version, rows)


class Owned(Protocol):
    """A table as a read knows it: entries carry its name and uid."""

    @property
    def uid(self) -> int: ...


def piece_runs(
    data_dir: str, source: Remote | None, tables: Mapping[str, Owned], piece: Piece
) -> Iterator[tuple[int, str, pa.RecordBatch]]:
    """(version, table name, rows) of each run of rows of `tables` in the piece's data
    entries (either form), in WAL order, as written (not conformed): from the data
    directory's files, or through the server when `source` is given."""
    if source is not None:
        yield from _remote_runs(source, tables, piece)
        return
    reader = open_wal(Path(data_dir), piece.vgroup)
    version, seen = piece.start, 0
    while version < piece.end:
        try:
            records = reader.read(version, max_entries=READ_ENTRIES)
        except VersionNotRetained as gone:
            raise BackfillError(
                f"vgroup {piece.vgroup}: retention deleted versions {piece.start}.."
                f"{gone.first_version - 1} while the backfill ran; run it again (it starts "
                "from the first retained version)"
            ) from None
        for rec in records:
            if rec.version >= piece.end:
                break
            seen += 1
            if rec.entry_type is EntryType.DATA:
                yield from _entry(tables, rec.version, rec.arrow_keyed())
        if not records or records[-1].version >= piece.end:
            break
        version = records[-1].version + 1
    _check_seen(piece, seen)


def _remote_runs(
    source: Remote, tables: Mapping[str, Owned], piece: Piece
) -> Iterator[tuple[int, str, pa.RecordBatch]]:
    """`piece_runs` of a piece read through the server (spark_jobs/remote.py)."""
    seen = 0
    for version, kind, body in entries(source, piece):
        seen += 1
        if kind is EntryType.DATA:
            yield from _entry(tables, version, decode_arrow_keyed(body))
    _check_seen(piece, seen)


def _check_seen(piece: Piece, seen: int) -> None:
    if seen != piece.entries:
        raise BackfillError(
            f"vgroup {piece.vgroup}: versions {piece.start}..{piece.end - 1} held "
            f"{piece.entries} entries when the job was planned, and {seen} now; run it again"
        )


def _entry(
    tables: Mapping[str, Owned], version: int, keyed: tuple[pa.RecordBatch, bytes]
) -> Iterator[tuple[int, str, pa.RecordBatch]]:
    """The runs of one data entry (either form) that are the tables' rows."""
    for owner, rows in entry_runs(*keyed, tables):
        if tables[owner.name].uid == owner.uid:  # not an earlier table's of the same name
            yield version, owner.name, rows


def _run_batch(
    spec: Spec, table: Any, name: str, vgroup: int, version: int, raw: pa.RecordBatch
) -> pa.RecordBatch:
    """One table's run of rows in Spark's columns: data, tags, tbname, vgroup, version."""
    data = conform(raw, spec.data)
    n = data.num_rows
    columns: dict[str, pa.Array] = dict(zip(spec.data.names, data.columns, strict=True))
    for field, value in zip(spec.tags, table.tags, strict=True):
        columns[field.name] = _constant(value, field.type, n)
    columns[TBNAME] = _constant(name, pa.string(), n)
    columns[VGROUP] = _constant(vgroup, pa.int32(), n)
    columns[VERSION] = _constant(version, pa.int64(), n)
    return pa.RecordBatch.from_arrays([columns[f] for f in spec.fields], schema=spec.arrow)


def _constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)
