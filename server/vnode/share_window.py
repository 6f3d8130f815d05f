"""The delivery state of one vgroup for one shared group: which rows are leased to which
consumer, which wait to be delivered again, and how far the group is done.

A shared group's consumers take rows of the same vgroup at once, so progress is not one
offset: it is a window over the WAL, as Kafka's share partitions keep it (KIP-932) and
Redis Streams' pending entries list. A row is named by its `RowId`: the version of its
WAL entry and its index among that entry's rows. Versions before `start` are done
(every row of them acknowledged or dead-lettered); rows of versions from `start` to
`end` are tracked one by one until they are; the WAL from `end` on is not read yet. A
tracked row is either leased (to one consumer, until a deadline, with the number of
times it was delivered) or available (to be delivered again: nacked, its lease expired,
or its consumer left). The window admits rows from the WAL only while it tracks fewer
than `max_in_flight` (a read may pass it by the rows of its last entry), so that a
consumer that never acknowledges stops the group reading on, not the server's memory.

Rows are kept, taken and given as *runs* (`Run`: consecutive rows of one entry), and
tracked as *segments*: runs in the same state (holder, deliveries, deadline), since
rows are read, leased and acknowledged in runs; an operation costs per run, not per
row (tests/server/test_share_window.py runs it against a row-by-row model).

This module is I/O-free and single-threaded: the vnode serialises calls on it, reads the
rows' entries, and keeps `durable()` beside the committed offsets (acknowledgements must
be durable before an Ack returns; leases need not be: after a restart every row not
acknowledged is delivered again).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from sqltopic.errors import ConfigError

T = TypeVar("T")
RowId = tuple[int, int]  # (WAL version, row index in the entry)
# Rows lo .. hi - 1 of the entry at a WAL version: (version, lo, hi), hi > lo.
Run = tuple[int, int, int]
# A run's rows cut where their key changes (key_shared): (lo, hi, key) pieces of a run.
KeyPieces = Callable[[int, int, int], Iterable[tuple[int, int, str]]]
# The holder of rows out of deliveries while they are dead-lettered (consumer ids are
# positive, and 0 means available).
BURYING = -1

# Rows one vgroup's window tracks at most by default (leased or waiting for redelivery):
# a consumer holding leases it never acknowledges stops its group here, not the server.
DEFAULT_MAX_IN_FLIGHT = 10_000


@dataclass(slots=True)
class Seg:
    """Rows `lo` .. `hi - 1` of one entry, in one state: delivered `deliveries` times;
    `holder` 0 when available (BURYING while dead-lettered)."""

    lo: int
    hi: int
    deliveries: int
    holder: int = 0
    deadline: float = 0.0
    key: str = ""  # a key_shared group's key of these rows (their table)


@dataclass(frozen=True)
class Durable:
    """What must survive a restart: the start, the rows acknowledged past it (as
    `runs_of` gives them: sorted, merged), and how often the rows not done yet were
    delivered (runs of one count, as `counted_runs` gives them), so that a restart
    neither resets a row's delivery count nor lets it pass max.deliveries."""

    start: int
    acked: tuple[Run, ...]
    counts: tuple[tuple[Run, int], ...] = ()


