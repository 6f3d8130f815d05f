"""Row ids as runs (server/vnode/row_runs.py): table-driven cases, and against the row-by-row
`runs_of` on any input; the answer's id fields encoded from runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.vnode.row_runs import encode_ids, runs_of_lists
from sqltopic.server.vnode.share_window import runs_of

CASES = [
    # (versions, indexes, runs)
    ([], [], []),
    ([5] * 4, [0, 1, 2, 3], [(5, 0, 4)]),  # one whole entry: the fast path
    ([5] * 3, [2, 3, 4], [(5, 2, 5)]),  # a run inside an entry
    ([5, 5, 7, 7, 7], [0, 1, 0, 1, 2], [(5, 0, 2), (7, 0, 3)]),  # two entries
    ([5, 5, 5], [0, 2, 3], [(5, 0, 1), (5, 2, 4)]),  # a gap
    ([5, 5, 5, 5], [0, 1, 1, 2], [(5, 0, 3)]),  # a repeat
    ([7, 5, 5], [0, 1, 0], [(5, 0, 2), (7, 0, 1)]),  # out of order
    ([5, 5], [3, 2], [(5, 2, 4)]),  # one version, out of order
    ([-1, 5], [0, -4], [(-1, 0, 1), (5, -4, -3)]),  # hostile values: kept, match nothing
]


@pytest.mark.parametrize(("versions", "indexes", "runs"), CASES)
def test_ids_become_sorted_merged_runs(
    versions: list[int], indexes: list[int], runs: list[tuple[int, int, int]]
) -> None:
    assert runs_of_lists(versions, indexes) == runs


def test_the_two_lists_must_be_as_long() -> None:
    with pytest.raises(ValueError, match="2 versions but 1 indexes"):
        runs_of_lists([1, 2], [0])


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), max_size=60))
def test_runs_are_those_of_the_rows_one_by_one(ids: list[tuple[int, int]]) -> None:
    versions = [v for v, _ in ids]
    indexes = [i for _, i in ids]
    assert runs_of_lists(versions, indexes) == runs_of(ids)
    ordered = sorted(ids)  # the fast paths' input
    assert runs_of_lists([v for v, _ in ordered], [i for _, i in ordered]) == runs_of(ids)


VERSIONS = st.sampled_from([1, 127, 128, 16_384, 2**35, 2**62])
INDEXES = st.sampled_from([0, 1, 127, 128, 65_530, 65_536, 70_000])


@given(st.lists(st.tuples(VERSIONS, INDEXES, st.integers(1, 20), st.integers(1, 300)),
                max_size=6))  # fmt: skip
def test_encoded_ids_read_as_the_rows_one_by_one(
    runs: list[tuple[int, int, int, int]],
) -> None:
    """The answer's id fields written as bytes read back as the same message as one
    filled row by row (multi-byte varints, indexes past the prepared buffer)."""
    counted = [((v, lo, lo + n), count) for v, lo, n, count in runs]
    fast = pb.DataMessage()
    fast.MergeFromString(encode_ids(counted))
    slow = pb.DataMessage()
    for (v, lo, hi), count in counted:
        slow.row_versions.extend([v] * (hi - lo))
        slow.row_indexes.extend(range(lo, hi))
        slow.delivery_counts.extend([count] * (hi - lo))
    assert fast == slow
    assert encode_ids([]) == b""
