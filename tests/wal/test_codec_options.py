"""Entry bodies (Arrow IPC, JSON) and WAL option checks."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from sqltopic.errors import ConfigError
from sqltopic.wal import WalOptions, data_entry, meta_entry
from sqltopic.wal.codec import decode_arrow, decode_json, encode_arrow
from sqltopic.wal.record import EntryType


def test_arrow_body_round_trip(meters: Callable[..., pa.RecordBatch]) -> None:
    batch = meters(100)
    back = decode_arrow(encode_arrow(batch))
    assert back.equals(batch)
    assert back.schema == batch.schema


def test_chunked_table_becomes_one_batch(meters: Callable[..., pa.RecordBatch]) -> None:
    table = pa.Table.from_batches([meters(3), meters(4, start=3)])
    back = decode_arrow(encode_arrow(table))
    assert back.num_rows == 7
    assert back.column("voltage").to_pylist() == table.column("voltage").to_pylist()


def test_empty_table_keeps_its_schema(meters: Callable[..., pa.RecordBatch]) -> None:
    empty = pa.Table.from_batches([], schema=meters(1).schema)
    back = decode_arrow(encode_arrow(empty))
    assert back.num_rows == 0
    assert back.schema == empty.schema


def test_entry_constructors() -> None:
    entry = meta_entry({"type": "create", "table": "d1001"}, version=9)
    assert entry.entry_type is EntryType.META
    assert entry.version == 9
    assert decode_json(entry.body) == {"table": "d1001", "type": "create"}
    data = data_entry(pa.record_batch({"a": [1]}))
    assert data.entry_type is EntryType.DATA


def test_json_body_must_be_an_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        decode_json(b"[1, 2]")


def test_option_defaults_follow_tdengine() -> None:
    opts = WalOptions()
    assert (opts.level, opts.fsync_period_ms, opts.retention_period_s, opts.retention_size_kb) == (
        1,
        3000,
        3600,
        0,
    )
    assert opts.segment_size_bytes == 64 * 1024 * 1024
    assert WalOptions(retention_size_kb=-1).retention_size_bytes == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"level": 3}, "WAL_LEVEL = 3 is out of range; use 1..2"),
        ({"level": True}, "WAL_LEVEL must be an integer"),
        ({"fsync_period_ms": -1}, "WAL_FSYNC_PERIOD = -1 is out of range"),
        ({"fsync_period_ms": 180_001}, "WAL_FSYNC_PERIOD = 180001 is out of range"),
        ({"retention_period_s": -2}, "WAL_RETENTION_PERIOD = -2 is out of range"),
        ({"retention_size_kb": -2}, "WAL_RETENTION_SIZE = -2 is out of range"),
        ({"segment_size_kb": -1}, "WAL_SEGMENT_SIZE = -1 is out of range"),
        ({"roll_period_s": "10"}, "WAL_ROLL_PERIOD must be an integer, got '10'"),
    ],
)
def test_bad_options_name_the_option(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WalOptions(**changes)  # type: ignore[arg-type]


def test_replace_checks_again() -> None:
    assert WalOptions().replace(level=2).level == 2
    with pytest.raises(ConfigError, match="WAL_LEVEL"):
        WalOptions().replace(level=0)
