"""The framing check of a client's Arrow IPC stream (server/rpc/ipc_check.py): whole streams
pass whatever their chunking, and every malformed or refused one is an
InvalidValueError that says what is wrong, before any Arrow code reads it."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

from sqltopic.errors import InvalidValueError
from sqltopic.server.rpc.ipc_check import IpcFraming
from tests.support import ipc_stream

TABLE = pa.table(
    {
        "tbname": pa.array(["d1", "d2", "d1"]),
        "ts": pa.array([1, 2, 3], pa.timestamp("ms")),
        "voltage": pa.array([220, 221, 222], pa.int32()),
    }
)


def stream(table: pa.Table = TABLE, **options: object) -> bytes:
    """`TABLE` in batches of two rows: a stream of several record batches."""
    return ipc_stream(table, 2, **options)


def messages(data: bytes) -> list[bytes]:
    """The stream's messages (the end-of-stream marker last), by their framing."""
    out, at = [], 0
    while at < len(data):
        length = struct.unpack_from("<i", data, at + 4)[0]
        if length == 0:
            out.append(data[at : at + 8])
            break
        body = pa.ipc.read_message(pa.py_buffer(data[at:])).body.size
        out.append(data[at : at + 8 + length + body])
        at += 8 + length + body
    return out


def feed(data: bytes, chunk: int) -> bytearray:
    framing = IpcFraming()
    for start in range(0, len(data), chunk):
        framing.feed(data[start : start + chunk])
    return framing.finish()


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_a_whole_stream_passes_in_any_chunking(chunk: int) -> None:
    data = stream()
    assert bytes(feed(data, chunk)) == data
    assert pa.ipc.open_stream(bytes(feed(data, chunk))).read_all().equals(TABLE)


def test_a_dictionary_encoded_column_passes() -> None:
    table = TABLE.set_column(0, "tbname", pa.array(["d1", "d2", "d1"]).dictionary_encode())
    assert bytes(feed(stream(table), 5)) == stream(table)


def test_no_bytes_is_an_empty_stream() -> None:
    assert feed(b"", 1) == bytearray()


def broken(data: bytes) -> list[tuple[str, bytes]]:
    parts = messages(data)
    no_marker = parts[1][4:]
    return [
        ("continuation marker", b"\x00\x00\x00\x00" + data[4:]),
        ("continuation marker", no_marker),  # the legacy framing is not accepted
        ("metadata; at most", b"\xff\xff\xff\xff" + struct.pack("<i", 1 << 30) + data[8:]),
        ("metadata; at most", b"\xff\xff\xff\xff" + struct.pack("<i", -8) + data[8:]),
        ("ends inside a message", data[:-20]),
        ("ends inside a message", data[:13]),
        ("first is a record batch", b"".join(parts[1:])),
        ("is a schema", parts[0] + parts[0] + b"".join(parts[1:])),
        ("after the Arrow IPC end-of-stream", data + parts[1]),
        ("malformed Arrow IPC message metadata", data[:8] + b"\xff" * (len(parts[0]) - 8)),
    ]


@pytest.mark.parametrize(("says", "data"), broken(stream()))
def test_malformed_streams_are_refused(says: str, data: bytes) -> None:
    with pytest.raises(InvalidValueError, match=says):
        feed(data, 3)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_compressed_bodies_are_refused(codec: str) -> None:
    with pytest.raises(InvalidValueError, match="compressed Arrow IPC bodies"):
        feed(stream(compression=codec), 1 << 20)
