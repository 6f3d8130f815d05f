"""Membership, epochs, fencing and expiry in the mnode's coordinator (no network)."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqltopic.errors import ConfigError, ConsumerFenced, DataFileDamaged, GroupConflict
from sqltopic.server.common.group_names import GroupType
from sqltopic.server.mnode import coordinator
from sqltopic.server.mnode.coordinator import Coordinator, Liveness, Member, Progress
from sqltopic.server.mnode.coordinator_store import CoordinatorStore, GroupDoc, ProgressRows


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coord(clock: Clock) -> Coordinator:
    vgroups = {"t": [1, 2, 3, 4], "u": [5, 6]}
    return Coordinator(lambda topic: vgroups[topic], clock=clock)


def _held(coord: Coordinator, consumer: int) -> set[tuple[str, int]]:
    member = coord.member(consumer)
    assert member is not None
    return set(member.assignment)


def test_a_single_consumer_gets_every_vgroup_and_polls_at_its_epoch(coord: Coordinator) -> None:
    a = coord.subscribe(0, "g", ["t", "u"])
    assert _held(coord, a.id) == {("t", 1), ("t", 2), ("t", 3), ("t", 4), ("u", 5), ("u", 6)}
    coord.check_owner(a.id, "g", "t", 3, a.epoch)
    with pytest.raises(ConsumerFenced, match="held by consumer"):
        coord.check_owner(a.id + 1, "g", "t", 3, a.epoch)
    with pytest.raises(ConsumerFenced, match="held by nobody"):
        coord.check_owner(a.id, "other", "t", 3, a.epoch)
    # no vnode lags the mnode (one process): an epoch above the member's was never
    # given out, so retrying it is hopeless: fenced, not RebalanceInProgress
    with pytest.raises(ConsumerFenced, match="above its current epoch"):
        coord.check_owner(a.id, "g", "t", 3, a.epoch + 1)
    with pytest.raises(ConsumerFenced, match="above its current epoch"):
        coord.check_owner(a.id, "g", "t", 3, a.epoch + 1, commit=True)


def _beat(coord: Coordinator, member: Member) -> None:
    """A heartbeat listing exactly the vgroups the member serves."""
    progress = [(t, v, Progress(None, 0)) for t, v in member.assignment]
    coord.heartbeat(member.id, polled=True, progress=progress)


def test_a_joining_consumer_gets_vgroups_only_once_their_holder_lets_go(
    coord: Coordinator, clock: Clock
) -> None:
    a = coord.subscribe(0, "g", ["t"])
    epoch_a = a.epoch
    b = coord.subscribe(0, "g", ["t"])
    # a serves two, lets go of two; b waits for them
    assert len(_held(coord, a.id)) == 2
    assert _held(coord, b.id) == set()
    assert (a.epoch, a.status, b.status) == (epoch_a + 1, "ready", "rebalancing")
    moving = [v for v in (1, 2, 3, 4) if ("t", v) not in _held(coord, a.id)]
    with pytest.raises(ConsumerFenced, match="moves to another consumer"):
        coord.check_owner(a.id, "g", "t", moving[0], a.epoch)
    coord.check_owner(a.id, "g", "t", moving[0], a.epoch, commit=True)  # may commit it
    (_, kept), *_ = sorted(_held(coord, a.id))
    coord.check_owner(a.id, "g", "t", kept, epoch_a)  # kept vgroups stay valid at the old epoch
    clock.now += 1.5
    coord.release(a.id, "g", "t", moving[0])  # a committed it
    assert _held(coord, b.id) == {("t", moving[0])}
    assert b.status == "rebalancing"
    assert coord.settles.count == 0
    clock.now += 1.0
    _beat(coord, a)  # a no longer lists the other one
    assert _held(coord, b.id) == {("t", v) for v in moving}
    assert (a.status, b.status) == ("ready", "ready")
    # b waited 2.5 s in `rebalancing` (/metrics' rebalance settle time)
    assert coord.settles.count == 1
    assert coord.settles.total == pytest.approx(2.5)
    coord.check_owner(b.id, "g", "t", moving[1], b.epoch)
    with pytest.raises(ConsumerFenced):
        coord.check_owner(a.id, "g", "t", moving[1], a.epoch, commit=True)


def test_a_holder_that_never_lets_go_loses_the_vgroup_after_its_session_timeout(
    coord: Coordinator, clock: Clock
) -> None:
    live = Liveness.of(6000, 600_000, 1000)
    a = coord.subscribe(0, "g", ["u"], liveness=live)
    b = coord.subscribe(0, "g", ["u"], liveness=live)
    assert _held(coord, b.id) == set()
    for _ in range(4):  # a heartbeats, still listing both vgroups, for 8 s
        clock.now += 2
        coord.heartbeat(
            a.id, polled=True, progress=[("u", 5, Progress(1, 0)), ("u", 6, Progress(1, 0))]
        )
        coord.heartbeat(b.id, polled=True)
        coord.expire()
    assert len(_held(coord, b.id)) == 1
    assert coord.member(a.id) is not None  # a is alive, only the revocation timed out


U_VGROUPS = [("u", 5), ("u", 6)]  # the coord fixture's vgroups of topic u


def listed_of(member: Member) -> frozenset[tuple[str, int]] | None:
    """(read through a call: mypy narrows an attribute across the calls that change it)"""
    return member.listed


def test_a_heartbeat_of_changes_keeps_the_rest_as_the_last_full_listing_left_it(
    coord: Coordinator,
) -> None:
    a = coord.subscribe(0, "g", ["u"])
    both = [("u", 5, Progress(1, 0)), ("u", 6, Progress(1, 0))]
    member = coord.heartbeat(a.id, polled=True, progress=both)
    assert member is not None
    assert member.listed == frozenset(U_VGROUPS)
    coord.heartbeat(a.id, polled=True, progress=[("u", 5, Progress(3, 2))], changed_only=True)
    assert coord.progress[("u", "g", 5)] == Progress(3, 2)
    assert coord.progress[("u", "g", 6)] == Progress(1, 0)  # unlisted: as it was
    assert member.listed == frozenset(U_VGROUPS)  # no full listing wanted
    b = coord.subscribe(0, "g", ["u"])  # one of a's two is revoked
    (_, moving), *_ = [k for k in U_VGROUPS if k not in _held(coord, a.id)]
    # nothing changed: a still holds what its last full listing named, the revoked one too
    coord.heartbeat(a.id, polled=True, changed_only=True)
    assert _held(coord, b.id) == set()
    # a lets it go: its vgroups changed, so it lists them all, without that one
    coord.heartbeat(
        a.id, polled=True, progress=[(t, v, Progress(3, 2)) for t, v in _held(coord, a.id)]
    )
    assert _held(coord, b.id) == {("u", moving)}
    assert member.listed == _held(coord, a.id)


def test_without_a_full_listing_a_heartbeat_of_changes_lets_nothing_go(
    coord: Coordinator, tmp_path: Path, clock: Clock
) -> None:  # fmt: skip
    """A heartbeat of changes with no full listing to go by (the mnode restarted, or it
    named a vgroup the last full listing did not): its entries are kept, no vgroup is
    taken as let go, and `listed` None asks for a full listing."""
    a = coord.subscribe(0, "g", ["u"])
    member = coord.heartbeat(a.id, polled=True, progress=[("u", 5, Progress(4, 1))],
                             changed_only=True)  # fmt: skip
    assert member is not None
    assert member.listed is None
    assert coord.progress[("u", "g", 5)] == Progress(4, 1)
    b = coord.subscribe(0, "g", ["u"])
    coord.heartbeat(a.id, polled=True, changed_only=True)
    assert _held(coord, b.id) == set()  # not listed, but not let go either
    # a full listing, then changes naming a vgroup it did not list: a full one is wanted
    coord.heartbeat(a.id, polled=True, progress=[(t, v, Progress(4, 1)) for t, v in U_VGROUPS])
    assert listed_of(member) == frozenset(U_VGROUPS)
    coord.heartbeat(a.id, polled=True, progress=[("t", 1, Progress(1, 0))], changed_only=True)
    assert listed_of(member) is None
    assert ("t", "g", 1) not in coord.progress  # not its vgroup: not kept
    assert _held(coord, b.id) == set()
    # a restart forgets the listings: every member's next heartbeat must list them all
    store = CoordinatorStore(tmp_path)
    first = Coordinator(lambda topic: [5, 6], clock=clock, store=store)
    c = first.subscribe(0, "g", ["u"])
    first.heartbeat(c.id, polled=True, progress=[("u", 5, Progress(1, 0))])
    first.persist(progress=True)
    again = Coordinator(lambda topic: [5, 6], clock=clock, store=CoordinatorStore(tmp_path))
    again.restore()
    back = again.heartbeat(c.id, polled=True, changed_only=True)
    assert back is not None
    assert back.listed is None


def test_each_topic_is_balanced_among_its_own_subscribers(coord: Coordinator) -> None:
    a = coord.subscribe(0, "g", ["t", "u"])
    b = coord.subscribe(0, "g", ["u"])
    _beat(coord, a)
    assert {t for t, _ in _held(coord, a.id)} == {"t", "u"}
    assert len([v for t, v in _held(coord, a.id) if t == "t"]) == 4
    assert len(_held(coord, b.id)) == 1
    assert {t for t, _ in _held(coord, b.id)} == {"u"}


def test_close_and_unsubscribe_move_vgroups_at_once(coord: Coordinator) -> None:
    a = coord.subscribe(0, "g", ["t"])
    b = coord.subscribe(0, "g", ["t"])
    coord.close(b.id)
    assert len(_held(coord, a.id)) == 4
    assert coord.member(b.id) is None
    epoch = a.epoch
    assert coord.unsubscribe(a.id).epoch > epoch  # its assignment changed: GetAssignment tells
    assert _held(coord, a.id) == set()
    assert not coord.held("g", "t", 1)
    with pytest.raises(ConsumerFenced, match="not a member"):
        coord.unsubscribe(12345)


def test_silent_and_idle_consumers_expire(coord: Coordinator, clock: Clock) -> None:
    live = Liveness.of(6000, 60_000, 1000)
    a = coord.subscribe(0, "g", ["t"], liveness=live)
    b = coord.subscribe(0, "g", ["t"], liveness=live)
    clock.now += 5
    assert coord.heartbeat(a.id, polled=True) is not None
    clock.now += 2  # b: 7 s without heartbeat > 6 s session timeout
    assert [m.id for m in coord.expire()] == [b.id]
    assert len(_held(coord, a.id)) == 4
    assert coord.heartbeat(b.id, polled=False) is None
    for _ in range(12):  # a heartbeats but never polls: out after max.poll.interval.ms
        clock.now += 5
        coord.heartbeat(a.id, polled=False)
    assert [m.id for m in coord.expire()] == [a.id]
    assert not coord.held("g", "t", 1)
    assert coord.removed == 2  # what /metrics counts
    assert coord.assignment_changes >= 3  # a, then a and b, then a alone again


def test_the_next_deadline_is_the_earliest_expiry_of_a_member_or_revocation(
    coord: Coordinator, clock: Clock
) -> None:
    assert coord.next_deadline() is None
    live = Liveness.of(6000, 60_000, 1000)
    start = clock.now
    a = coord.subscribe(0, "g", ["t"], liveness=live)
    assert coord.next_deadline() == start + 6
    clock.now += 3
    coord.heartbeat(a.id, polled=True, progress=[("t", v, Progress(1, 0)) for v in (1, 2, 3, 4)])
    assert coord.next_deadline() == start + 9  # a's session runs from its last heartbeat
    clock.now += 1
    b = coord.subscribe(0, "g", ["t"], liveness=live)  # two vgroups of a are revoked
    assert coord.next_deadline() == start + 9  # b's session and the revocation end later
    clock.now = start + 9.001
    assert [m.id for m in coord.expire()] == [a.id]
    assert len(_held(coord, b.id)) == 4
    assert coord.next_deadline() == start + 10  # b joined at start + 4, 6 s session


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((100, 0, 0), "session.timeout.ms: 100 is out of range 6000..1800000"),
        ((0, 10, 0), "max.poll.interval.ms: 10 is below 1000"),
        ((6000, 0, 6000), r"heartbeat.interval.ms: 6000 must be in 1000..session.timeout.ms"),
    ],
)
def test_bad_liveness_settings_are_config_errors(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Liveness.of(*args)


@pytest.mark.parametrize(
    ("group", "client", "message"),
    [
        ("", "", "group.id: required"),
        ("a:b", "", "may not contain ':'"),
        ("g" * 193, "", "193 characters long; the limit is 192"),
        ("g\x00", "", "holds control characters"),
        ("g", "c" * 256, "client.id: 'ccc.*the limit is 255"),
        ("g", "c\nd", "client.id: 'c\\\\nd' holds control characters"),
    ],
)
def test_bad_group_and_client_ids_are_refused_and_change_nothing(
    coord: Coordinator, group: str, client: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        coord.subscribe(0, group, ["t"], client_id=client)
    assert coord.members == {}
    assert coord.owners == {}


def test_the_state_survives_a_restart_through_its_store(tmp_path: Path, clock: Clock) -> None:
    vgroups = {"t": [1, 2, 3, 4]}
    first = Coordinator(lambda t: vgroups[t], clock=clock, store=CoordinatorStore(tmp_path))
    a = first.subscribe(0, "g", ["t"], client_id="ca", user="alice", fqdn="h1")
    first.heartbeat(a.id, polled=True, progress=[("t", v, Progress(7, 3)) for v in (1, 2, 3, 4)])
    b = first.subscribe(0, "g", ["t"])  # two vgroups revoking from a, b waiting
    first.persist(progress=True)
    clock.now += 100  # long after a's last heartbeat: restored members get a fresh window
    second = Coordinator(lambda t: vgroups[t], clock=clock, store=CoordinatorStore(tmp_path))
    second.restore()
    assert second.expire() == []
    ra, rb = second.member(a.id), second.member(b.id)
    assert ra is not None
    assert rb is not None
    assert (ra.client_id, ra.user, ra.fqdn, ra.epoch, ra.assignment) == (
        "ca",
        "alice",
        "h1",
        a.epoch,
        a.assignment,
    )
    assert (rb.status, rb.assignment) == ("rebalancing", frozenset())
    assert second.rows("t", "g", 1) == 3
    moving = next(v for v in (1, 2, 3, 4) if ("t", v) not in ra.assignment)
    second.release(a.id, "g", "t", moving)  # the hand-over goes on where it was
    assert ("t", moving) in rb.assignment
    assert second.subscribe(0, "g", ["t"]).id == b.id + 1  # ids are never reused


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("mnode.json", b'{"format": 1, "members": ['),
        ("mnode.json", b'{"format": 7}'),
        ("mnode.sqlite", b"this is not a database" * 100),
    ],
)
def test_a_damaged_state_file_is_a_clear_error(tmp_path: Path, name: str, content: bytes) -> None:
    (tmp_path / name).write_bytes(content)
    pattern = rf"{re.escape(name)}: the consumer group state is damaged"
    with pytest.raises(DataFileDamaged, match=pattern):
        CoordinatorStore(tmp_path).load()


def test_a_group_row_that_does_not_decode_is_a_clear_error(tmp_path: Path) -> None:
    store = CoordinatorStore(tmp_path)
    doc: dict[str, Any] = {"members": [], "owners": "nope", "plans": [], "rows_before": [],
                           "progress": []}  # fmt: skip
    store.save(2, {"g": doc})
    store.close()
    with sqlite3.connect(tmp_path / "mnode.sqlite") as con:
        con.execute("INSERT INTO groups VALUES ('h', '{not json')")
    for bad in ("h", "g"):
        with pytest.raises(DataFileDamaged, match=r"mnode\.sqlite: the consumer group state"):
            CoordinatorStore(tmp_path).load()
        with sqlite3.connect(tmp_path / "mnode.sqlite") as con:
            con.execute("DELETE FROM groups WHERE name = ?", (bad,))
    assert CoordinatorStore(tmp_path).load() is not None


def test_a_saved_group_is_written_again_only_when_it_changes(tmp_path: Path, clock: Clock) -> None:
    coord = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    a = coord.subscribe(0, "ga", ["t"])
    coord.subscribe(0, "gb", ["t"])
    coord.persist()
    with sqlite3.connect(tmp_path / "mnode.sqlite") as con:
        con.execute("UPDATE groups SET doc = 'marked' WHERE name = 'gb'")
    coord.close(a.id)  # ga has nothing left: its row goes
    coord.persist()
    with sqlite3.connect(tmp_path / "mnode.sqlite") as con:
        assert con.execute("SELECT name, doc FROM groups").fetchall() == [("gb", "marked")]


def _rows(path: Path, table: str) -> dict[str, str]:
    with sqlite3.connect(path / "mnode.sqlite") as con:
        return dict(con.execute(f"SELECT name, doc FROM {table}").fetchall())


def test_a_group_whose_progress_alone_changed_saves_its_progress_alone(
    tmp_path: Path, clock: Clock
) -> None:
    """Ten thousand bindings' groups each hold their member's document: a progress save
    rewrote them all every 30 s. Now it writes their progress rows only, and a restart
    reads both."""
    coord = Coordinator(lambda t: [5, 6], clock=clock, store=CoordinatorStore(tmp_path))
    a = coord.subscribe(0, "g", ["u"])
    coord.heartbeat(a.id, polled=True, progress=[("u", 5, Progress(1, 0))])
    coord.persist(progress=True)
    state = _rows(tmp_path, "groups")
    assert json.loads(state["g"])["members"][0]["id"] == a.id
    assert "progress" not in json.loads(state["g"])  # the progress is its own row
    assert json.loads(_rows(tmp_path, "progress")["g"]) == [["u", "g", 5, 1, 0]]
    coord.heartbeat(a.id, polled=True, progress=[("u", 5, Progress(9, 4))])
    coord.persist(progress=True)
    assert _rows(tmp_path, "groups") == state  # not written again
    assert json.loads(_rows(tmp_path, "progress")["g"]) == [["u", "g", 5, 9, 4]]
    again = Coordinator(lambda t: [5, 6], clock=clock, store=CoordinatorStore(tmp_path))
    again.restore()
    assert again.progress[("u", "g", 5)] == Progress(9, 4)
    member = again.member(a.id)
    assert member is not None
    assert member.assignment == a.assignment
    again.close(a.id)  # its progress becomes the group's rows counter: the row goes
    again.persist()
    assert json.loads(_rows(tmp_path, "groups")["g"]) == {
        "members": [], "owners": [], "plans": [], "rows_before": [["u", "g", 5, 4]],
    }  # fmt: skip
    assert _rows(tmp_path, "progress") == {}


def test_a_state_file_of_format_2_is_read_and_a_newer_progress_row_wins(
    tmp_path: Path, clock: Clock
) -> None:
    """Format 2 kept progress in the group's document: read as it is; once the group's
    progress is saved on its own, that row (read after the documents) is what counts."""
    coord = Coordinator(lambda t: [5, 6], clock=clock, store=CoordinatorStore(tmp_path))
    a = coord.subscribe(0, "g", ["u"])
    coord.persist()
    doc = json.loads(_rows(tmp_path, "groups")["g"])
    coord.close_store()
    with sqlite3.connect(tmp_path / "mnode.sqlite") as con:  # as format 2 wrote it
        con.execute("UPDATE meta SET value = 2 WHERE key = 'format'")
        doc["progress"] = [["u", "g", 5, 3, 1]]
        con.execute("UPDATE groups SET doc = ? WHERE name = 'g'", (json.dumps(doc),))
        con.execute("DROP TABLE progress")
    old = Coordinator(lambda t: [5, 6], clock=clock, store=CoordinatorStore(tmp_path))
    old.restore()
    assert old.progress[("u", "g", 5)] == Progress(3, 1)
    old.heartbeat(a.id, polled=True, progress=[("u", 5, Progress(8, 2))])
    old.persist(progress=True)
    again = Coordinator(lambda t: [5, 6], clock=clock, store=CoordinatorStore(tmp_path))
    again.restore()
    assert again.progress[("u", "g", 5)] == Progress(8, 2)


def test_a_progress_row_that_does_not_decode_is_a_clear_error(tmp_path: Path) -> None:
    CoordinatorStore(tmp_path).save(2, {}, {"g": [["u", "g", 5, 1, 0]]})
    assert CoordinatorStore(tmp_path).load() is not None
    for bad in ("{not json", '{"a": 1}'):
        with sqlite3.connect(tmp_path / "mnode.sqlite") as con:
            con.execute("UPDATE progress SET doc = ? WHERE name = 'g'", (bad,))
        with pytest.raises(DataFileDamaged, match=r"mnode\.sqlite: the consumer group state"):
            CoordinatorStore(tmp_path).load()


class FailingStore(CoordinatorStore):
    """A store whose next save fails (a full disk)."""

    fail = True

    def save(
        self, next_id: int, groups: dict[str, GroupDoc | None],
        progress: dict[str, ProgressRows] | None = None,
    ) -> None:  # fmt: skip
        if self.fail:
            self.fail = False
            raise OSError("disk full")
        super().save(next_id, groups, progress)


def test_groups_of_a_failed_save_are_written_by_the_next(tmp_path: Path, clock: Clock) -> None:
    coord = Coordinator(lambda t: [1, 2], clock=clock, store=FailingStore(tmp_path))
    a = coord.subscribe(0, "g", ["t"])
    with pytest.raises(OSError, match="disk full"):
        coord.persist()
    assert coord.unsaved
    coord.persist()
    again = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    again.restore()
    restored = again.member(a.id)
    assert restored is not None
    assert restored.assignment == a.assignment


def test_a_save_copies_one_group_at_a_time_and_stores_an_id_above_every_member(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress save of thousands of subscriptions takes a while to copy: the lock is
    let go between groups (GROUPS_PER_LOCK of them), so the event loop's polls and
    commits are not held up; a member that joins meanwhile is saved with a next id above
    its own."""
    monkeypatch.setattr(coordinator, "GROUPS_PER_LOCK", 1)
    coord = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    for group in ("ga", "gb", "gc"):
        coord.subscribe(0, group, ["t"])
    copy = coord._group_docs
    copied: list[set[str]] = []
    joined: list[int] = []

    def copying(groups: set[str]) -> dict[str, GroupDoc | None]:
        copied.append(set(groups))
        if len(copied) == 2:  # a join between two groups' copies
            joined.append(coord.subscribe(0, "gd", ["t"]).id)
        return copy(groups)

    coord._group_docs = copying  # type: ignore[method-assign]
    coord.persist()
    assert sorted(map(sorted, copied)) == [["ga"], ["gb"], ["gc"]]  # one group per copy
    coord._group_docs = copy  # type: ignore[method-assign]
    again = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    again.restore()
    assert again.subscribe(0, "ge", ["t"]).id > joined[0]  # no id given out twice


