"""The coordinator's recent rebalances (the web console's list): one record per
rebalance that changed assignments, with its cause, and at most RECENT_REBALANCES."""

from __future__ import annotations

from sqltopic.server.common.group_names import GroupType
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.rebalances import Rebalance, RebalanceLog

WALL_US = 1_700_000_000_000_000


def _coordinator() -> Coordinator:
    vgroups = {"t": [1, 2, 3, 4]}
    return Coordinator(lambda topic: vgroups[topic], clock=lambda: 1000.0, wall_us=lambda: WALL_US)


def _brief(r: Rebalance) -> tuple[object, ...]:
    return (r.topic, r.group, r.cause, r.consumer_id, r.consumers, r.assigned)


def test_join_revoke_handover_leave_and_removal_are_recorded_newest_first() -> None:
    coord = _coordinator()
    a = coord.subscribe(0, "g", ["t"])
    b = coord.subscribe(0, "g", ["t"])
    # a lets go of the two vgroups b is planned to get (its final commit)
    for vgroup in (3, 4):
        coord.release(a.id, "g", "t", vgroup)
    coord.close(b.id)
    a.status = "removed"  # as `expire` marks it
    coord.remove([a.id])
    got = [_brief(r) for r in reversed(coord.rebalances.recent())]
    assert got == [
        ("t", "g", "join", a.id, 1, ((a.id, (1, 2, 3, 4)),)),
        # b joins: a's 3 and 4 are revoked first (a's assignment shrinks), b waits
        ("t", "g", "join", b.id, 2, ((a.id, (1, 2)),)),
        ("t", "g", "handover", a.id, 2, ((b.id, (3,)),)),
        ("t", "g", "handover", a.id, 2, ((b.id, (3, 4)),)),
        ("t", "g", "leave", b.id, 1, ((a.id, (1, 2, 3, 4)),)),
        ("t", "g", "removed", a.id, 0, ()),
    ]
    assert all(r.time_us == WALL_US for r in coord.rebalances.recent())


def test_a_heartbeat_or_a_resubscribe_to_the_same_topics_records_nothing() -> None:
    coord = _coordinator()
    a = coord.subscribe(0, "g", ["t"])
    coord.heartbeat(a.id, polled=True)
    coord.subscribe(a.id, "g", ["t"])
    assert [r.cause for r in coord.rebalances.recent()] == ["join"]


def test_a_shared_group_records_each_change_of_its_members() -> None:
    coord = _coordinator()
    mode: GroupType = "shared"
    a = coord.subscribe(0, "s", ["t"], mode=mode)
    b = coord.subscribe(0, "s", ["t"], mode=mode)
    coord.unsubscribe(a.id)
    got = [_brief(r) for r in reversed(coord.rebalances.recent())]
    assert got == [
        ("t", "s", "join", a.id, 1, ((a.id, (1, 2, 3, 4)),)),
        ("t", "s", "join", b.id, 2, ((b.id, (1, 2, 3, 4)),)),
        ("t", "s", "subscribe", a.id, 1, ((a.id, ()),)),
    ]


def test_the_log_keeps_only_the_most_recent() -> None:
    log = RebalanceLog(kept=3)
    for i in range(5):
        log.add(Rebalance(i, "t", "g", "join", i, 1, ()))
    assert [r.time_us for r in log.recent()] == [4, 3, 2]
