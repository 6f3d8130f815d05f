"""The windows of one vnode's shared groups, and their acknowledgements made durable.

Each (subscription, group) that a shared group consumes on this vnode has one
`ShareWindow` (server/vnode/share_window.py), made on first use from what `offsets.sqlite`
holds (its start and the rows acknowledged past it) or, for a group new here, at the
version its `auto.offset.reset` gives. Leases live only in memory. An acknowledgement
returns once the window's state that holds it is on disk: acknowledgements of a window
arriving together share one save (the first caller saves the window as it is then, which
covers every acknowledgement made before; the others find theirs saved), and saves of
one window never overtake each other, so the file never goes back to an older state.

Thread-safe: polls, acknowledgements and the lease timer call in from several threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqltopic.server.vnode.offsets import OffsetStore
from sqltopic.server.vnode.share_window import (
    DEFAULT_MAX_IN_FLIGHT,
    Durable,
    KeyPieces,
    Run,
    ShareWindow,
    run_rows,
)
from sqltopic.sql.topic.params import topic_of

Key = tuple[str, str]  # (subscription, group)


@dataclass(frozen=True)
class ShareStats:
    """A window's figures for SHOW SUBSCRIPTIONS: rows in flight (leased or waiting to
    be delivered again) now, and since the server started, rows acknowledged, delivered
    again, and given up (dead-lettered, or dropped without a dead-letter table)."""

    in_flight: int
    acked: int
    redelivered: int
    dead_lettered: int


@dataclass
class _Entry:
    window: ShareWindow
    version: int = 0  # raised by every acknowledgement
    saved: int = 0  # the version on disk
    save_lock: threading.Lock = field(default_factory=threading.Lock)
    # held from reading the frontier to admitting what was read there: two polls
    # reading on at once would both read the same entries
    read_lock: threading.Lock = field(default_factory=threading.Lock)
    acked: int = 0
    redelivered: int = 0
    dead_lettered: int = 0
    # a save of acknowledgements that no caller waits for is due: later ones join it
    save_due: bool = False


class ShareWindows:
    """The shared groups' windows of one vnode."""

    def __init__(
        self, offsets: OffsetStore, clock_us: Callable[[], int],
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:  # fmt: skip
        self._offsets = offsets
        self._clock_us = clock_us
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()  # the windows and every window's state
        self._entries: dict[Key, _Entry] = {}

    def open(
        self, topic: str, group: str, start: Callable[[], int],
        max_deliveries: int | None = None,
    ) -> None:  # fmt: skip
        """Make sure (topic, group) has its window: as stored, or new at `start()` (a
        group with no committed state here); with the group's `max_deliveries` (a group
        emptied and joined again may have other settings)."""
        if self.reopen(topic, group, max_deliveries):
            return
        stored = self._offsets.share_state(topic, group)  # may read the file: no lock
        saved = Durable(*stored) if stored is not None else Durable(start(), ())
        window = ShareWindow.restored(
            saved, max_in_flight=self._max_in_flight, max_deliveries=max_deliveries
        )
        with self._lock:  # a concurrent first open may have won: keep its window
            self._entries.setdefault((topic, group), _Entry(window))

    def reading(self, topic: str, group: str) -> threading.Lock:
        """The lock to hold from `frontier` to `admit` (one reader of a window at a time)."""
        with self._lock:
            return self._entries[(topic, group)].read_lock

    def reopen(self, topic: str, group: str, max_deliveries: int | None) -> bool:
        """`open` of a window open already (no file read: on the event loop); False when
        it is not open yet."""
        with self._lock:
            entry = self._entries.get((topic, group))
            if entry is not None:
                entry.window.max_deliveries = max_deliveries
            return entry is not None

    def frontier(self, topic: str, group: str) -> tuple[int, int]:
        """Where the window reads the WAL next, and how many rows it may still admit."""
        with self._lock:
            window = self._window(topic, group)
            return window.end, window.room

    def admit(
        self, topic: str, group: str, runs: Iterable[Run], next_end: int, consumer: int,
        deadline: float, max_leased: int | None = None, keys: KeyPieces | None = None,
        eligible: Callable[[str], bool] | None = None,
    ) -> list[Run]:  # fmt: skip
        """`ShareWindow.admit`: rows read at the frontier leased to `consumer`."""
        with self._lock:
            window = self._window(topic, group)
            return window.admit(runs, next_end, consumer, deadline, max_leased, keys, eligible)

    def key_holders(self, topic: str, group: str) -> dict[str, set[int]]:
        with self._lock:
            return self._window(topic, group).key_holders()

    def acquire(
        self, topic: str, group: str, consumer: int, deadline: float, max_rows: int,
        eligible: Callable[[str], bool] | None = None, whole: bool = False,
    ) -> tuple[list[tuple[Run, int]], list[tuple[Run, int]]]:  # fmt: skip
        """`ShareWindow.acquire`: rows to deliver again leased to `consumer`, and rows
        out of deliveries, which the caller dead-letters, then `bury`s."""
        with self._lock:
            entry = self._entries[(topic, group)]
            window = entry.window
            leased, dead = window.acquire(consumer, deadline, max_rows, eligible, whole)
            entry.redelivered += run_rows(run for run, count in leased if count > 1)
            return leased, dead

    def bury(self, topic: str, group: str, runs: Iterable[Run]) -> list[Run]:
        """Rows out of deliveries are done (dead-lettered or dropped), on disk once this
        returns."""
        return self._settle(topic, group, lambda window: window.bury(runs), _tally_dead)

    def unbury(self, topic: str, group: str, runs: Iterable[Run]) -> int:
        with self._lock:
            return self._window(topic, group).unbury(runs)

    def nack(self, topic: str, group: str, consumer: int, runs: Iterable[Run]) -> list[Run]:
        with self._lock:
            entry = self._entries.get((topic, group))
            return entry.window.nack(consumer, runs) if entry is not None else []

    def release(self, consumer: int, topics: Iterable[str] | None = None) -> int:
        """Every lease of `consumer` ends, in every window (it closed or was removed) or
        in the windows of `topics` (it stopped reading them)."""
        wanted = None if topics is None else set(topics)
        with self._lock:
            return sum(
                e.window.release(consumer)
                for (topic, _), e in self._entries.items()
                if wanted is None or topic in wanted
            )

    def next_deadline(self) -> float | None:
        """When the first lease of any window runs out, if any is held."""
        with self._lock:
            times = [e.window.next_deadline() for e in self._entries.values()]
        return min((t for t in times if t is not None), default=None)

    def opened(self, topic: str, group: str) -> bool:
        with self._lock:
            return (topic, group) in self._entries

    def expire(self, now: float) -> int:
        """Leases past their deadline end, in every window."""
        with self._lock:
            return sum(e.window.expire(now) for e in self._entries.values())

    def leased_to(self, topic: str, group: str, consumer: int) -> list[Run]:
        with self._lock:
            return self._window(topic, group).leased_to(consumer)

    def ack(self, topic: str, group: str, consumer: int, runs: Iterable[Run]) -> list[Run]:
        """Acknowledge rows leased to `consumer`; returns the runs acknowledged, once
        they are on disk. Rows no longer its own are left out (their lease expired)."""
        return self._settle(topic, group, lambda window: window.ack(consumer, runs), _tally_acked)

    def stats(self) -> dict[Key, ShareStats]:
        """Every window's figures."""
        with self._lock:
            return {
                key: ShareStats(e.window.in_flight, e.acked, e.redelivered, e.dead_lettered)
                for key, e in self._entries.items()
            }

    def accept(
        self, topic: str, group: str, consumer: int, runs: Iterable[Run]
    ) -> Callable[[], None] | None:
        """`ack` without waiting for the disk (a poll's piggybacked acknowledgements):
        the rows are done now; the function returned saves them (call it on a worker),
        None when nothing changed or a save not begun yet will take these too (so that
        many polls cost one save, not a queue of them). Until a save, a crash may
        deliver them again."""
        with self._lock:
            marked = self._mark(topic, group, lambda w: w.ack(consumer, runs), _tally_acked)
            if marked is None or marked[0].save_due:
                return None
            entry = marked[0]
            entry.save_due = True

        def save() -> None:
            with self._lock:
                entry.save_due = False  # acknowledgements from now on need another
                wanted = entry.version
            self._save(topic, group, entry, wanted)

        return save

    def _settle(
        self, topic: str, group: str, settle: Callable[[ShareWindow], list[Run]],
        tally: Callable[[_Entry, int], None],
    ) -> list[Run]:  # fmt: skip
        """Rows done by `settle(window)`, saved before this returns."""
        with self._lock:
            marked = self._mark(topic, group, settle, tally)
            if marked is None:
                return []
            entry, done = marked
            wanted = entry.version
        self._save(topic, group, entry, wanted)
        return done

    def _mark(
        self, topic: str, group: str, settle: Callable[[ShareWindow], list[Run]],
        tally: Callable[[_Entry, int], None],
    ) -> tuple[_Entry, list[Run]] | None:  # fmt: skip
        """Under the lock: rows done by `settle(window)`, counted by `tally`, in a new
        version of the window to save; None when there is none."""
        entry = self._entries.get((topic, group))
        if entry is None:
            return None
        done = settle(entry.window)
        if not done:
            return None
        tally(entry, run_rows(done))
        entry.version += 1
        return entry, done

    def forget(self, topic: str | None = None, group: str | None = None) -> None:
        """Drop windows (of a dropped topic, its bindings' included, or of one group on
        it); their stored state goes with the offsets (`OffsetStore.forget`)."""
        with self._lock:
            gone = [
                k for k in self._entries
                if topic in (None, topic_of(k[0])) and group in (None, k[1])
            ]  # fmt: skip
            entries = [self._entries.pop(key) for key in gone]
        for entry in entries:  # a save under way ends first; later ones see it gone
            with entry.save_lock:
                pass

    def _window(self, topic: str, group: str) -> ShareWindow:
        return self._entries[(topic, group)].window

    def _save(self, topic: str, group: str, entry: _Entry, wanted: int) -> None:
        with entry.save_lock:
            with self._lock:
                if self._entries.get((topic, group)) is not entry:
                    return  # forgotten (its topic or group dropped): nothing to keep
                if entry.saved >= wanted:
                    return  # a save that began after our acknowledgement covered it
                state, version = entry.window.durable(), entry.version
            self._offsets.commit_share(
                topic, group, state.start, state.acked, self._clock_us(), state.counts
            )
            with self._lock:
                entry.saved = max(entry.saved, version)


def _tally_acked(entry: _Entry, rows: int) -> None:
    entry.acked += rows


def _tally_dead(entry: _Entry, rows: int) -> None:
    entry.dead_lettered += rows
