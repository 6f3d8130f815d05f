"""Data entry forms (sql/entries.py): a multi-table entry's runs come back as they were
written, zero-copy, through the WAL codec; a single-table entry is one run; a reader
may keep only some tables' runs; a form this version does not know is refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.sql.entries import (
    TABLES_KEY,
    EntryTable,
    entry_runs,
    entry_table,
    multi_batch,
    tag_batch,
)
from sqltopic.sql.layout import CIDS_KEY
from sqltopic.sql.model import Table
from sqltopic.wal.codec import decode_arrow_keyed, encode_arrow


def _data(n: int) -> pa.RecordBatch:
    batch = pa.record_batch(
        {"ts": pa.array(range(n), pa.timestamp("ms")), "v": pa.array([f"r{i}" for i in range(n)])}
    )
    return batch.replace_schema_metadata({CIDS_KEY: b"1,2"})


def _multi() -> pa.RecordBatch:
    """Runs d1 (2 rows), d2 (3 rows), d1 again (1 row), through the WAL codec."""
    batch = multi_batch(
        _data(6),
        "meters",
        pa.array(["d1", "d2", "d1"]),
        pa.array([11, 12, 11], pa.int64()),
        pa.array([2, 5, 6], pa.int32()),
    )
    decoded, _ = decode_arrow_keyed(encode_arrow(batch))
    return decoded


def test_a_multi_table_entry_gives_its_runs_in_order() -> None:
    runs = entry_runs(_multi())
    assert [owner for owner, _ in runs] == [
        EntryTable("d1", "meters", 11),
        EntryTable("d2", "meters", 12),
        EntryTable("d1", "meters", 11),
    ]
    assert [rows.column("v").to_pylist() for _, rows in runs] == [
        ["r0", "r1"],
        ["r2", "r3", "r4"],
        ["r5"],
    ]
    # the data columns only, with their ids: what `conform` matches by
    assert all(rows.schema.names == ["ts", "v"] for _, rows in runs)
    assert all(rows.schema.metadata[CIDS_KEY] == b"1,2" for _, rows in runs)


def test_runs_are_slices_of_the_entry_not_copies() -> None:
    entry = _multi()
    _, rows = entry_runs(entry)[1]
    assert rows.column("v").buffers()[2].address == entry.column("v").buffers()[2].address


def test_keep_skips_the_other_tables_runs() -> None:
    entry = _multi()
    assert [o.name for o, _ in entry_runs(entry, keep={"d1"})] == ["d1", "d1"]
    assert entry_runs(entry, keep={"nosuch"}) == []


def test_a_single_table_entry_is_one_run() -> None:
    table = Table("w", "d7", 2, 0, stable="meters", uid=77)
    single = tag_batch(_data(3), table)
    decoded, key = decode_arrow_keyed(encode_arrow(single))
    runs = entry_runs(decoded, key)
    assert [(o, r.num_rows) for o, r in runs] == [(EntryTable("d7", "meters", 77), 3)]
    assert entry_runs(decoded, key, keep={"other"}) == []


def test_an_old_reader_sees_no_table_in_a_multi_table_entry() -> None:
    # `entry_table` (the single-table form's reader) names no table: it matches none
    assert entry_table(_multi()) == EntryTable("", "meters", 0)


def test_an_unknown_form_is_refused() -> None:
    entry = _multi()
    meta = {**entry.schema.metadata, TABLES_KEY: b"runs/9"}
    with pytest.raises(ValueError, match=r"form b'runs/9'.*newer sqltopic"):
        entry_runs(entry.replace_schema_metadata(meta))


def test_run_ends_that_do_not_cover_the_rows_are_refused() -> None:
    with pytest.raises(pa.ArrowInvalid, match="run end"):
        multi_batch(
            _data(6), "meters", pa.array(["d1", "d2"]), pa.array([1, 2], pa.int64()),
            pa.array([2, 5], pa.int32()),
        )  # fmt: skip
