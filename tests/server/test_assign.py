"""The balanced, sticky assignment of vgroups to consumers (server/mnode/assign.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqltopic.server.mnode.assign import assign

VGROUPS = [1, 2, 3, 4]


def _sizes(result: dict[int, int], members: list[int]) -> list[int]:
    counts = Counter(result.values())
    return sorted((counts.get(m, 0) for m in members), reverse=True)


@pytest.mark.parametrize(
    ("members", "sizes"),
    [
        ([10], [4]),
        ([10, 11], [2, 2]),
        ([10, 11, 12], [2, 1, 1]),
        ([10, 11, 12, 13], [1, 1, 1, 1]),
        ([10, 11, 12, 13, 14], [1, 1, 1, 1, 0]),
    ],
)
def test_consumers_joining_one_by_one_split_four_vgroups_evenly(
    members: list[int], sizes: list[int]
) -> None:
    current: dict[int, int] = {}
    for k in range(1, len(members) + 1):
        current = assign(VGROUPS, members[:k], current)
    assert _sizes(current, members) == sizes
    assert sorted(current) == VGROUPS


def test_vgroups_that_can_stay_do_not_move() -> None:
    two = assign(VGROUPS, [10, 11], {})
    three = assign(VGROUPS, [10, 11, 12], two)
    moved = [v for v in VGROUPS if two[v] != three[v]]
    assert len(moved) == 1
    assert three[moved[0]] == 12
    back = assign(VGROUPS, [10, 11], three)
    assert [v for v in VGROUPS if back[v] != three[v]] == moved


def test_no_members_no_assignment_and_order_does_not_matter() -> None:
    assert assign(VGROUPS, [], {1: 10}) == {}
    assert assign([4, 3, 2, 1], [11, 10], {}) == assign(VGROUPS, [10, 11], {})


@given(
    n=st.integers(0, 12),
    members=st.lists(st.integers(1, 20), unique=True, max_size=8),
    old=st.dictionaries(st.integers(1, 12), st.integers(1, 20)),
)
def test_every_vgroup_has_one_owner_and_shares_differ_by_at_most_one(
    n: int, members: list[int], old: dict[int, int]
) -> None:
    vgroups = list(range(1, n + 1))
    result = assign(vgroups, members, old)
    if not members:
        assert result == {}
        return
    assert sorted(result) == vgroups
    assert set(result.values()) <= set(members)
    sizes = _sizes(result, members)
    assert sizes[0] - sizes[-1] <= 1
    # a vgroup whose owner is still a member moves only if that owner is over its share
    for vgroup, owner in old.items():
        if vgroup in result and owner in members and result[vgroup] != owner:
            assert Counter(old[v] for v in vgroups if v in old)[owner] > sizes[-1]
