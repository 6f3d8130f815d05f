"""sqltopic/proto/arrow_ipc.py: a table's stream is the bytes Arrow's stream writer writes
(small tables are put together from a kept schema message and their batches' messages),
for every kind of column and shape of table (table-driven), and reads back whole."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pytest

from sqltopic.proto import arrow_ipc
from sqltopic.proto.arrow_ipc import SCHEMAS_KEPT, SMALL_TABLE_ROWS, chunks, from_ipc, to_ipc


def _written(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    written: bytes = sink.getvalue().to_pybytes()
    return written


def _meters(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array(range(start, start + n), pa.timestamp("us")),
            "current": pa.array([i * 0.5 for i in range(n)], pa.float32()),
            "voltage": pa.array([i if i % 7 else None for i in range(n)], pa.int32()),
            "tbname": pa.array([f"d{i % 13}" for i in range(n)], pa.string()),
        }
    )


TABLES: dict[str, Callable[[], pa.Table]] = {
    "rows": lambda: _meters(100),
    "one row": lambda: _meters(1),
    "no rows": lambda: _meters(0),
    "no batches": lambda: _meters(3).slice(0, 0).combine_chunks().slice(0, 0),
    "a slice": lambda: _meters(100).slice(37, 21),
    "chunks": lambda: pa.concat_tables([_meters(5), _meters(0), _meters(9, 50).slice(2)]),
    "empty chunks only": lambda: pa.concat_tables([_meters(0), _meters(0)]),
    "schema metadata": lambda: _meters(4).replace_schema_metadata({"sqltopic": "x"}),
    "field metadata": lambda: pa.table(
        {"a": pa.array([1, 2])}, schema=pa.schema([pa.field("a", pa.int64(), metadata={"k": "v"})])
    ),
    "every scalar kind": lambda: pa.table(
        {
            "b": pa.array([True, None, False]),
            "i8": pa.array([1, -2, None], pa.int8()),
            "u64": pa.array([2**64 - 1, 0, None], pa.uint64()),
            "f64": pa.array([-0.0, float("inf"), None]),
            "s": pa.array(["", "ü", None]),
            "bin": pa.array([b"\x00", b"", None]),
            "ts_ns": pa.array([0, -1, None], pa.timestamp("ns")),
            "dec": pa.array([Decimal("1.50"), None, Decimal("-0.01")], pa.decimal128(6, 2)),
        }
    ),
    "nested": lambda: pa.table(
        {
            "l": pa.array([[1, 2], None, []], pa.list_(pa.int32())),
            "st": pa.array([{"x": 1}, None, {"x": None}]),
        }
    ),
    "dictionary": lambda: pa.table({"d": pa.array(["a", "b", "a"]).dictionary_encode()}),
    "dictionary in a list": lambda: pa.table(
        {"l": pa.array([["a"], ["b", "a"]], pa.list_(pa.dictionary(pa.int8(), pa.string())))}
    ),
    "large": lambda: _meters(SMALL_TABLE_ROWS + 1),
    "large slice": lambda: _meters(3 * SMALL_TABLE_ROWS).slice(5, 2 * SMALL_TABLE_ROWS),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_a_stream_is_the_stream_writer_s_bytes(name: str) -> None:
    table = TABLES[name]()
    for _ in range(2):  # the first time its schema is new, the second time kept
        stream = to_ipc(table)
        assert isinstance(stream, pa.Buffer)
        assert stream.to_pybytes() == _written(table)
        assert from_ipc(chunks(stream, 100)).equals(table)


def test_schemas_kept_are_bounded_and_tell_metadata_apart() -> None:
    tables = [_meters(2).replace_schema_metadata({"n": str(n)}) for n in range(3 * SCHEMAS_KEPT)]
    for table in tables + tables[::-1]:
        assert to_ipc(table).to_pybytes() == _written(table)
        assert len(arrow_ipc._heads) <= SCHEMAS_KEPT
