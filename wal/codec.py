"""Entry bodies: Arrow IPC for data, JSON for meta and control entries."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sqltopic.wal.record import EntryType


@dataclass(frozen=True, slots=True)
class WalEntry:
    """One entry to append. `version` None takes the WAL's next version; `rows`, a data
    entry's row count when the caller knows it (lag in rows: wal/rows.py)."""

    entry_type: EntryType
    body: Any  # anything with the buffer protocol: bytes, memoryview, pyarrow.Buffer
    version: int | None = None
    rows: int | None = None


def data_entry(data: pa.RecordBatch | pa.Table, version: int | None = None) -> WalEntry:
    """A data entry holding `data` as one Arrow IPC record batch with its schema."""
    return WalEntry(EntryType.DATA, encode_arrow(data), version, data.num_rows)


def meta_entry(event: dict[str, Any], version: int | None = None) -> WalEntry:
    """A meta entry (a DDL event) holding `event` as JSON."""
    return WalEntry(EntryType.META, encode_json(event), version)


def control_entry(payload: dict[str, Any], version: int | None = None) -> WalEntry:
    """An internal control entry holding `payload` as JSON."""
    return WalEntry(EntryType.CONTROL, encode_json(payload), version)


def encode_arrow(data: pa.RecordBatch | pa.Table) -> pa.Buffer:
    """Serialize to an Arrow IPC stream holding exactly one record batch."""
    batch = _one_batch(data)
    sink = pa.BufferOutputStream()
    writer = pa.ipc.RecordBatchStreamWriter(sink, batch.schema)
    writer.write_batch(batch)
    writer.close()
    return sink.getvalue()


def decode_arrow(body: memoryview | bytes | pa.Buffer) -> pa.RecordBatch:
    """The record batch in a data body. Zero-copy when `body` is 8-byte aligned memory."""
    return decode_arrow_keyed(body)[0]


def decode_arrow_keyed(body: memoryview | bytes | pa.Buffer) -> tuple[pa.RecordBatch, bytes]:
    """The record batch, and the bytes of its schema message: equal bytes, equal schema
    (callers cache what they derive from a schema under them).

    Schemas are cached by those bytes: a table's entries all carry the same one, and
    parsing it costs more than reading the batch.

    The batch is validated in full (offsets in bounds and in order, UTF-8) before it is
    returned: a body that passed its checksum was written by the server, but a damaged
    one (or one an older version stored) must fail here, as `pa.ArrowInvalid`, rather
    than crash or leak memory in whoever reads its values. It costs about a microsecond
    a batch, more for strings (~12 µs per 1,000 values).
    """
    batch, key = _unchecked(body)
    batch.validate(full=True)
    return batch, key


def row_count(body: memoryview | bytes | pa.Buffer) -> int:
    """The rows of a data body, from its record batch's metadata (no values are read or
    checked)."""
    return int(_unchecked(body)[0].num_rows)


def _unchecked(body: memoryview | bytes | pa.Buffer) -> tuple[pa.RecordBatch, bytes]:
    """The record batch of a data body, not validated, and its schema's bytes."""
    buf = body if isinstance(body, pa.Buffer) else pa.py_buffer(body)
    reader = pa.BufferReader(buf)
    first = pa.ipc.read_message(reader)
    key = first.metadata.to_pybytes()
    schema = _SCHEMAS.get(key)
    if schema is None:
        if len(_SCHEMAS) >= SCHEMAS_KEPT:
            _SCHEMAS.clear()
        schema = _SCHEMAS[key] = pa.ipc.read_schema(first)
    return pa.ipc.read_record_batch(pa.ipc.read_message(reader), schema), key


# Distinct entry schemas cached: one per table written (its metadata names the table).
SCHEMAS_KEPT = 16_384
_SCHEMAS: dict[bytes, pa.Schema] = {}


def encode_json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def decode_json(body: memoryview | bytes) -> dict[str, Any]:
    value = json.loads(bytes(body))
    if not isinstance(value, dict):
        raise ValueError("a meta or control body must be a JSON object")
    return value


def _one_batch(data: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    if isinstance(data, pa.RecordBatch):
        return data
    batches = data.combine_chunks().to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=data.schema)
    return batches[0]
