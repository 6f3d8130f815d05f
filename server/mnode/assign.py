"""Balanced, sticky assignment of one topic's vgroups to the consumers of one group.

n vgroups over k consumers: each gets ⌊n/k⌋ or ⌈n/k⌉ (consumers beyond n get none), and
every vgroup stays with its current owner when that owner is still a member and within
its share. Deterministic: the same input gives the same output, whatever the order of
the dictionaries it comes in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def assign(
    vgroups: Iterable[int], members: Iterable[int], current: Mapping[int, int]
) -> dict[int, int]:
    """vgroup -> consumer for `members`, keeping `current` (vgroup -> consumer) where it can.

    The consumers that already hold the most vgroups get the larger shares, so a
    rebalance moves as few vgroups as possible.
    """
    vgroup_list = sorted(set(vgroups))
    member_list = sorted(set(members))
    if not member_list:
        return {}
    held: dict[int, list[int]] = {m: [] for m in member_list}
    for vgroup in vgroup_list:
        owner = current.get(vgroup)
        if owner in held:
            held[owner].append(vgroup)
    quota = _quotas(len(vgroup_list), member_list, held)
    result: dict[int, int] = {}
    for member in member_list:
        for vgroup in held[member][: quota[member]]:
            result[vgroup] = member
    free = [v for v in vgroup_list if v not in result]
    for member in member_list:
        need = quota[member] - min(len(held[member]), quota[member])
        for vgroup in free[:need]:
            result[vgroup] = member
        free = free[need:]
    return result


def _quotas(n: int, members: list[int], held: dict[int, list[int]]) -> dict[int, int]:
    """Each member's share: ⌈n/k⌉ for the n mod k members holding the most, else ⌊n/k⌋."""
    base, extra = divmod(n, len(members))
    by_holding = sorted(members, key=lambda m: (-len(held[m]), m))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
