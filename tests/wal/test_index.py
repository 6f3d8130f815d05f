"""The segment index: O(1) lookup when contiguous, binary search across gaps."""

from __future__ import annotations

from sqltopic.wal.index import SegmentIndex


def _index(versions: list[int]) -> SegmentIndex:
    index = SegmentIndex()
    for i, v in enumerate(versions):
        index.add(v, i * 48)
    return index


def test_contiguous_lookup() -> None:
    index = _index(list(range(10, 20)))
    assert [index.position(v) for v in (5, 10, 15, 19, 20, 99)] == [0, 0, 5, 9, 10, 10]


def test_lookup_with_gaps_finds_first_version_at_or_above() -> None:
    index = _index([3, 4, 10, 11, 50])
    assert [index.position(v) for v in (3, 5, 10, 12, 50, 51)] == [0, 2, 2, 4, 4, 5]


def test_lookup_within_count() -> None:
    index = _index([1, 2, 3, 4])
    assert index.position(3, count=2) == 2
    assert index.position(1, count=0) == 0


def test_encode_decode_round_trip_and_plausibility() -> None:
    index = _index([5, 6, 9])
    data = index.encode()
    assert len(data) == 48
    back = SegmentIndex.decode(data)
    assert back is not None
    assert list(back.versions) == [5, 6, 9]
    assert list(back.offsets) == [0, 48, 96]
    assert back.plausible(5, 144)
    assert not back.plausible(4, 144)  # does not start at the segment's first version
    assert not back.plausible(5, 96)  # last offset beyond the log
    assert SegmentIndex.decode(data[:-1]) is None
    assert index.encode(start=2) == data[32:]


def test_truncate() -> None:
    index = _index([1, 2, 3])
    index.truncate(1)
    assert list(index.versions) == [1]
    assert list(index.offsets) == [0]