def test_a_state_file_of_format_1_moves_to_sqlite(tmp_path: Path, clock: Clock) -> None:
    legacy = {
        "format": 1, "next_id": 8,
        "members": [{
            "id": 7, "group": "g", "client_id": "c", "user": "root", "fqdn": "h",
            "topics": ["t"], "liveness": [30000, 300000, 3000], "parameters": {},
            "joined_us": 1, "subscribed_us": 2, "rebalanced_us": 3, "epoch": 4,
            "status": "ready", "assignment": [["t", 1], ["t", 2]],
        }],
        "owners": [["t", "g", 1, 7, 4, False], ["t", "g", 2, 7, 4, False, 0]],
        "plans": [["t", "g", 1, 7], ["t", "g", 2, 7]],
        "rows_before": [["t", "g", 1, 5]],
        "progress": [["t", "g", 1, 10, 2]],
    }  # fmt: skip
    (tmp_path / "mnode.json").write_text(json.dumps(legacy))
    first = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    first.restore()
    assert not (tmp_path / "mnode.json").exists()
    second = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    second.restore()
    member = second.member(7)
    assert member is not None
    assert (member.epoch, member.assignment) == (4, frozenset({("t", 1), ("t", 2)}))
    assert second.rows("t", "g", 1) == 7
    assert second.subscribe(0, "g", ["t"]).id == 8


