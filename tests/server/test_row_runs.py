"""Row ids as runs (server/row_runs.py): table-driven cases, and against the row-by-row
`runs_of` on any input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqltopic.server.row_runs import runs_of_lists
from sqltopic.server.share_window import runs_of

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