@dataclass
class ShareWindow:
    """One vgroup's shared-group window. `start` and `end` are WAL versions."""

    start: int
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_deliveries: int | None = None  # None: unlimited
    end: int = -1  # -1: read from `start`
    # version -> its tracked rows, as segments sorted by `lo` (a version with none is
    # not here: every version in [start, end) not here is done)
    segs: dict[int, list[Seg]] = field(default_factory=dict)
    # acknowledged rows past `start`, as (lo, hi) runs per version (a version stays
    # here until all of its rows are done)
    acked: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    tracked: int = 0  # rows in `segs`
    # after a restart: the delivery counts of rows not read again yet, per version, as
    # (lo, hi, count); a row read again with one is delivered again (count + 1)
    delivered: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    # where available segments start, oldest first; stale entries are skipped
    _heap: list[RowId] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = self.start
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight: {self.max_in_flight} must be at least 1")

    @property
    def in_flight(self) -> int:
        return self.tracked

    @property
    def room(self) -> int:
        """Rows that may still be admitted from the WAL."""
        return max(self.max_in_flight - self.tracked, 0)

    def admit(
        self, runs: Iterable[Run], next_end: int, consumer: int, deadline: float,
        max_leased: int | None = None, keys: KeyPieces | None = None,
        eligible: Callable[[str], bool] | None = None,
    ) -> list[Run]:  # fmt: skip
        """The topic's rows of the WAL read from `end` (as runs, in WAL order; the read
        stopped before `next_end`) leased to `consumer` until `deadline`, the first
        `max_leased` of them (None: all; the rest wait, never delivered, for the next
        acquire); the runs leased (rows acknowledged before a restart are skipped). A
        key_shared group gives each run's pieces by key (`keys`) and which keys
        `consumer` may take now (`eligible`)."""
        if next_end < self.end:
            raise ValueError(f"admit: end {next_end} is before the window's end {self.end}")
        leased: list[Run] = []
        count = 0
        for version, lo, hi in runs:
            if not self.end <= version < next_end:
                raise ValueError(f"admit: version {version} is outside [{self.end}, {next_end})")
            for a, b, key, before in self._history(version, self._pieces(version, lo, hi, keys)):
                if before:  # delivered before a restart: waits to be delivered again
                    self._add(version, Seg(a, b, before, key=key))
                    heapq.heappush(self._heap, (version, a))
                    continue
                room = b - a if max_leased is None else max(0, max_leased - count)
                take = min(b - a, room) if eligible is None or eligible(key) else 0
                if take:
                    self._add(version, Seg(a, a + take, 1, consumer, deadline, key))
                    leased.append((version, a, a + take))
                    count += take
                if take < b - a:
                    self._add(version, Seg(a + take, b, 0, key=key))
                    heapq.heappush(self._heap, (version, a + take))
        self.end = next_end
        for version in [v for v in self.delivered if v < next_end]:
            del self.delivered[version]  # read again (or gone with retention)
        self._advance()
        return leased

    def acquire(
        self, consumer: int, deadline: float, max_rows: int,
        eligible: Callable[[str], bool] | None = None, whole: bool = False,
    ) -> tuple[list[tuple[Run, int]], list[tuple[Run, int]]]:  # fmt: skip
        """Available rows leased to `consumer` (at most `max_rows`, oldest first; with
        `whole`, segments are not cut, so the last one may pass `max_rows`; in a
        key_shared group only rows of keys `eligible` for it), each with its delivery
        count raised; and the rows that ran out of deliveries instead, with their
        counts: held for the caller, which dead-letters them and then calls `bury` (or
        `unbury`, when that failed: they are taken again later)."""
        leased: list[tuple[Run, int]] = []
        dead: list[tuple[Run, int]] = []
        skipped: list[RowId] = []
        count = 0
        while self._heap and count < max_rows:
            version, lo = heapq.heappop(self._heap)
            seg = self._at(version, lo)
            if seg is None or seg.holder:
                continue  # leased, split or done since it was freed
            if self.max_deliveries is not None and seg.deliveries >= self.max_deliveries:
                seg.holder, seg.deadline = BURYING, math.inf  # until `bury` or `unbury`
                dead.append(((version, seg.lo, seg.hi), seg.deliveries))
                continue
            if eligible is not None and not eligible(seg.key):
                skipped.append((version, lo))  # another consumer's key: left for it
                continue
            take = seg.hi - seg.lo if whole else min(seg.hi - seg.lo, max_rows - count)
            if take < seg.hi - seg.lo:  # the rest stays available
                self._split(version, seg, seg.lo + take)
                heapq.heappush(self._heap, (version, seg.lo + take))
            seg.deliveries += 1
            seg.holder, seg.deadline = consumer, deadline
            leased.append(((version, seg.lo, seg.hi), seg.deliveries))
            count += seg.hi - seg.lo
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        self._advance()
        return leased, dead

    def key_holders(self) -> dict[str, set[int]]:
        """The consumers holding leased rows of each key."""
        holders: dict[str, set[int]] = {}
        for _, seg in self._all():
            if seg.holder > 0:
                holders.setdefault(seg.key, set()).add(seg.holder)
        return holders

    def ack(self, consumer: int, runs: Iterable[Run]) -> list[Run]:
        """Acknowledge rows leased to `consumer`; the runs acknowledged (a row no longer
        its own, its lease expired and taken by another, is left as it is)."""
        done = self._take(consumer, runs, remove=True)
        for version, lo, hi in done:
            _join(self.acked.setdefault(version, []), lo, hi)
        self._advance()
        return done

    def bury(self, runs: Iterable[Run]) -> list[Run]:
        """Rows out of deliveries, dead-lettered: done, as if acknowledged."""
        return self.ack(BURYING, runs)

    def unbury(self, runs: Iterable[Run]) -> int:
        """Rows out of deliveries that could not be dead-lettered: taken again later."""
        return run_rows(self._take(BURYING, runs, remove=False))

    def nack(self, consumer: int, runs: Iterable[Run]) -> list[Run]:
        """Make rows leased to `consumer` available again at once; the runs released."""
        return self._take(consumer, runs, remove=False)

    def release(self, consumer: int) -> int:
        """Every lease of `consumer` ends (it closed or was removed); how many."""
        return self._free_where(lambda seg: seg.holder == consumer)

    def expire(self, now: float) -> int:
        """Leases past their deadline end; how many."""
        return self._free_where(lambda seg: seg.holder > 0 and seg.deadline <= now)

    def next_deadline(self) -> float | None:
        """When the first lease runs out, if any is held."""
        return min((seg.deadline for _, seg in self._all() if seg.holder > 0), default=None)

    def leased_to(self, consumer: int) -> list[Run]:
        return runs_of(
            (version, i)
            for version, seg in self._all()
            if seg.holder == consumer
            for i in range(seg.lo, seg.hi)
        )

    def rows(self) -> dict[RowId, tuple[int, int]]:
        """Every tracked row: (deliveries, holder). For tests and inspection."""
        return {
            (version, i): (seg.deliveries, seg.holder)
            for version, seg in self._all()
            for i in range(seg.lo, seg.hi)
        }

    def durable(self) -> Durable:
        acked = _merged(
            (version, lo, hi) for version, runs in self.acked.items() for lo, hi in runs
        )
        counts = [((v, s.lo, s.hi), s.deliveries) for v, s in self._all() if s.deliveries]
        counts += [((v, lo, hi), n) for v, spans in self.delivered.items() for lo, hi, n in spans]
        return Durable(self.start, tuple(acked), tuple(counted_runs(counts)))

    @classmethod
    def restored(cls, saved: Durable, **settings: int | None) -> ShareWindow:
        """A window after a restart: read again from `start`; rows acknowledged before
        are skipped as they are read, every other row is delivered again."""
        window = cls(saved.start, **settings)  # type: ignore[arg-type]
        for version, lo, hi in saved.acked:
            if version >= saved.start:
                window.acked.setdefault(version, []).append((lo, hi))
        for (version, lo, hi), count in saved.counts:
            if version >= saved.start:
                window.delivered.setdefault(version, []).append((lo, hi, count))
        return window

    # --- segments ---------------------------------------------------------------------

    def _all(self) -> Iterator[tuple[int, Seg]]:
        for version, segs in self.segs.items():
            for seg in segs:
                yield version, seg

    def _pieces(
        self, version: int, lo: int, hi: int, keys: KeyPieces | None
    ) -> Iterator[tuple[int, int, str]]:
        """[lo, hi) without the rows acknowledged before a restart, as runs of one key."""
        for a, b in self._not_acked(version, lo, hi):
            if keys is None:
                yield a, b, ""
            else:
                yield from keys(version, a, b)

    def _history(
        self, version: int, pieces: Iterable[tuple[int, int, str]]
    ) -> Iterator[tuple[int, int, str, int]]:
        """`pieces` cut where their delivery count before a restart changes, with it (0
        for rows never delivered)."""
        spans = self.delivered.get(version, ())
        for a, b, key in pieces:
            for x, y, count in cut(a, b, spans):
                yield x, y, key, count or 0

    def _not_acked(self, version: int, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """[lo, hi) without the rows acknowledged before a restart, as runs."""
        acked = [(x, y, True) for x, y in self.acked.get(version, ())]
        return ((a, b) for a, b, done in cut(lo, hi, acked) if done is None)

    def _add(self, version: int, seg: Seg) -> None:
        segs = self.segs.setdefault(version, [])
        at = bisect.bisect_left([s.lo for s in segs], seg.lo) if segs else 0
        segs.insert(at, seg)
        self.tracked += seg.hi - seg.lo

    def _at(self, version: int, lo: int) -> Seg | None:
        """The segment of `version` starting at `lo`, if there is one."""
        segs = self.segs.get(version)
        if not segs:
            return None
        at = bisect.bisect_left([s.lo for s in segs], lo)
        return segs[at] if at < len(segs) and segs[at].lo == lo else None

    def _split(self, version: int, seg: Seg, at: int) -> Seg:
        """Cut `seg` at row `at`; the second part (same state) is returned."""
        rest = Seg(at, seg.hi, seg.deliveries, seg.holder, seg.deadline, seg.key)
        seg.hi = at
        segs = self.segs[version]
        segs.insert(segs.index(seg) + 1, rest)
        return rest

    def _take(self, holder: int, runs: Iterable[Run], remove: bool) -> list[Run]:
        """The rows of `runs` that `holder` holds: done (`remove`) or available again;
        as runs, in the order of `runs` (which overlap nowhere: `runs_of` gives them)."""
        taken: list[Run] = []
        for version, lo, hi in runs:
            for found in list(self.segs.get(version, ())):
                if found.holder != holder or found.hi <= lo or found.lo >= hi:
                    continue
                seg = self._split(version, found, lo) if found.lo < lo else found
                if seg.hi > hi:
                    self._split(version, seg, hi)
                taken.append((version, seg.lo, seg.hi))
                if remove:
                    self._drop(version, seg)
                else:
                    seg.holder, seg.deadline = 0, 0.0
                    heapq.heappush(self._heap, (version, seg.lo))
        return taken

    def _free_where(self, chosen: Callable[[Seg], bool]) -> int:
        freed = 0
        for version, seg in list(self._all()):
            if chosen(seg):
                seg.holder, seg.deadline = 0, 0.0
                heapq.heappush(self._heap, (version, seg.lo))
                freed += seg.hi - seg.lo
        return freed

    def _drop(self, version: int, seg: Seg) -> None:
        segs = self.segs[version]
        segs.remove(seg)
        self.tracked -= seg.hi - seg.lo
        if not segs:
            del self.segs[version]

    def _advance(self) -> None:
        """`start` moves to the oldest version with a tracked row (or `end`); the
        acknowledgements before it are no longer needed."""
        start = min(self.segs, default=self.end)
        if start > self.start:
            self.start = start
            for version in [v for v in self.acked if v < start]:
                del self.acked[version]


def runs_of(ids: Iterable[RowId]) -> list[Run]:
    """`ids` as runs of consecutive rows, sorted and without repeats."""
    ordered = sorted(set(ids))
    out: list[Run] = []
    i = 0
    while i < len(ordered):
        version, lo = ordered[i]
        hi = lo + 1
        i += 1
        while i < len(ordered) and ordered[i] == (version, hi):
            hi += 1
            i += 1
        out.append((version, lo, hi))
    return out


def _join(spans: list[tuple[int, int]], lo: int, hi: int) -> None:
    """Insert [lo, hi) into sorted, disjoint `spans`, joined with the spans it touches
    (rows acknowledged one by one stay one span, not a span per row)."""
    at = bisect.bisect_left(spans, (lo, hi))
    if at > 0 and spans[at - 1][1] >= lo:
        at -= 1
        lo = min(lo, spans[at][0])
    end = at
    while end < len(spans) and spans[end][0] <= hi:
        hi = max(hi, spans[end][1])
        end += 1
    spans[at:end] = [(lo, hi)]


def rows_of(runs: Iterable[Run]) -> list[RowId]:
    """The row ids of `runs`, in their order."""
    return [(version, i) for version, lo, hi in runs for i in range(lo, hi)]


def run_rows(runs: Iterable[Run]) -> int:
    """How many rows `runs` hold."""
    return sum(hi - lo for _, lo, hi in runs)


def counted_runs(counts: Iterable[tuple[Run, int]]) -> list[tuple[Run, int]]:
    """Runs with a count each (overlapping nowhere) sorted, with adjacent runs of one
    version and one count joined: one form for one set of counted rows."""
    out: list[tuple[Run, int]] = []
    for (version, lo, hi), count in sorted(counts):
        if out:
            (v, a, b), n = out[-1]
            if v == version and b == lo and n == count:
                out[-1] = ((v, a, hi), n)
                continue
        out.append(((version, lo, hi), count))
    return out


def _merged(runs: Iterable[Run]) -> list[Run]:
    """`runs` (overlapping nowhere) sorted, with adjacent ones of a version joined."""
    return [run for run, _ in counted_runs((run, 0) for run in runs)]


def cut(
    lo: int, hi: int, spans: Iterable[tuple[int, int, T]]
) -> Iterator[tuple[int, int, T | None]]:
    """[lo, hi) in pieces at the edges of `spans` ((a, b, value): rows a .. b - 1; they
    overlap nowhere), in order: each piece with the value of the span that covers it,
    None where none does."""
    at = lo
    for a, b, value in sorted(spans, key=lambda span: span[0]):
        if b <= at or a >= hi:
            continue
        if at < a:
            yield at, a, None
        at, end = max(a, at), min(b, hi)
        yield at, end, value
        at = end
    if at < hi:
        yield at, hi, None
