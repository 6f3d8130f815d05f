"""Reading a WAL by version: bounded batches of verified records, zero-copy bodies.

A reader sees a `WalState` snapshot: the segments and the bound below which versions
are readable. Bodies are views into memory-mapped segment files; an Arrow data body
decodes without copying its buffers.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa

from sqltopic.errors import VersionNotRetained, WalCorruptionError
from sqltopic.wal.codec import decode_arrow_keyed, decode_json
from sqltopic.wal.notify import VersionNotifier
from sqltopic.wal.record import EntryType
from sqltopic.wal.segment import Segment

# One poll's worth: enough entries that a DuckDB query over them amortises its ~1 ms
# cost, few enough bytes that a batch stays well inside a gRPC message.
DEFAULT_MAX_ENTRIES = 4096
DEFAULT_MAX_BYTES = 16 << 20
# Snapshots a read looks at before it lets retention's FileNotFoundError out: a segment
# deleted under one read is rare, under four in a row would mean a broken directory.
STALE_LOOKS = 4

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WalState:
    """What readers may see: immutable, replaced whole by the writer."""

    segments: tuple[Segment, ...]
    next_version: int  # versions below this that exist are readable
    last_version: int  # the last readable version; first_version - 1 when none
    removed_below: int  # retention deleted every version below this

    @property
    def first_version(self) -> int:
        """The first retained version, or next_version when the WAL holds none."""
        for seg in self.segments:
            if len(seg.index):
                return min(seg.first_version, self.next_version)
        return self.next_version


@dataclass(frozen=True, slots=True)
class Backlog:
    """What a reader has left: data rows, and the ingest time (µs) of the first entry
    it has not read (None when it read everything readable)."""

    rows: int
    first_ingest_us: int | None


class WalRecord(NamedTuple):
    """One entry as read back. `body` is a read-only view into the mapped segment;
    `segment` and `slot` say where it lies, for an error about it. (A named tuple: one
    is made per entry read, and that is the hot path of every poll.)"""

    version: int
    entry_type: EntryType
    ingest_us: int
    body: memoryview
    segment: Segment | None = None
    slot: int = 0  # the entry's place in its segment's index

    def arrow(self) -> pa.RecordBatch:
        """The record batch of a data entry, sharing memory with the WAL file;
        WalCorruptionError when the body is not a valid Arrow batch."""
        return self.arrow_keyed()[0]

    def arrow_keyed(self) -> tuple[pa.RecordBatch, bytes]:
        """The record batch and its schema's bytes (see `codec.decode_arrow_keyed`)."""
        try:
            return decode_arrow_keyed(self.body)
        except (pa.ArrowException, ValueError) as exc:
            raise self._damaged("Arrow data", exc) from None

    def json(self) -> dict[str, Any]:
        """The JSON object of a meta or control entry."""
        try:
            return decode_json(self.body)
        except ValueError as exc:  # json's errors, and UnicodeDecodeError, are ValueErrors
            raise self._damaged("JSON", exc) from None

    def _damaged(self, what: str, exc: Exception) -> WalCorruptionError:
        """The error for a body that passed its checksum but does not decode: written so
        by an older version, or damaged in a way the checksum missed."""
        seg = self.segment
        path = str(seg.log_path) if seg is not None else "?"
        offset = seg.index.offsets[self.slot] if seg is not None else -1
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return WalCorruptionError(
            f"the body of WAL entry {self.version} is not valid {what} ({first}); the "
            "entry cannot be read: see docs/operations.md on WAL damage",
            path=path,
            offset=offset,
        )


_ENTRY_TYPES = {int(t): t for t in EntryType}  # a dict lookup beats EntryType(n)


