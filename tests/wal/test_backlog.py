"""What a reader has left (`WalReader.backlog`): data rows from a position to the end and
the first unread entry's ingest time, from counts the writer notes or that are taken
from the records once (after a reopen, or for entries appended without a count)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from sqltopic.wal import WalEntry, data_entry, meta_entry
from sqltopic.wal.codec import encode_arrow
from sqltopic.wal.record import EntryType

if TYPE_CHECKING:
    from sqltopic.wal import Wal
    from tests.conftest import FakeClock, WalFactory

Meters = Callable[..., pa.RecordBatch]
START = 1_700_000_000_000_000


def fill(wal: Wal, meters: Meters, clock: FakeClock) -> list[int]:
    """Versions 1..6 at seconds 0..5: data of 10, 20, 30 rows, a meta event, 40 rows
    appended without a count, 50 rows; a segment each. Each version's row count."""
    sizes = [10, 20, 30, 0, 40, 50]
    for second, rows in enumerate(sizes):
        clock.now_us = START + second * 1_000_000
        if second == 3:
            wal.append([meta_entry({"type": "create"})])
        elif second == 4:
            wal.append([WalEntry(EntryType.DATA, encode_arrow(meters(rows)))])
        else:
            wal.append([data_entry(meters(rows))])
        wal.roll()
    return sizes


def backlogs(wal: Wal) -> list[tuple[int, int | None]]:
    reader = wal.reader()
    return [
        (b.rows, b.first_ingest_us)
        for b in (reader.backlog(position) for position in range(0, wal.next_version + 2))
    ]


def expected(sizes: list[int]) -> list[tuple[int, int | None]]:
    out: list[tuple[int, int | None]] = []
    for position in range(0, len(sizes) + 3):
        start = max(position, 1)
        left = sum(sizes[start - 1 :])
        first = START + (start - 1) * 1_000_000 if start <= len(sizes) else None
        out.append((left, first))
    return out


def test_rows_and_first_ingest_time_from_each_position(
    open_wal: WalFactory, meters: Meters, clock: FakeClock
) -> None:
    wal = open_wal()
    sizes = fill(wal, meters, clock)
    assert backlogs(wal) == expected(sizes)
    assert wal.reader().backlog(wal.next_version).rows == 0  # caught up
    assert wal.reader().backlog(wal.next_version).first_ingest_us is None


def test_counts_are_taken_from_the_records_after_a_reopen(
    open_wal: WalFactory, meters: Meters, clock: FakeClock
) -> None:
    wal = open_wal()
    sizes = fill(wal, meters, clock)
    wal.close()
    wal = open_wal()
    assert backlogs(wal) == expected(sizes)
    wal.append([data_entry(meters(7))])  # the active segment counted lazily, then noted
    assert wal.reader().backlog(1).rows == sum(sizes) + 7
    assert wal.reader().backlog(wal.next_version - 1).rows == 7


def test_many_entries_in_one_segment(open_wal: WalFactory, meters: Meters) -> None:
    wal = open_wal()
    for i in range(200):
        wal.append([data_entry(meters(i % 5 + 1))])
    reader = wal.reader()
    total = sum(i % 5 + 1 for i in range(200))
    assert reader.backlog(1).rows == total
    assert reader.backlog(101).rows == sum(i % 5 + 1 for i in range(100, 200))
    assert len(wal.state().segments) == 1


def test_retention_leaves_only_retained_rows(
    open_wal: WalFactory, meters: Meters, clock: FakeClock
) -> None:
    wal = open_wal(retention_period_s=60)
    sizes = fill(wal, meters, clock)
    clock.now_us = START + 63_500_000  # sixty seconds after versions 1..3's segments
    wal.append([data_entry(meters(5))])
    assert wal.maintain()[:3] == [1, 2, 3]
    reader = wal.reader()
    first = wal.first_version
    left = sum(sizes[first - 1 :]) + 5
    assert (reader.backlog(1).rows, reader.backlog(first).rows) == (left, left)
    assert reader.backlog(1).first_ingest_us == START + (first - 1) * 1_000_000
