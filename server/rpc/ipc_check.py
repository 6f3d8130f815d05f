"""The framing of an Arrow IPC stream from a client, checked as its bytes arrive and
before any Arrow code reads them.

An IPC stream is a sequence of messages: a continuation marker (0xFFFFFFFF), a 32-bit
metadata length, a flatbuffer `Message` (its header type and body length) and the body;
an end-of-stream marker closes it (columnar.html#ipc-streaming-format in the Arrow
format). `IpcFraming` reads only what locates the messages and classifies them: the
first must be the schema, every later one a record batch or a dictionary batch, and no
body may be compressed (a compressed body declares its decoded size itself, so a small
request could ask the server for any amount of memory). The values inside are checked
afterwards by `arrow_check` once pyarrow decodes them.

The flatbuffer reader here is deliberately minimal: offsets are bounds-checked, and any
inconsistency is an `InvalidValueError`, never an exception of the parser.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sqltopic.errors import InvalidValueError

CONTINUATION = 0xFFFFFFFF
# MessageHeader union tags (format/Message.fbs).
SCHEMA, DICTIONARY_BATCH, RECORD_BATCH = 1, 2, 3
_KINDS = {SCHEMA: "schema", DICTIONARY_BATCH: "dictionary batch", RECORD_BATCH: "record batch"}
# Field slots of the tables read (format/Message.fbs).
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER, _MESSAGE_BODY_LENGTH = 1, 2, 3
_BATCH_COMPRESSION = 3
_DICTIONARY_DATA = 1
# A message's metadata is a few hundred bytes per column; a schema of thousands of
# columns stays far below this.
MAX_METADATA_BYTES = 16 << 20

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


class _Flat:
    """Bounds-checked reads of one flatbuffer."""

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf

    def read(self, fmt: struct.Struct, at: int) -> int:
        if at < 0 or at + fmt.size > len(self.buf):
            raise _Bad("an offset points outside the metadata")
        value: int = fmt.unpack_from(self.buf, at)[0]
        return value

    def root(self) -> int:
        return self.read(_U32, 0)

    def field(self, table: int, slot: int) -> int | None:
        """The position of a table's field, or None when absent."""
        vtable = table - self.read(_I32, table)
        size = self.read(_U16, vtable)
        entry = 4 + 2 * slot
        if entry + 2 > size:
            return None
        offset = self.read(_U16, vtable + entry)
        return table + offset if offset else None

    def table(self, table: int, slot: int) -> int | None:
        """The position of a sub-table a field refers to, or None when absent."""
        at = self.field(table, slot)
        return None if at is None else at + self.read(_U32, at)


class _Bad(Exception):
    """The metadata is inconsistent (turned into InvalidValueError with context)."""


@dataclass(frozen=True)
class Header:
    """What the framing of one message says: its kind and where its parts end."""

    kind: int
    size: int  # prefix + metadata + body, in bytes


def read_header(data: memoryview) -> Header | None:
    """The header of the message at the start of `data`; None when `data` does not hold
    the whole message yet. Raises InvalidValueError on a malformed or refused one.
    An end-of-stream marker is `Header(0, 8)`."""
    if len(data) < 8:
        return None
    marker, length = _U32.unpack_from(data, 0)[0], _I32.unpack_from(data, 4)[0]
    if marker != CONTINUATION:
        raise InvalidValueError(
            "Write: the payload is not an Arrow IPC stream (a message does not start with "
            "the continuation marker 0xFFFFFFFF): send pyarrow.ipc.new_stream's output"
        )
    if length == 0:
        return Header(0, 8)
    if not 0 < length <= MAX_METADATA_BYTES:
        raise InvalidValueError(
            f"Write: an Arrow IPC message declares {length} bytes of metadata; at most "
            f"{MAX_METADATA_BYTES} are accepted"
        )
    if len(data) < 8 + length:
        return None
    kind, body = _classify(data[8 : 8 + length])
    size = 8 + length + body
    return Header(kind, size) if len(data) >= size else None


def _classify(metadata: memoryview) -> tuple[int, int]:
    """The message's kind and body length, once its metadata passed the checks."""
    flat = _Flat(metadata)
    try:
        message = flat.root()
        kind_at = flat.field(message, _MESSAGE_HEADER_TYPE)
        kind = flat.read(_U8, kind_at) if kind_at is not None else 0
        length_at = flat.field(message, _MESSAGE_BODY_LENGTH)
        body = flat.read(_I64, length_at) if length_at is not None else 0
        header = flat.table(message, _MESSAGE_HEADER)
        compressed = header is not None and _compressed(flat, kind, header)
    except (_Bad, struct.error) as exc:
        raise InvalidValueError(f"Write: malformed Arrow IPC message metadata ({exc})") from None
    if kind not in _KINDS:
        raise InvalidValueError(
            f"Write: an Arrow IPC message of type {kind} (not a schema, record batch or "
            "dictionary batch): send record batches only"
        )
    if body < 0 or body % 8:
        raise InvalidValueError(f"Write: an Arrow IPC message declares a body of {body} bytes")
    if compressed:
        raise InvalidValueError(
            "Write: compressed Arrow IPC bodies (LZ4 or ZSTD) are not accepted: write the "
            "stream without IpcWriteOptions(compression=...) (gRPC may compress the transport)"
        )
    return kind, body


def _compressed(flat: _Flat, kind: int, header: int) -> bool:
    if kind == DICTIONARY_BATCH:
        data = flat.table(header, _DICTIONARY_DATA)
        return data is not None and flat.field(data, _BATCH_COMPRESSION) is not None
    return kind == RECORD_BATCH and flat.field(header, _BATCH_COMPRESSION) is not None


class IpcFraming:
    """The messages of one IPC stream, as its chunks arrive: `feed` checks every message
    that became complete. `finish` checks that the stream was whole."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._checked = 0  # bytes of complete, checked messages
        self._messages = 0
        self._ended = False

    def feed(self, chunk: bytes) -> None:
        if self._ended and chunk:
            raise InvalidValueError("Write: bytes after the Arrow IPC end-of-stream marker")
        self.data += chunk
        while not self._ended:
            header = read_header(memoryview(self.data)[self._checked :])
            if header is None:
                return
            self._accept(header)
            self._checked += header.size

    def _accept(self, header: Header) -> None:
        if header.kind == 0:
            self._ended = True
            if self._checked + header.size != len(self.data):
                raise InvalidValueError("Write: bytes after the Arrow IPC end-of-stream marker")
            return
        first = self._messages == 0
        if first != (header.kind == SCHEMA):
            where = "first" if first else f"number {self._messages + 1}"
            raise InvalidValueError(
                f"Write: Arrow IPC message {where} is a {_KINDS[header.kind]}; a stream is "
                "one schema followed by record batches"
            )
        self._messages += 1

    def finish(self) -> bytearray:
        """The stream's bytes; InvalidValueError when it stops inside a message."""
        if self._checked != len(self.data):
            raise InvalidValueError(
                f"Write: the Arrow IPC stream ends inside a message ({len(self.data)} bytes "
                f"received, the last complete message ends at byte {self._checked})"
            )
        return self.data
