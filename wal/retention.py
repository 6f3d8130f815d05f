"""Which closed segments retention deletes, by age (WAL_RETENTION_PERIOD) and total size
(WAL_RETENTION_SIZE). A pure decision, so it can be tested with an injected clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqltopic.wal.options import WalOptions


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    size: int
    close_us: int | None  # None: the active segment, never deleted


def deletable_prefix(segments: Sequence[SegmentFacts], options: WalOptions, now_us: int) -> int:
    """How many of the oldest segments to delete (always a prefix of closed ones).

    A segment goes when either rule wants it, as in TDengine: it closed more than the
    retention period ago (0 = as soon as closed, -1 = never), or the WAL is above the
    size cap without it (0 = no cap). Deleting only a prefix keeps the retained versions
    one unbroken range.
    """
    closed = 0
    while closed < len(segments) and segments[closed].close_us is not None:
        closed += 1
    return max(_by_age(segments[:closed], options, now_us), _by_size(segments, closed, options))


def _by_age(closed: Sequence[SegmentFacts], options: WalOptions, now_us: int) -> int:
    period = options.retention_period_s
    if period < 0:
        return 0
    n = 0
    for seg in closed:
        assert seg.close_us is not None
        if seg.close_us + period * 1_000_000 > now_us:
            break
        n += 1
    return n


def _by_size(segments: Sequence[SegmentFacts], closed: int, options: WalOptions) -> int:
    cap = options.retention_size_bytes
    if cap <= 0:
        return 0
    total = sum(s.size for s in segments)
    n = 0
    while n < closed and total > cap:
        total -= segments[n].size
        n += 1
    return n