class WalReader:
    """Reads a WAL from any version. Cheap: make one per consumer or thread."""

    def __init__(self, state: Callable[[], WalState], notifier: VersionNotifier) -> None:
        self._state = state
        self._notifier = notifier

    @property
    def first_version(self) -> int:
        return self._state().first_version

    @property
    def last_version(self) -> int:
        return self._state().last_version

    @property
    def next_version(self) -> int:
        return self._state().next_version

    def read(
        self,
        from_version: int,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[WalRecord]:
        """Entries from the first version >= `from_version`, at most `max_entries` of them
        and, but for the first, at most `max_bytes` of bodies. Empty when caught up.

        Raises `VersionNotRetained` when retention deleted versions at `from_version`.
        """
        return self._fresh(lambda st: self._read(st, from_version, max_entries, max_bytes))

    def batches(
        self,
        from_version: int,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> Iterator[list[WalRecord]]:
        """Successive batches from `from_version` until the readable end."""
        while batch := self.read(from_version, max_entries=max_entries, max_bytes=max_bytes):
            yield batch
            from_version = batch[-1].version + 1

    def pending_bytes(self, from_version: int) -> int:
        """Bytes of the records from `from_version` to the readable end, headers and
        padding included (an upper bound of what reading them touches)."""
        st = self._state()
        total = 0
        for seg in st.segments:
            if seg.first_version > st.next_version:
                break
            count = seg.index.position(st.next_version)
            i = seg.index.position(from_version, count)
            if i < count:
                total += seg.end_of(count - 1) - seg.index.offsets[i]
        return total

    def version_at(self, time_us: int) -> int:
        """The first readable version whose entry was ingested at or after `time_us`
        (µs since the epoch; Kafka's offsetsForTimes), or next_version when none was.
        A time before the first retained entry gives that entry. Reads O(log n) record
        headers, never a body: ingest times never fall from one version to the next
        (the writer keeps them so), so both the segment and the entry are found by
        bisection."""
        return self._fresh(lambda st: _version_at(st, time_us))

    def backlog(self, position: int) -> Backlog:
        """What a reader at `position` has not read: the data rows from there to the
        readable end (of retained entries: those retention deleted are not counted),
        and the ingest time of the first entry there (None when caught up). Two row
        look-ups and one record header per segment, no scan."""
        return self._fresh(lambda st: _backlog(st, position))

    def _fresh(self, look: Callable[[WalState], T]) -> T:
        """`look` at the current snapshot, at a newer one when retention deleted one
        of its segments meanwhile (FileNotFoundError), at most STALE_LOOKS times."""
        for _ in range(STALE_LOOKS - 1):
            try:
                return look(self._state())
            except FileNotFoundError:
                continue  # retention deleted a segment under us: look again
        return look(self._state())

    def state(self) -> WalState:
        """The snapshot this reader would read now."""
        return self._state()

    def wait_for(self, version: int, timeout: float | None) -> bool:
        """Block until `version` (or a later one) is readable; False on timeout."""
        return self._notifier.wait_for(version, timeout)

    def _read(
        self, st: WalState, from_version: int, max_entries: int, max_bytes: int
    ) -> list[WalRecord]:
        first = st.first_version
        if from_version < first:
            if from_version < st.removed_below:
                raise VersionNotRetained(from_version, first, st.next_version)
            from_version = first
        out: list[WalRecord] = []
        if max_entries <= 0:
            return out
        budget = max_bytes
        firsts = [s.first_version for s in st.segments]
        start = max(bisect.bisect_right(firsts, from_version) - 1, 0)
        for seg in st.segments[start:]:
            count = seg.index.position(st.next_version)
            i = seg.index.position(from_version, count)
            while i < count:
                header, body = seg.record(i, seg.end_of(i))
                if out and header.body_len > budget:
                    return out
                kind = _ENTRY_TYPES[header.entry_type]
                out.append(WalRecord(header.version, kind, header.ingest_us, body, seg, i))
                budget -= header.body_len
                if len(out) >= max_entries:
                    return out
                i += 1
        return out


def _version_at(st: WalState, time_us: int) -> int:
    """`WalReader.version_at` over one snapshot."""
    counts = [seg.index.position(st.next_version) for seg in st.segments]
    held = [(seg, n) for seg, n in zip(st.segments, counts, strict=True) if n]
    # the first segment whose last readable entry was ingested at or after the time
    at = bisect.bisect_left(held, time_us, key=lambda sn: sn[0].ingest_of(sn[1] - 1))
    if at == len(held):
        return st.next_version
    seg, count = held[at]
    i = bisect.bisect_left(range(count), time_us, key=seg.ingest_of)
    return seg.index.versions[i]


def _backlog(st: WalState, position: int) -> Backlog:
    """`WalReader.backlog` over one snapshot."""
    rows = 0
    first: int | None = None
    for seg in st.segments:
        count = seg.index.position(st.next_version)
        start = seg.index.position(position, count)
        if start >= count:
            continue
        if first is None:
            first = seg.ingest_of(start)
        rows += seg.rows.before(seg, count) - seg.rows.before(seg, start)
    return Backlog(rows, first)
