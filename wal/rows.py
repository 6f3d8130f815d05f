"""Data rows per segment, for lag in rows: how many rows the records before each one
hold, kept as a running count.

The writer notes each data entry's row count as it appends (the caller knows it:
`WalEntry.rows`); a segment opened from disk, or an entry appended without a count,
has its counts taken from its records' Arrow metadata the first time they are asked
for, once. So "rows from version a to b" is two look-ups per segment, not a scan.
"""

from __future__ import annotations

import threading
from array import array
from typing import TYPE_CHECKING

from sqltopic.wal.codec import row_count
from sqltopic.wal.record import HEADER_SIZE, EntryType

if TYPE_CHECKING:
    from sqltopic.wal.segment import Segment


class RowCounts:
    """The data rows before each record of one segment: `before(i)` = rows in records
    0 .. i - 1. Thread-safe; the writer never waits for a reader counting."""

    __slots__ = ("_before", "_lock")

    def __init__(self) -> None:
        self._before = array("q", [0])  # _before[i]: rows in the first i records
        self._lock = threading.Lock()

    def noted(self, slot: int, rows: list[int | None]) -> None:
        """Records `slot`, `slot` + 1, ... were appended holding `rows` data rows (None:
        not known; counted from the record when asked)."""
        if not self._lock.acquire(blocking=False):
            return  # a reader is counting: it reaches these records itself
        try:
            before = self._before
            if len(before) != slot + 1:
                return  # an earlier record is not counted yet
            for n in rows:
                if n is None:
                    return
                before.append(before[-1] + n)
        finally:
            self._lock.release()

    def before(self, segment: Segment, slot: int) -> int:
        """Data rows in the segment's records before `slot` (at most its count)."""
        with self._lock:
            before = self._before
            while len(before) <= slot:
                before.append(before[-1] + _rows_of(segment, len(before) - 1))
            return before[slot]


def _rows_of(segment: Segment, slot: int) -> int:
    """The data rows of record `slot`, from its header and its Arrow metadata (0 for a
    meta or control record); the body's checksum is the readers' business."""
    header = segment.header_of(slot)  # (a damaged index is rebuilt first)
    if header.entry_type != EntryType.DATA:
        return 0
    start = segment.index.offsets[slot] + HEADER_SIZE
    return row_count(segment.view(segment.end_of(slot))[start : start + header.body_len])
