"""Reading: bounds, zero-copy bodies, retention errors, read-only snapshots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from sqltopic.errors import VersionNotRetained
from sqltopic.wal import data_entry, meta_entry, open_readonly
from tests.support import append_meters

if TYPE_CHECKING:
    from tests.conftest import FakeClock, WalFactory

Meters = Callable[..., pa.RecordBatch]


def test_batches_are_bounded_by_count_and_bytes(open_wal: WalFactory, meters: Meters) -> None:
    wal = open_wal()
    append_meters(wal, meters, 10, rows=100)
    reader = wal.reader()
    assert [r.version for r in reader.read(3, max_entries=4)] == [3, 4, 5, 6]
    three = sum(r.body.nbytes for r in reader.read(1, max_entries=3))
    assert len(reader.read(1, max_bytes=three)) == 3
    assert len(reader.read(1, max_bytes=three - 1)) == 2
    assert len(reader.read(1, max_bytes=1)) == 1  # always at least one entry
    assert [len(b) for b in reader.batches(1, max_entries=4)] == [4, 4, 2]


def test_reads_cross_segments(open_wal: WalFactory, meters: Meters) -> None:
    wal = open_wal(segment_size_kb=1)
    append_meters(wal, meters, 12)
    assert len(wal.state().segments) > 4
    reader = wal.reader()
    for start in range(1, 13):
        got = reader.read(start, max_entries=100)
        assert [r.version for r in got] == list(range(start, 13))


def test_bodies_are_zero_copy_views_of_the_mapped_file(
    open_wal: WalFactory, meters: Meters
) -> None:
    wal = open_wal()
    wal.append([data_entry(meters(1000))])
    wal.roll()
    record = wal.reader().read(1)[0]
    assert record.body.readonly
    body = pa.py_buffer(record.body)
    batch = record.arrow()
    values = batch.column("voltage").buffers()[1]
    assert body.address <= values.address < body.address + body.size


def test_reading_below_retention_names_the_retained_range(
    open_wal: WalFactory, clock: FakeClock
) -> None:
    wal = open_wal(retention_period_s=60, segment_size_kb=0)
    for i in range(3):
        wal.append([meta_entry({"i": i})])
        wal.roll()
    clock.advance(61)
    wal.append([meta_entry({"i": 3})])
    assert wal.maintain() == [1, 2, 3]
    assert wal.first_version == 4
    with pytest.raises(VersionNotRetained) as err:
        wal.reader().read(2)
    assert (err.value.requested, err.value.first_version, err.value.next_version) == (2, 4, 5)
    assert "versions 2..3 were deleted by retention; the WAL retains 4..4" in str(err.value)
    assert [r.version for r in wal.reader().read(4)] == [4]


def test_versions_below_a_fresh_wal_are_not_lost(open_wal: WalFactory) -> None:
    wal = open_wal()
    wal.append([meta_entry({})])
    assert [r.version for r in wal.reader().read(0)] == [1]


def test_readonly_snapshot_sees_durable_data(
    open_wal: WalFactory, wal_dir: Path, meters: Meters
) -> None:
    wal = open_wal(segment_size_kb=1)
    append_meters(wal, meters, 8)
    snapshot = open_readonly(wal_dir)  # no lock: a live writer keeps going
    wal.append([meta_entry({"later": True})])
    assert (snapshot.first_version, snapshot.last_version, snapshot.next_version) == (1, 8, 9)
    assert [r.version for r in snapshot.read(1, max_entries=100)] == list(range(1, 9))


def test_readonly_ignores_a_half_written_tail(
    open_wal: WalFactory, wal_dir: Path, meters: Meters
) -> None:
    wal = open_wal()
    wal.append([data_entry(meters(5)), data_entry(meters(5))])
    wal.close()
    log = wal_dir / "00000000000000000001.log"
    with log.open("ab") as f:
        f.write(b"\x89SQTWAL\x1a" + b"\x01" * 10)  # a writer caught mid-record
    snapshot = open_readonly(wal_dir)
    assert [r.version for r in snapshot.read(1)] == [1, 2]
    assert log.stat().st_size > 0  # and nothing was repaired on disk


def test_pending_bytes_span_the_records_up_to_the_readable_end(
    open_wal: WalFactory, meters: Meters
) -> None:
    wal = open_wal(segment_size_kb=1)
    append_meters(wal, meters, 12)
    reader = wal.reader()
    segments = wal.state().segments
    assert len(segments) > 2
    total = sum(s.size for s in segments)
    assert reader.pending_bytes(1) == total
    assert reader.pending_bytes(0) == total  # below the first version: all of it
    assert reader.pending_bytes(13) == 0  # caught up
    last = segments[-1]
    assert reader.pending_bytes(12) == last.size - last.index.offsets[-1]
    step = [reader.pending_bytes(v) for v in range(1, 14)]
    assert step == sorted(step, reverse=True)
    assert len(set(step)) == 13


def test_an_active_segment_read_while_it_grows_and_after_it_is_sealed(
    open_wal: WalFactory, meters: Meters
) -> None:
    """Each new record widens the reader's map of the active log; sealing closes the
    writer's descriptor, and later maps open the file themselves."""
    wal = open_wal()
    reader = wal.reader()
    for n in range(1, 6):
        wal.append([data_entry(meters(10 * n))])
        assert reader.read(n)[0].arrow().num_rows == 10 * n
    wal.roll()
    wal.append([data_entry(meters(7))])
    assert [r.arrow().num_rows for r in reader.read(1)] == [10, 20, 30, 40, 50, 7]
    sealed = wal.state().segments[0]
    sealed.release()  # drops the map: the next read maps the sealed log by its path
    assert [r.arrow().num_rows for r in reader.read(1)] == [10, 20, 30, 40, 50, 7]
