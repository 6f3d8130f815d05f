"""Full validation of a client's Arrow data (server/core/arrow_check.py): every column type a
table can take passes; other types, and buffers whose offsets or strings are damaged,
are refused with an error naming the column, before any value is read."""

from __future__ import annotations

import struct
from decimal import Decimal

import pyarrow as pa
import pytest

from sqltopic.errors import InvalidValueError, TooLarge
from sqltopic.server.core import arrow_check
from tests.support import ipc_stream

# A decoded-size bound no test data comes near.
LIMIT = 1 << 30

ACCEPTED = [
    pa.array([None, None], pa.null()),
    pa.array([True, None]),
    *(pa.array([1, None], t) for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())),
    *(pa.array([1, None], t) for t in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())),
    pa.array([1.5, None], pa.float32()),
    pa.array([1.5, None], pa.float64()),
    pa.array([Decimal("1.5"), None], pa.decimal128(5, 2)),
    pa.array([1, None], pa.timestamp("ns", tz="UTC")),
    pa.array([1, None], pa.date32()),
    pa.array(["a", None]),
    pa.array(["a", None], pa.large_string()),
    pa.array([b"a", None]),
    pa.array([b"ab", None], pa.binary(2)),
    pa.array(["a", "b", "a"]).dictionary_encode(),
]


@pytest.mark.parametrize("values", ACCEPTED, ids=lambda v: str(v.type))
def test_every_type_a_column_takes_passes(values: pa.Array) -> None:
    table = pa.table({"c": values})
    assert arrow_check.decode(ipc_stream(table), LIMIT).equals(table)


REFUSED = [
    pa.array([[1], None], pa.list_(pa.int32())),
    pa.array([{"x": 1}, None], pa.struct([("x", pa.int32())])),
    pa.array([1, None], pa.duration("s")),
    pa.array([1, None], pa.time32("s")),
    pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32())),
    pa.DictionaryArray.from_arrays(pa.array([0]), pa.array([[1]], pa.list_(pa.int8()))),
]


@pytest.mark.parametrize("values", REFUSED, ids=lambda v: str(v.type))
def test_other_types_are_refused_naming_the_column(values: pa.Array) -> None:
    with pytest.raises(InvalidValueError, match="column 'odd' has Arrow type"):
        arrow_check.decode(
            ipc_stream(pa.table({"ts": pa.array([1] * len(values)), "odd": values})), LIMIT
        )


def damaged(offsets: tuple[int, ...], data: bytes = b"abcdef") -> bytes:
    """A stream whose string column `name` has the given offsets over `data`."""
    good = ipc_stream(pa.table({"n": pa.array([1, 2, 3], pa.int32()), "name": ["ab", "cd", "ef"]}))
    at = good.find(struct.pack("<4i", 0, 2, 4, 6))
    body = good.find(b"abcdef")
    assert at > 0
    assert body > 0
    out = bytearray(good)
    out[at : at + 16] = struct.pack("<4i", *offsets)
    out[body : body + 6] = data
    return bytes(out)


@pytest.mark.parametrize(
    ("offsets", "data", "says"),
    [
        ((0, 2, 4, 1 << 30), b"abcdef", "column 'name' holds invalid Arrow data"),
        ((0, 2, 4, 1 << 30), b"abcdef", "out of bounds|larger than"),
        ((0, 4, 2, 6), b"abcdef", "column 'name' holds invalid Arrow data"),
        ((0, -5, 4, 6), b"abcdef", "column 'name'|invalid Arrow data"),
        ((0, 2, 4, 6), b"ab\xff\xfeef", "column 'name' holds invalid Arrow data.*UTF8|utf8"),
    ],
)
def test_damaged_offsets_and_strings_are_refused(
    offsets: tuple[int, ...], data: bytes, says: str
) -> None:
    with pytest.raises(InvalidValueError, match=says):
        arrow_check.decode(damaged(offsets, data), LIMIT)


def test_an_embedded_table_is_checked_too() -> None:
    batch = pa.ipc.open_stream(damaged((0, 4, 2, 6))).read_next_batch()
    with pytest.raises(InvalidValueError, match="column 'name'"):
        arrow_check.check_table(pa.Table.from_batches([batch]))
    arrow_check.check_table(pa.table({"ok": [1, 2]}))


def test_too_many_columns_are_refused() -> None:
    wide = pa.table({f"c{i}": [1] for i in range(arrow_check.MAX_WRITE_COLUMNS + 1)})
    with pytest.raises(InvalidValueError, match="columns; a write carries at most"):
        arrow_check.decode(ipc_stream(wide), LIMIT)


@pytest.mark.parametrize(
    ("column", "decoded"),
    [
        # one 60,000-byte string, indexed by 4,000 one-byte indices: 240 MB written out
        (pa.DictionaryArray.from_arrays(pa.array([0] * 4000, pa.int8()), ["x" * 60_000]), 240e6),
        (pa.nulls(4000, pa.null()), 4000 * 8),
        (pa.DictionaryArray.from_arrays(pa.array([0, 1] * 2000, pa.int8()), [1, 2]), 4000 * 8),
    ],
    ids=["dictionary strings", "nulls", "dictionary integers"],
)
def test_expanding_columns_count_as_written_out(column: pa.Array, decoded: float) -> None:
    batch = pa.record_batch({"c": column})
    assert arrow_check.decoded_bytes(batch) >= decoded
    data = ipc_stream(pa.Table.from_batches([batch]))
    assert len(data) < 100_000
    with pytest.raises(TooLarge, match="the rows decode to more than 1000 bytes"):
        arrow_check.decode(data, 1000)
    assert arrow_check.decode(data, int(decoded) * 2).num_rows == 4000
