"""Which segments retention deletes, decided with an injected clock."""

from __future__ import annotations

from sqltopic.wal import WalOptions
from sqltopic.wal.retention import SegmentFacts, deletable_prefix

S = 1_000_000  # microseconds per second


def _segs(*close_s: int | None, size: int = 100) -> list[SegmentFacts]:
    return [SegmentFacts(size, None if c is None else c * S) for c in close_s]


def test_by_period_deletes_only_expired_prefix() -> None:
    opts = WalOptions(retention_period_s=60)
    segs = _segs(0, 10, 100, None)
    assert deletable_prefix(segs, opts, now_us=59 * S) == 0
    assert deletable_prefix(segs, opts, now_us=60 * S) == 1
    assert deletable_prefix(segs, opts, now_us=75 * S) == 2
    assert deletable_prefix(segs, opts, now_us=10_000 * S) == 3  # never the active one


def test_period_minus_one_keeps_forever_and_zero_deletes_closed() -> None:
    segs = _segs(0, 1, None)
    assert deletable_prefix(segs, WalOptions(retention_period_s=-1), now_us=10**9 * S) == 0
    assert deletable_prefix(segs, WalOptions(retention_period_s=0), now_us=1 * S) == 2


def test_by_size_deletes_oldest_until_under_cap() -> None:
    opts = WalOptions(retention_period_s=-1, retention_size_kb=3)  # 3072 bytes
    segs = _segs(1, 2, 3, None, size=1024)  # 4096 bytes in all
    assert deletable_prefix(segs, opts, now_us=0) == 1
    big = _segs(1, 2, None, size=4096)
    assert deletable_prefix(big, opts, now_us=0) == 2  # the active segment alone stays


def test_either_rule_suffices() -> None:
    opts = WalOptions(retention_period_s=60, retention_size_kb=2)
    segs = _segs(0, 100, None, size=1024)  # 3072 bytes
    assert deletable_prefix(segs, opts, now_us=61 * S) == 1


def test_a_younger_segment_stops_the_period_rule() -> None:
    # Only a prefix goes, so retained versions stay one unbroken range.
    opts = WalOptions(retention_period_s=60)
    segs = _segs(100, 0, None)
    assert deletable_prefix(segs, opts, now_us=120 * S) == 0