def test_an_assignment_view_pairs_epoch_status_and_vgroups(coord: Coordinator) -> None:
    a = coord.subscribe(0, "g", ["t"])
    view = coord.assignment_of(a.id)
    assert view is not None
    assert (view.epoch, view.status) == (a.epoch, "ready")
    assert view.vgroups == tuple(("t", v, a.epoch) for v in (1, 2, 3, 4))
    assert coord.assignment_of(999) is None


def test_every_way_of_losing_vgroups_raises_the_epoch(coord: Coordinator) -> None:
    """Unsubscribe, Subscribe with no topics and Subscribe dropping a topic all change the
    assignment, so each raises the epoch and wakes held polls."""
    woken: list[int] = []
    coord.listeners.append(lambda: woken.append(1))
    a = coord.subscribe(0, "g", ["t", "u"])
    for topics in (["t"], []):
        epoch, calls = a.epoch, len(woken)
        coord.subscribe(a.id, "g", topics)
        assert a.epoch > epoch
        assert len(woken) > calls
        view = coord.assignment_of(a.id)
        assert view is not None
        assert {t for t, _, _ in view.vgroups} == set(topics)
    epoch = a.epoch
    coord.subscribe(a.id, "g", [])  # nothing held, nothing changed
    assert a.epoch == epoch


