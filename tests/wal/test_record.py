"""Record header and padding: layout, checksums, rejection of damaged headers."""

from __future__ import annotations

import pytest

from sqltopic.wal.record import (
    HEADER_SIZE,
    MAGIC,
    EntryType,
    body_ok,
    checksum,
    decode_header,
    encode_header,
    padded_size,
    padding,
)


def _record(body: bytes, version: int = 7, etype: int = EntryType.META) -> bytes:
    return encode_header(version, 123, etype, len(body), checksum(body)) + body + padding(len(body))


def test_header_round_trip() -> None:
    rec = _record(b'{"a":1}', version=42)
    header = decode_header(rec, 0)
    assert header is not None
    assert (header.version, header.ingest_us, header.body_len, header.entry_type) == (42, 123, 7, 2)
    assert header.record_size == len(rec) == 56
    assert body_ok(memoryview(rec), 0, header)


def test_checksum_is_xxh3_64() -> None:
    # XXH3-64, seed 0, of the usual check string: readers in other languages verify theirs.
    assert checksum(b"123456789") == 0x72DCB18B67A17DFF
    assert HEADER_SIZE == 48


@pytest.mark.parametrize(("body_len", "size"), [(0, 48), (1, 56), (8, 56), (9, 64), (16, 64)])
def test_records_are_padded_to_eight_bytes(body_len: int, size: int) -> None:
    assert padded_size(body_len) == size
    assert HEADER_SIZE + body_len + len(padding(body_len)) == size


def test_every_header_byte_is_covered() -> None:
    rec = _record(b"payload!")
    for i in range(HEADER_SIZE):
        damaged = bytearray(rec)
        damaged[i] ^= 0x01
        header = decode_header(bytes(damaged), 0)
        # body_hash is covered by the header hash, so no header byte can change silently
        assert header is None, f"flip at header byte {i} went unnoticed"


def test_body_flip_detected() -> None:
    rec = bytearray(_record(b"payload!"))
    rec[HEADER_SIZE + 3] ^= 0x80
    header = decode_header(bytes(rec), 0)
    assert header is not None
    assert not body_ok(memoryview(bytes(rec)), 0, header)


def test_short_or_foreign_bytes_are_no_header() -> None:
    rec = _record(b"x")
    assert decode_header(rec[: HEADER_SIZE - 1], 0) is None
    assert decode_header(b"\0" * 64, 0) is None
    assert decode_header(MAGIC + b"\0" * 40, 0) is None


def test_unknown_entry_type_is_no_header() -> None:
    assert decode_header(_record(b"{}", etype=9), 0) is None


def test_truncated_body_is_not_ok() -> None:
    rec = _record(b"0123456789abcdef")
    header = decode_header(rec, 0)
    assert header is not None
    assert not body_ok(memoryview(rec[: HEADER_SIZE + 10]), 0, header)
