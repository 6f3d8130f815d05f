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


def to_ipc(table: pa.Table) -> pa.Buffer:
    """`table` as one Arrow IPC stream (an empty schema and no batches when it has none)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.RecordBatchStreamWriter(sink, table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


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
