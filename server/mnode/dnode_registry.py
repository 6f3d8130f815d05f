"""The mnode's view of its dnodes' liveness: each admitted dnode is `ready` while its
heartbeats arrive and `offline` once none came for `DNODE_TIMEOUT_S`, with the time its
status last changed, the version ranges of its vgroups and the last catalog change it
applied, as it last reported them; and the catalog changes as they are logged, for the
heartbeats held until one comes and the DDL that waits until the dnodes applied it.

Nothing here is persisted: after an mnode restart every dnode is offline until its next
heartbeat (a second at most), which is what the dnode's state is until then anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

DnodeStatus = Literal["ready", "offline"]

# A dnode heartbeats every second; three missed beats (a stalled process, a lost host)
# make it offline. Short enough that clients learn of it within a few seconds, long
# enough that a garbage-collection pause or a busy machine does not flap its status.
DNODE_TIMEOUT_S = 3.0


@dataclass
class _Seen:
    last_beat: float  # monotonic seconds
    since_us: int  # when it last became ready
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    change: int = 0  # the last catalog change it applied
    sent_ms: int = 0  # the send time of its latest heartbeat taken


class DnodeRegistry:
    """Heartbeats in, statuses out. Thread-safe (the gRPC loop beats, SHOW reads)."""

    def __init__(
        self, clock_us: Callable[[], int], timeout_s: float = DNODE_TIMEOUT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._clock_us = clock_us
        self._timeout_s = timeout_s
        self._monotonic = monotonic
        self._seen: dict[int, _Seen] = {}
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)  # a dnode reported a change
        self._watchers: list[Callable[[], None]] = []
        self.last_change = 0

    def fresh(self, dnode: int, sent_ms: int) -> bool:
        """Whether a heartbeat sent at `sent_ms` is not older than the latest taken
        from `dnode`: an older one is a replay (or another process at its endpoint)."""
        with self._lock:
            seen = self._seen.get(dnode)
            return seen is None or sent_ms >= seen.sent_ms

    def beat(
        self, dnode: int, versions: Mapping[int, tuple[int, int]], change: int = 0,
        sent_ms: int = 0,
    ) -> None:  # fmt: skip
        """Dnode `dnode` is alive, hosting vgroups with these (first, last) versions,
        having applied catalog changes up to `change` (its heartbeat sent at `sent_ms`)."""
        now = self._monotonic()
        with self._lock:
            seen = self._seen.get(dnode)
            if seen is None or self._expired(seen, now):
                seen = self._seen[dnode] = _Seen(now, self._clock_us())
            seen.last_beat = now
            seen.versions = dict(versions)
            seen.change = change
            seen.sent_ms = max(seen.sent_ms, sent_ms)
            self._applied.notify_all()

    def changed(self, seq: int) -> None:
        """Catalog change `seq` was logged: wake whoever watches (held heartbeats)."""
        with self._lock:
            self.last_change = max(self.last_change, seq)
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher()

    def watch(self, watcher: Callable[[], None]) -> None:
        """Call `watcher` (from any thread) after each logged change."""
        with self._lock:
            self._watchers.append(watcher)

    def applied_by_all(self, dnodes: Iterable[int]) -> int | None:
        """The last catalog change every one of `dnodes` reported applied; None while
        one of them has not beaten since this mnode started (it may need any change)."""
        with self._lock:
            seen = [self._seen.get(d) for d in dnodes]
        if any(s is None for s in seen):
            return None
        return min((s.change for s in seen if s is not None), default=None)

    def wait_applied(self, seq: int, timeout_s: float) -> list[int]:
        """Wait until every ready dnode applied change `seq`, at most `timeout_s`; the
        ready dnodes that had not by then."""
        deadline = time.monotonic() + timeout_s  # real time: the wait is the caller's
        with self._lock:
            while True:
                now = self._monotonic()
                behind = [
                    dnode for dnode, seen in sorted(self._seen.items())
                    if not self._expired(seen, now) and seen.change < seq
                ]  # fmt: skip
                left = deadline - time.monotonic()
                if not behind or left <= 0:
                    return behind
                self._applied.wait(min(left, self._timeout_s))

    def forget(self, dnode: int) -> None:
        with self._lock:
            self._seen.pop(dnode, None)

    def status(self, dnode: int) -> tuple[DnodeStatus, int]:
        """`ready` or `offline`, and since when (µs since the epoch; 0: never seen)."""
        now = self._monotonic()
        with self._lock:
            seen = self._seen.get(dnode)
            if seen is None:
                return "offline", 0
            if self._expired(seen, now):
                gone_s = now - seen.last_beat - self._timeout_s
                return "offline", self._clock_us() - int(gone_s * 1_000_000)
            return "ready", seen.since_us

    def ready(self, dnode: int) -> bool:
        return self.status(dnode)[0] == "ready"

    def versions(self, dnode: int, vgroup: int) -> tuple[int, int] | None:
        """The (first, last) versions of `vgroup` as `dnode` last reported them."""
        with self._lock:
            seen = self._seen.get(dnode)
            return None if seen is None else seen.versions.get(vgroup)

    def _expired(self, seen: _Seen, now: float) -> bool:
        return now - seen.last_beat > self._timeout_s