def test_only_a_commit_sent_knowing_of_the_revocation_lets_go(coord: Coordinator) -> None:
    a = coord.subscribe(0, "g", ["t"])
    before = a.epoch
    b = coord.subscribe(0, "g", ["t"])
    moving = next(v for v in (1, 2, 3, 4) if ("t", v) not in _held(coord, a.id))
    # an auto-commit at the old epoch, sent before a learnt of the revocation: stored
    # (the vnode accepts it) but a still holds the vgroup for its final commit
    coord.check_owner(a.id, "g", "t", moving, before, commit=True)
    coord.committed(a.id, "g", "t", moving, before)
    assert ("t", moving) not in _held(coord, b.id)
    coord.check_owner(a.id, "g", "t", moving, a.epoch, commit=True)  # the final commit
    coord.committed(a.id, "g", "t", moving, a.epoch)
    assert ("t", moving) in _held(coord, b.id)
    with pytest.raises(ConsumerFenced):
        coord.check_owner(a.id, "g", "t", moving, a.epoch, commit=True)


def test_a_commit_of_many_vgroups_lets_go_only_those_being_revoked(coord: Coordinator) -> None:
    """committed_all: one commit's vgroups, as committed() one by one; with nothing
    being revoked it changes nothing."""
    a = coord.subscribe(0, "g", ["t"])
    held = sorted(v for _, v in _held(coord, a.id))
    coord.committed_all(a.id, "g", [("t", v) for v in held], a.epoch)
    assert sorted(v for _, v in _held(coord, a.id)) == held
    b = coord.subscribe(0, "g", ["t"])
    moving = [v for v in held if ("t", v) not in _held(coord, a.id)]
    staying = [v for v in held if v not in moving]
    assert moving
    assert staying
    coord.committed_all(a.id, "g", [("t", v) for v in held], a.epoch)  # the final commit
    assert {v for _, v in _held(coord, b.id)} == set(moving)
    assert all(coord.owners["t", "g"][v].consumer == a.id for v in staying)


