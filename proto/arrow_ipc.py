"""Arrow on the wire: tables as one Arrow IPC stream cut into chunks, and the frame size
limits of docs/protocol.md ("Limits and chunking"). The server and the client both use it,
so the two sides agree on the limits."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

MIB = 1024 * 1024
# Every response frame stays within gRPC's default 4 MiB receive limit...
MAX_FRAME_BYTES = 4 * MIB
# ...so a chunk leaves 64 KiB for the frame's other fields (header, tags).
MAX_CHUNK_BYTES = MAX_FRAME_BYTES - 64 * 1024
# Both sides accept frames this large, so a client that chunks less still gets through.
MAX_MESSAGE_BYTES = 64 * MIB
# gRPC channel and server options that raise the limits above gRPC's defaults.
MESSAGE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


# Explicit writer options: `pa.ipc.new_stream` without them reads environment variables
# on every call, a tenth of the framing of a one-row message.
_WRITE_OPTIONS = pa.ipc.IpcWriteOptions()
# A small table's stream is put together from its schema's message, kept for the last few
# schemas framed (a server frames thousands of small messages a second over a handful
# of topic schemas), and its batches' messages: less than half the cost of a stream
# writer. A larger one is written by the writer, which copies its bytes once, not twice.
SMALL_TABLE_ROWS = 512
SCHEMAS_KEPT = 8
# The end of an IPC stream: a continuation marker and a zero length.
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"
# (schema, its serialized message) of the schemas framed lately, the latest first; None
# for a schema with dictionaries, whose batches the writer puts before the rows
_heads: list[tuple[pa.Schema, bytes | None]] = []


def to_ipc(table: pa.Table) -> pa.Buffer:
    """`table` as one Arrow IPC stream (an empty schema and no batches when it has none):
    the bytes `pa.ipc.RecordBatchStreamWriter` writes."""
    if table.num_rows <= SMALL_TABLE_ROWS:
        head = _head(table.schema)
        if head is not None:
            batches = [batch.serialize() for batch in table.to_batches()]
            return pa.py_buffer(b"".join([head, *batches, _END_OF_STREAM]))
    sink = pa.BufferOutputStream()
    with pa.ipc.RecordBatchStreamWriter(sink, table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _head(schema: pa.Schema) -> bytes | None:
    """The stream's first message (the schema), or None when the writer must write it
    (dictionary columns)."""
    for kept, head in _heads:
        if kept.equals(schema, check_metadata=True):
            return head
    head = None if _has_dictionary(schema) else schema.serialize().to_pybytes()
    _heads.insert(0, (schema, head))  # races between threads only add a duplicate
    del _heads[SCHEMAS_KEPT:]
    return head


def _has_dictionary(schema: pa.Schema) -> bool:
    return any(_dictionary_in(field.type) for field in schema)


def _dictionary_in(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return True
    return any(_dictionary_in(kind.field(i).type) for i in range(kind.num_fields))


def chunks(stream: pa.Buffer, size: int = MAX_CHUNK_BYTES) -> Iterator[bytes]:
    """The bytes of `stream`, `size` at most per piece, in order."""
    view = memoryview(stream)
    for start in range(0, len(view), size):
        yield bytes(view[start : start + size])


def from_ipc(parts: Iterable[bytes]) -> pa.Table:
    """The table an Arrow IPC stream, given as its chunks in order, holds."""
    data = b"".join(parts)
    if not data:
        return pa.table({})
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all()
