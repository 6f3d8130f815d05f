"""A dnode's copy of its mnode's assignments (`Coordinator.fences` → `follow`): the owners
and members of its vgroups, the listeners told, and a sharing member that left, or
stopped reading a topic, reported to `departures` so that its leases there end."""

from __future__ import annotations

import pytest

from sqltopic.server.mnode.coordinator import Coordinator

VGROUPS = {"t": [1, 2], "u": [3]}
# a follower, what its departures were told (consumer, topics or None: all), its wakes
Dnode = tuple[Coordinator, list[tuple[int, tuple[str, ...] | None]], list[int]]


@pytest.fixture
def mnode() -> Coordinator:
    return Coordinator(lambda topic: VGROUPS[topic])


@pytest.fixture
def dnode() -> Dnode:
    follower = Coordinator(lambda topic: VGROUPS[topic], follower=True)
    departed: list[tuple[int, tuple[str, ...] | None]] = []
    told: list[int] = []
    follower.departures.append(lambda consumer, topics: departed.append((consumer, topics)))
    follower.listeners.append(lambda: told.append(1))
    return follower, departed, told


def test_a_dnode_takes_the_owners_and_members_of_its_vgroups(
    mnode: Coordinator, dnode: Dnode
) -> None:
    follower, departed, told = dnode
    a = mnode.subscribe(0, "g", ["t", "u"])
    follower.follow(mnode.fences([1, 2]))
    assert told == [1]
    copied = follower.member(a.id)
    assert copied is not None
    assert copied.epoch == a.epoch
    _members, owners = follower.snapshot()
    assert {v: o.consumer for v, o in owners[("t", "g")].items()} == {1: a.id, 2: a.id}
    assert ("u", "g") not in owners  # vgroup 3 is another dnode's
    assert departed == []


def test_a_sharing_member_that_leaves_or_drops_a_topic_is_reported_once(
    mnode: Coordinator, dnode: Dnode
) -> None:
    follower, departed, _told = dnode
    a = mnode.subscribe(0, "s", ["t", "u"], mode="shared")
    b = mnode.subscribe(0, "s", ["t"], mode="shared")
    plain = mnode.subscribe(0, "g", ["t"])
    follower.follow(mnode.fences([1, 2, 3]))
    assert departed == []
    mnode.subscribe(a.id, "s", ["t"], mode="shared")  # a stops reading u
    follower.follow(mnode.fences([1, 2, 3]))
    assert departed == [(a.id, ("u",))]
    mnode.close(b.id)
    mnode.close(plain.id)  # not sharing: no leases to end
    follower.follow(mnode.fences([1, 2, 3]))
    assert departed == [(a.id, ("u",)), (b.id, None)]
    follower.follow(mnode.fences([1, 2, 3]))  # nothing changed: nothing reported again
    assert len(departed) == 2