def test_a_revocation_keeps_its_epoch_across_a_restart(tmp_path: Path, clock: Clock) -> None:
    vgroups = {"t": [1, 2]}
    first = Coordinator(lambda t: vgroups[t], clock=clock, store=CoordinatorStore(tmp_path))
    a = first.subscribe(0, "g", ["t"])
    before = a.epoch
    first.subscribe(0, "g", ["t"])
    first.persist()
    second = Coordinator(lambda t: vgroups[t], clock=clock, store=CoordinatorStore(tmp_path))
    second.restore()
    ra = second.member(a.id)
    assert ra is not None
    moving = next(v for v in (1, 2) if ("t", v) not in ra.assignment)
    second.committed(a.id, "g", "t", moving, before)
    assert second.held("g", "t", moving)
    assert second.owners["t", "g"][moving].consumer == a.id
    second.committed(a.id, "g", "t", moving, ra.epoch)
    assert second.owners["t", "g"][moving].consumer != a.id


class SlowStore(CoordinatorStore):
    """A store whose first save waits until released: callers pile up behind it."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.saved: list[list[str]] = []  # the groups each save wrote
        self.entered = threading.Event()
        self.release = threading.Event()

    def save(
        self, next_id: int, groups: dict[str, GroupDoc | None],
        progress: dict[str, ProgressRows] | None = None,
    ) -> None:  # fmt: skip
        self.entered.set()
        assert self.release.wait(30)
        self.saved.append(sorted(groups))
        super().save(next_id, groups, progress)


def test_saves_that_queue_behind_one_share_the_next(tmp_path: Path, clock: Clock) -> None:
    store = SlowStore(tmp_path)
    coord = Coordinator(lambda t: [1, 2], clock=clock, store=store)
    coord.subscribe(0, "g0", ["t"])
    first = threading.Thread(target=coord.persist)
    first.start()
    assert store.entered.wait(30)  # the first save is under way, holding one member
    joiners = []
    for i in range(1, 6):  # five more changes, each persisted by its own caller
        coord.subscribe(0, f"g{i}", ["t"])
        joiners.append(threading.Thread(target=coord.persist))
        joiners[-1].start()
    store.release.set()
    for thread in [first, *joiners]:
        thread.join(30)
    # one save for the five that waited, and it writes only the groups that changed
    assert store.saved == [["g0"], ["g1", "g2", "g3", "g4", "g5"]]
    assert not coord.unsaved
    again = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    again.restore()
    assert len(again.members) == 6


def test_broadcast_consumers_each_hold_every_vgroup_in_a_lane_of_their_own(
    coord: Coordinator,
) -> None:
    a = coord.subscribe(0, "b", ["t"], client_id="ca", mode="broadcast")
    b = coord.subscribe(0, "b", ["t"], client_id="cb", mode="broadcast")
    assert (a.group, a.group_id, b.group, b.group_id) == ("b:ca", "b", "b:cb", "b")
    assert _held(coord, a.id) == _held(coord, b.id) == {("t", v) for v in (1, 2, 3, 4)}
    coord.check_owner(a.id, "b:ca", "t", 1, a.epoch)
    with pytest.raises(ConsumerFenced):  # a lane is its consumer's alone
        coord.check_owner(b.id, "b:ca", "t", 1, b.epoch)
    assert {m.id for m in coord.subscribers("t", "b")} == {a.id, b.id}
    coord.forget_topic("t", "b")
    assert coord.owners == {}


@pytest.mark.parametrize(
    ("first", "second", "says"),
    [
        (("vgroup", "c1"), ("exclusive", "c2"), "has group.type vgroup"),
        (("exclusive", "c1"), ("exclusive", "c2"), "is exclusive, and consumer 1 holds it"),
        (("broadcast", "c1"), ("broadcast", "c1"), "has client.id c1, and consumer 1"),
        (("broadcast", "c1"), ("vgroup", "c1"), "has group.type broadcast"),
        (("shared", "c1"), ("exclusive", "c2"), "has group.type shared"),
    ],
)
def test_a_refused_consumer_changes_nothing(
    coord: Coordinator, first: tuple[GroupType, str], second: tuple[GroupType, str], says: str
) -> None:
    member = coord.subscribe(0, "g", ["t"], client_id=first[1], mode=first[0])
    before = (dict(coord.members), {k: dict(v) for k, v in coord.owners.items()}, member.epoch)
    with pytest.raises(GroupConflict, match=says):
        coord.subscribe(0, "g", ["t"], client_id=second[1], mode=second[0])
    assert (coord.members, coord.owners, member.epoch) == before
    # its only member may change the group's type; once it left, anyone may
    moved = coord.subscribe(member.id, "g", ["t"], client_id=second[1], mode=second[0])
    assert (moved.mode, list(coord.members)) == (second[0], [moved.id])
    assert _held(coord, moved.id) == {("t", v) for v in (1, 2, 3, 4)}
    coord.close(moved.id)
    coord.subscribe(0, "g", ["t"], client_id=first[1], mode=first[0])


def test_broadcast_needs_a_client_id(coord: Coordinator) -> None:
    with pytest.raises(ConfigError, match=r"client\.id: required by group\.type broadcast"):
        coord.subscribe(0, "b", ["t"], mode="broadcast")
    assert coord.members == {}


def test_the_group_type_survives_a_restart(tmp_path: Path, clock: Clock) -> None:
    first = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    a = first.subscribe(0, "b", ["t"], client_id="ca", mode="broadcast")
    first.persist()
    second = Coordinator(lambda t: [1, 2], clock=clock, store=CoordinatorStore(tmp_path))
    second.restore()
    restored = second.member(a.id)
    assert restored is not None
    assert (restored.mode, restored.group) == ("broadcast", "b:ca")
    with pytest.raises(GroupConflict):
        second.subscribe(0, "b", ["t"], client_id="ca", mode="broadcast")


def test_shared_consumers_all_read_every_vgroup_and_leases_end_when_they_go(
    coord: Coordinator,
) -> None:
    gone: list[tuple[int, tuple[str, ...] | None]] = []
    coord.departures.append(lambda consumer, topics: gone.append((consumer, topics)))
    members = [coord.subscribe(0, "s", ["t", "u"], mode="shared") for _ in range(3)]
    every = {("t", v) for v in (1, 2, 3, 4)} | {("u", 5), ("u", 6)}
    assert all(_held(coord, m.id) == every for m in members)
    assert coord.owners == {}  # rows are leased by the vnodes: no vgroup has an owner
    a, b, c = members
    epochs = (a.epoch, b.epoch)
    for m in members:
        coord.check_owner(m.id, "s", "t", 3, m.epoch)
        coord.check_owner(m.id, "s", "u", 5, 1)  # an older epoch still reads
    with pytest.raises(ConsumerFenced, match="above its current epoch"):
        coord.check_owner(a.id, "s", "t", 3, a.epoch + 1)
    with pytest.raises(ConfigError, match=r"is shared: its consumers acknowledge rows"):
        coord.check_owner(a.id, "s", "t", 3, a.epoch, commit=True)
    with pytest.raises(ConsumerFenced, match="held by"):  # another group's fencing as before
        coord.check_owner(a.id, "g", "t", 3, a.epoch)
    coord.subscribe(c.id, "s", ["t"], mode="shared")  # c leaves u
    assert _held(coord, c.id) == {("t", v) for v in (1, 2, 3, 4)}
    with pytest.raises(ConsumerFenced, match="not subscribed to vgroup 5 of topic u"):
        coord.check_owner(c.id, "s", "u", 5, c.epoch)
    coord.close(c.id)
    assert gone == [(c.id, ("u",)), (c.id, None)]
    assert (a.epoch, b.epoch) == epochs  # the others' assignments never moved
    with pytest.raises(GroupConflict, match=r"has group\.type shared"):
        coord.subscribe(0, "s", ["t"], mode="vgroup")


COORD_OPS = ("join", "leave", "beat", "move", "drop")


def _state(coord: Coordinator) -> tuple[object, ...]:
    """The coordinator's durable state, comparable across a restore."""
    members = {
        i: (m.group, m.client_id, m.topics, m.epoch, m.status, m.assignment, m.mode)
        for i, m in coord.members.items()
    }
    owners = {k: {v: (o.consumer, o.epoch, o.revoking, o.revoked_at) for v, o in d.items()}
              for k, d in coord.owners.items() if d}  # fmt: skip
    plans = {k: d for k, d in coord.plans.items() if d}
    return members, owners, plans, dict(coord.rows_before), dict(coord.progress)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(COORD_OPS), st.integers(0, 5),
                          st.integers(0, 3)), min_size=1, max_size=40))  # fmt: skip
