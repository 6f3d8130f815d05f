"""When each (subscription, group) last polled a vnode: SHOW SUBSCRIPTIONS' `last_poll`.

Kept in memory (a restart forgets it, as it forgets who is connected), one time per
pair, bounded: past POLL_TIMES_KEPT pairs the oldest times are dropped first.
"""

from __future__ import annotations

import threading

# Pairs one vnode remembers: far more (subscription, group) pairs than one vnode serves
# (1,000 topics x a few groups, or 10,000 parameter bindings), a few MiB at most.
POLL_TIMES_KEPT = 65_536


class PollTimes:
    """The last poll time (µs since the epoch) of each (subscription, group)."""

    def __init__(self, kept: int = POLL_TIMES_KEPT) -> None:
        self._kept = kept
        self._times: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def note(self, topic: str, group: str, now_us: int) -> None:
        key = (topic, group)
        with self._lock:
            times = self._times
            times.pop(key, None)  # re-inserted last: dict order is the order of polls
            times[key] = now_us
            if len(times) > self._kept:
                del times[next(iter(times))]

    def last(self, topic: str, group: str) -> int | None:
        with self._lock:
            return self._times.get((topic, group))
