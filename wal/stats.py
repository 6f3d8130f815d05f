"""What a WAL counts for monitoring: rows and bytes appended, and how long appends and
fsyncs take, kept as fixed-bucket histograms (a bisect and two additions per event, read
by the server's /metrics at scrape time: server/rpc/metrics.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Upper bounds (seconds) of the latency buckets: 50 µs (an append to the page cache) to
# 1 s (an fsync on a stalled disk); one more bucket holds what is slower.
BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0,
)  # fmt: skip


# Bounds (seconds) for how long a rebalance takes to settle for a consumer: from a
# vgroup at once to a holder letting go after its commit or its poll timeout.
SETTLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class Timings:
    """A latency histogram: `counts[i]` events at or below buckets[i] and above the one
    before (the last: above every bound), their `total` seconds."""

    buckets: tuple[float, ...] = BUCKETS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass
class WalStats:
    """A WAL's counts since it was opened. Updated under the writer's lock."""

    rows: int = 0  # data rows appended (of entries whose rows the caller gave)
    bytes: int = 0  # entry bodies appended
    appends: Timings = field(default_factory=Timings)  # each append call, fsync included
    fsyncs: Timings = field(default_factory=Timings)