def test_what_each_save_writes_restores_the_whole_state(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    """Saves write only the groups that changed; a restore from them is the state."""
    data = tmp_path_factory.mktemp("coord")
    clock = Clock()
    vgroups = {"t": [1, 2, 3], "u": [4, 5]}
    coord = Coordinator(lambda t: vgroups[t], clock=clock, store=CoordinatorStore(data))
    for op, n, k in ops:
        ids = sorted(coord.members)
        member = coord.members[ids[(n + k) % len(ids)]] if ids else None
        if op == "join" or member is None:
            coord.subscribe(0, f"g{n % 3}", ["t", "u"][: 1 + k % 2])
        elif op == "leave":
            coord.close(member.id)
        elif op == "beat":
            reports = [(t, v, Progress(n, k)) for t, v in sorted(member.assignment)]
            coord.heartbeat(member.id, polled=True, progress=reports)
        elif op == "move":
            coord.subscribe(member.id, member.group, ["u"])
        elif op == "drop":
            coord.forget_topic("t", member.group if k % 2 else None)
        coord.persist(progress=k % 2 == 0)
    coord.persist(progress=True)
    again = Coordinator(lambda t: vgroups[t], clock=clock, store=CoordinatorStore(data))
    again.restore()
    assert _state(again) == _state(coord)
