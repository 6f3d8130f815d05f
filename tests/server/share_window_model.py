"""A row-by-row model of server/vnode/share_window.py: the implementation before it kept
segments. The differential test runs both on the same operations.

The delivery state of one vgroup for one shared group: which rows are leased to which
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

This module is I/O-free and single-threaded: the vnode serialises calls on it, reads the
rows' entries, and keeps `durable()` beside the committed offsets (acknowledgements must
be durable before an Ack returns; leases need not be: after a restart every row not
acknowledged is delivered again).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqltopic.errors import ConfigError
from sqltopic.server.vnode.share_window import Durable, counted_runs, rows_of, runs_of

RowId = tuple[int, int]  # (WAL version, row index in the entry)
# The holder of rows out of deliveries while they are dead-lettered (consumer ids are
# positive, and 0 means available).
BURYING = -1

# Rows one vgroup's window tracks at most by default (leased or waiting for redelivery):
# a consumer holding leases it never acknowledges stops its group here, not the server.
DEFAULT_MAX_IN_FLIGHT = 10_000


@dataclass(slots=True)
class RowState:
    """A tracked row: delivered `deliveries` times; `holder` 0 when available."""

    deliveries: int
    holder: int = 0
    deadline: float = 0.0


@dataclass
class RowModel:
    """One vgroup's shared-group window. `start` and `end` are WAL versions."""

    start: int
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_deliveries: int | None = None  # None: unlimited
    end: int = -1  # -1: read from `start`
    rows: dict[RowId, RowState] = field(default_factory=dict)
    # acknowledged rows past `start` (a version stays here until all of its rows are done)
    acked: set[RowId] = field(default_factory=set)
    # versions in [start, end) with rows still tracked: version -> how many
    open: dict[int, int] = field(default_factory=dict)
    # the tracked rows no consumer holds, and the same (with stale ids) as a heap, so
    # that an acquire takes the oldest without sorting them all
    free: set[RowId] = field(default_factory=set)
    _heap: list[RowId] = field(default_factory=list)
    # after a restart: delivery counts of rows not read again yet
    delivered: dict[RowId, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = self.start
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight: {self.max_in_flight} must be at least 1")

    @property
    def in_flight(self) -> int:
        return len(self.rows)

    @property
    def room(self) -> int:
        """Rows that may still be admitted from the WAL."""
        return max(self.max_in_flight - len(self.rows), 0)

    def admit(
        self, ids: Iterable[RowId], next_end: int, consumer: int, deadline: float,
        max_leased: int | None = None,
    ) -> list[RowId]:  # fmt: skip
        """The topic's rows of the WAL read from `end` (their ids; the read stopped
        before `next_end`) leased to `consumer` until `deadline`, the first `max_leased`
        of them (None: all; the rest wait, never delivered, for the next acquire: one
        entry may hold more rows than a lease); the ids leased (rows acknowledged before
        a restart are skipped)."""
        if next_end < self.end:
            raise ValueError(f"admit: end {next_end} is before the window's end {self.end}")
        leased: list[RowId] = []
        waiting: list[RowId] = []
        for rid in ids:
            version = rid[0]
            if not self.end <= version < next_end:
                raise ValueError(f"admit: version {version} is outside [{self.end}, {next_end})")
            if rid in self.acked or rid in self.rows:
                continue
            self.open[version] = self.open.get(version, 0) + 1
            before = self.delivered.pop(rid, 0)
            if before:  # delivered before a restart: waits to be delivered again
                self.rows[rid] = RowState(before)
                waiting.append(rid)
            elif max_leased is None or len(leased) < max_leased:
                self.rows[rid] = RowState(1, consumer, deadline)
                leased.append(rid)
            else:
                self.rows[rid] = RowState(0)
                waiting.append(rid)
        self._free(waiting)
        self.end = next_end
        self.delivered = {rid: n for rid, n in self.delivered.items() if rid[0] >= next_end}
        self._advance()
        return leased

    def acquire(
        self, consumer: int, deadline: float, max_rows: int
    ) -> tuple[list[tuple[RowId, int]], list[tuple[RowId, int]]]:
        """Available rows leased to `consumer` (at most `max_rows`, oldest first), each
        with its delivery count raised; and the rows that ran out of deliveries instead,
        with their counts: held for the caller, which dead-letters them and then calls
        `bury` (or `unbury`, when that failed: they are taken again later)."""
        leased: list[tuple[RowId, int]] = []
        dead: list[tuple[RowId, int]] = []
        while self._heap and len(leased) < max_rows:
            rid = heapq.heappop(self._heap)
            if rid not in self.free:
                continue  # leased or done since it was freed
            state = self.rows[rid]
            self.free.discard(rid)
            if self.max_deliveries is not None and state.deliveries >= self.max_deliveries:
                dead.append((rid, state.deliveries))
                state.holder, state.deadline = BURYING, math.inf  # until `bury` or `unbury`
                continue
            state.deliveries += 1
            state.holder, state.deadline = consumer, deadline
            leased.append((rid, state.deliveries))
        self._advance()
        return leased, dead

    def ack(self, consumer: int, ids: Iterable[RowId]) -> list[RowId]:
        """Acknowledge rows leased to `consumer`; the ids acknowledged (a row no longer
        its own, its lease expired and taken by another, is left as it is)."""
        done = [rid for rid in ids if self._holds(consumer, rid)]
        for rid in done:
            self.acked.add(rid)
            self._done(rid)
        self._advance()
        return done

    def bury(self, ids: Iterable[RowId]) -> list[RowId]:
        """Rows out of deliveries, dead-lettered: done, as if acknowledged."""
        return self.ack(BURYING, ids)

    def unbury(self, ids: Iterable[RowId]) -> int:
        """Rows out of deliveries that could not be dead-lettered: taken again later."""
        return self._free([rid for rid in ids if self._holds(BURYING, rid)])

    def nack(self, consumer: int, ids: Iterable[RowId]) -> list[RowId]:
        """Make rows leased to `consumer` available again at once; the ids released."""
        released = [rid for rid in ids if self._holds(consumer, rid)]
        self._free(released)
        return released

    def release(self, consumer: int) -> int:
        """Every lease of `consumer` ends (it closed or was removed); how many."""
        mine = [r for r, s in self.rows.items() if s.holder == consumer]
        return self._free(mine)

    def expire(self, now: float) -> int:
        """Leases past their deadline end; how many."""
        late = [r for r, s in self.rows.items() if s.holder > 0 and s.deadline <= now]
        return self._free(late)

    def next_deadline(self) -> float | None:
        """When the first lease runs out, if any is held."""
        return min((s.deadline for s in self.rows.values() if s.holder > 0), default=None)

    def _free(self, ids: list[RowId]) -> int:
        for rid in ids:
            self.rows[rid].holder = 0
            if rid not in self.free:
                self.free.add(rid)
                heapq.heappush(self._heap, rid)
        return len(ids)

    def leased_to(self, consumer: int) -> list[RowId]:
        return sorted(r for r, s in self.rows.items() if s.holder == consumer)

    def durable(self) -> Durable:
        counted = [((v, i, i + 1), s.deliveries) for (v, i), s in self.rows.items() if s.deliveries]
        counted += [((v, i, i + 1), n) for (v, i), n in self.delivered.items()]
        return Durable(self.start, tuple(runs_of(self.acked)), tuple(counted_runs(counted)))

    @classmethod
    def restored(cls, saved: Durable, **settings: int | None) -> RowModel:
        """A window after a restart: read again from `start`; rows acknowledged before
        are skipped as they are read, every other row is delivered again."""
        window = cls(saved.start, **settings)  # type: ignore[arg-type]
        window.acked = {rid for rid in rows_of(saved.acked) if rid[0] >= saved.start}
        window.delivered = {
            rid: count
            for run, count in saved.counts
            for rid in rows_of([run])
            if rid[0] >= saved.start
        }
        return window

    def _holds(self, consumer: int, rid: RowId) -> bool:
        state = self.rows.get(rid)
        return state is not None and state.holder == consumer

    def _done(self, rid: RowId) -> None:
        del self.rows[rid]
        self.free.discard(rid)
        version = rid[0]
        left = self.open[version] - 1
        if left:
            self.open[version] = left
        else:
            del self.open[version]

    def _advance(self) -> None:
        """`start` moves to the oldest version with a tracked row (or `end`); the
        acknowledgements before it are no longer needed."""
        start = min(self.open, default=self.end)
        if start > self.start:
            self.start = start
            self.acked = {rid for rid in self.acked if rid[0] >= start}
