"""The sans-IO consumer core without a server: a scripted mnode/vnode answers its effects,
so the order of rebalance callbacks, pause/resume, commit skipping and seek(0) are
checked exactly (no threads, no timing)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest

import sqltopic.client.effects as fx
import sqltopic.client.state as client_state
from sqltopic.client.config import parse_config
from sqltopic.client.core import ConsumerCore
from sqltopic.client.message import Empty, Message, TopicPartition
from sqltopic.client.rebalance import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID
from sqltopic.errors import ConsumerFenced, Error, OffsetOutOfRange, ServerUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

T = TypeVar("T")
READY = pb.CONSUMER_STATUS_READY
BEGIN, END = 5, 50  # every vnode's retained range here


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeServer:
    """Answers the core's effects: the assignment in `vgroups` (epoch `epoch`), a data
    message of one row for every fetch, commits recorded in `commits`."""

    def __init__(self, core: ConsumerCore, vgroups: list[int]) -> None:
        self.core = core
        self.vgroups = vgroups
        self.epoch = 1
        self.granted: dict[int, int] = {}
        self.commits: list[tuple[str, int, int]] = []
        self.events: list[tuple[str, list[tuple[int, int | None]]]] = []
        self.fetched: list[fx.Fetch] = []
        self.pending: list[fx.Fetched] = []
        self.on_event: Callable[[str, list[TopicPartition]], None] = lambda kind, parts: None
        self.fence_assignment = False
        self.spawned: list[fx.Flow[None]] = []

    def run(self, flow: fx.Flow[T]) -> T:
        stepper = fx.Stepper(flow)
        while (effect := stepper.next()) is not None:
            try:
                stepper.answer(self.perform(effect))
            except Error as err:
                stepper.fail(err)
        return stepper.value

    def perform(self, effect: fx.Effect) -> Any:
        if isinstance(effect, fx.Rpc):
            return getattr(self, effect.method)(effect.request)
        if isinstance(effect, fx.Fetch):
            self.fetched.append(effect)
            position = effect.request.position if effect.request.HasField("position") else BEGIN
            answer = self.answer(effect, position)
            self.pending.append(fx.Fetched(effect.ticket, answer, self.epoch))
        elif isinstance(effect, fx.Spawn):
            self.spawned.append(effect.flow)  # run when the test says
        elif isinstance(effect, fx.Wait):
            return self.pending.pop(0) if self.pending else None
        elif isinstance(effect, fx.Notify):
            self.events.append((effect.kind, [(p.vgroup, p.offset) for p in effect.parts]))
            try:
                self.on_event(effect.kind, list(effect.parts))
            except Exception as exc:
                return exc
        return None

    def answer(self, fetch: fx.Fetch, position: int) -> Message | Empty:
        """A fetch's answer: one row at `position`."""
        return Message("t", "db", fetch.vgroup, position, position + 1, "data")

    # --- the RPCs the core makes ---

    def Login(self, request: Any) -> pb.LoginResponse:
        return pb.LoginResponse(token="token")

    def Subscribe(self, request: Any) -> pb.SubscribeResponse:
        return pb.SubscribeResponse(consumer_id=7, epoch=self.epoch, status=READY)

    def GetAssignment(self, request: Any) -> pb.GetAssignmentResponse:
        if self.fence_assignment:
            self.fence_assignment = False
            raise ConsumerFenced("consumer 7 is not a member: subscribe again")
        assignments = [
            pb.Assignment(topic="t", database="db", vgroup=v, granted_epoch=self.granted.get(v, 1))
            for v in self.vgroups
        ]
        return pb.GetAssignmentResponse(epoch=self.epoch, assignments=assignments, status=READY)

    def Heartbeat(self, request: Any) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse(epoch=self.epoch, status=READY)

    def OffsetRange(self, request: pb.OffsetRangeRequest) -> pb.OffsetRangeResponse:
        ranges = [
            pb.VgroupRange(topic=v.topic, vgroup=v.vgroup, begin=BEGIN, end=END)
            for v in request.vgroups
        ]
        return pb.OffsetRangeResponse(ranges=ranges)

    def Commit(self, request: pb.CommitRequest) -> pb.CommitResponse:
        self.commits += [(o.topic, o.vgroup, o.offset) for o in request.offsets]
        return pb.CommitResponse()

    def Unsubscribe(self, request: Any) -> pb.UnsubscribeResponse:
        return pb.UnsubscribeResponse(epoch=self.epoch)

    def CloseConsumer(self, request: Any) -> pb.CloseResponse:
        return pb.CloseResponse()

    def Logout(self, request: Any) -> pb.LogoutResponse:
        return pb.LogoutResponse()


def make(vgroups: list[int], **extra: str) -> tuple[ConsumerCore, FakeServer]:
    config = {"group.id": "g", "enable.auto.commit": "false", **extra}
    core = ConsumerCore(parse_config(config), clock=Clock())
    server = FakeServer(core, vgroups)
    server.run(core.login())
    server.run(core.subscribe(["t"]))
    return core, server


@pytest.mark.parametrize("now", [0.0, 3.2, 4.999, 12_345.678])
def test_auto_commits_fall_due_at_the_process_phase_of_the_interval_in_cohorts(
    now: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    clock.now = now
    config = parse_config({"group.id": "g", "auto.commit.interval.ms": "5000"})
    cohorts = client_state.AUTO_COMMIT_COHORTS
    part = 5.0 / cohorts
    firsts = []
    for pid in (1000, 1001):  # two processes' consumers
        monkeypatch.setattr("os.getpid", lambda pid=pid: pid)
        dues = [ConsumerCore(config, clock=clock).next_commit_at() for _ in range(2 * cohorts)]
        assert all(now < due <= now + 5.0 for due in dues)  # within one interval, never now
        # consumers made one after another join the cohorts in turn: the next ones
        # commit with the first ones, at the cohorts' instants a part of the period apart
        assert dues[cohorts:] == dues[:cohorts]
        phases = sorted(due % 5.0 for due in dues[:cohorts])
        steps = [later - earlier for earlier, later in itertools.pairwise(phases)]
        assert steps == pytest.approx([part] * (cohorts - 1))
        firsts.append(phases[0])
    # processes keep apart within each part
    assert abs(firsts[0] - firsts[1]) > part / 4
    assert firsts[0] == pytest.approx((1000 * client_state.PROCESS_PHASE_STEP) % 1.0 * part)


def test_auto_commits_with_a_zero_interval_are_due_at_once() -> None:
    clock = Clock()
    clock.now = 7.5
    config = parse_config({"group.id": "g", "auto.commit.interval.ms": "0"})
    assert ConsumerCore(config, clock=clock).next_commit_at() == 7.5


def test_commit_of_offsets_skips_vgroups_without_a_position() -> None:
    core, server = make([1, 2])
    parts = server.run(core.assignment())
    assert [p.offset for p in parts] == [None, None]
    server.run(core.commit(core.offsets_to_commit(None, parts)))
    assert server.commits == []  # nothing to store, no error (TDengine skips them)
    skipped = [TopicPartition("t", 1, -1), TopicPartition("t", 2, 9)]
    server.run(core.commit(core.offsets_to_commit(None, skipped)))
    assert server.commits == [("t", 2, 9)]


def test_seek_to_0_rewinds_to_the_first_retained_version() -> None:
    core, server = make([1])
    server.run(core.seek(TopicPartition("t", 1, 0)))
    assert core.position([TopicPartition("t", 1)])[0].offset == BEGIN
    server.run(core.seek(TopicPartition("t", 1, END)))  # the end itself is valid
    for outside in (-1, 1, BEGIN - 1, END + 1):
        with pytest.raises(OffsetOutOfRange, match=f"outside the retained range {BEGIN}..{END}"):
            server.run(core.seek(TopicPartition("t", 1, outside)))


def test_a_paused_vgroup_is_not_fetched_and_keeps_its_position() -> None:
    core, server = make([1, 2])
    server.run(core.seek(TopicPartition("t", 1, 10)))
    core.pause([TopicPartition("t", 1)])
    assert core.paused_parts() == [TopicPartition("t", 1, 10)]
    got = [server.run(core.poll(0)) for _ in range(3)]
    assert {m.vgroup for m in got if m is not None} == {2}
    assert {f.vgroup for f in server.fetched} == {2}
    core.resume([TopicPartition("t", 1)])
    assert core.paused_parts() == []
    message = server.run(core.poll(0))
    assert message is not None
    assert (message.vgroup, message.offset) == (1, 10)
    with pytest.raises(Error, match="topic t vgroup 9 not assigned to this consumer"):
        core.pause([TopicPartition("t", 9)])


def test_a_message_fetched_before_pause_waits_for_resume() -> None:
    core, server = make([1])
    server.run(core._launch())  # the fetch is out when the application pauses
    core.pause([TopicPartition("t", 1)])
    assert server.run(core.poll(0)) is None
    core.resume([TopicPartition("t", 1)])
    message = server.run(core.poll(0))
    assert message is not None
    assert message.offset == BEGIN


def test_pause_ends_when_the_vgroup_is_let_go() -> None:
    core, server = make([1, 2])
    core.pause([TopicPartition("t", 1), TopicPartition("t", 2)])
    server.vgroups, server.epoch = [2], 2
    core.need_refresh = True
    server.run(core.poll(0))
    assert core.paused_parts() == [TopicPartition("t", 2, None)]


def test_callbacks_assign_from_poll_revoke_before_let_go_lost_when_fenced() -> None:
    core, server = make([1, 2])
    assert server.events == []  # subscribe tells nothing: assignment comes from poll
    server.run(core.poll(0))
    assert server.events == [("assign", [(1, None), (2, None)])]
    server.run(core.poll(0))  # both vgroups have a position now

    def commit_on_revoke(kind: str, parts: list[TopicPartition]) -> None:
        if kind == "revoke":  # still held: the application commits its position
            assert ("t", 2) in core.held
            server.run(core.commit(core.offsets_to_commit(None, parts)))

    server.on_event = commit_on_revoke
    server.vgroups, server.epoch = [1], 2
    core.need_refresh = True
    server.run(core.poll(0))
    position = server.events[-1][1][0][1]
    assert position == BEGIN + 1
    assert server.events[-1] == ("revoke", [(2, position)])
    assert server.commits == [("t", 2, position)]
    assert ("t", 2) not in core.held

    server.fence_assignment = True  # the mnode forgot us: everything is lost
    core.need_refresh = True
    server.run(core.poll(0))
    assert [kind for kind, _ in server.events[-2:]] == ["lost", "assign"]
    assert server.events[-2][1][0][0] == 1


def test_a_vgroup_granted_anew_is_lost_then_assigned() -> None:
    core, server = make([1])
    server.run(core.poll(0))
    server.granted, server.epoch = {1: 3}, 3
    core.need_refresh = True
    server.run(core.poll(0))
    assert [kind for kind, _ in server.events] == ["assign", "lost", "assign"]


def test_a_new_subscription_revokes_everything_then_assigns_from_poll() -> None:
    core, server = make([1, 2])
    server.run(core.poll(0))
    server.run(core.subscribe(["t"]))
    assert [kind for kind, _ in server.events] == ["assign", "revoke"]  # not "lost"
    server.run(core.poll(0))
    assert server.events[-1] == ("assign", [(1, None), (2, None)])


def test_unsubscribe_and_close_revoke_first() -> None:
    core, server = make([1])
    server.run(core.poll(0))
    server.run(core.unsubscribe())
    assert [kind for kind, _ in server.events] == ["assign", "revoke"]
    server.run(core.subscribe(["t"]))
    server.run(core.poll(0))
    server.run(core.close())
    assert [kind for kind, _ in server.events] == ["assign", "revoke", "assign", "revoke"]


def test_a_callback_may_seek_but_not_poll_and_its_error_comes_out_of_poll() -> None:
    core, server = make([1])

    def rewind(kind: str, parts: list[TopicPartition]) -> None:
        for part in parts:
            server.run(core.seek(TopicPartition(part.topic, part.vgroup, 0)))
        server.run(core.poll(0))  # refused: a callback cannot poll

    server.on_event = rewind
    with pytest.raises(Error, match="poll cannot be called from a rebalance callback"):
        server.run(core.poll(0))
    assert core.position([TopicPartition("t", 1)])[0].offset == BEGIN  # the seek stood
    assert not core.in_callback
    message = server.run(core.poll(0))  # the consumer goes on
    assert message is not None
    assert message.offset == BEGIN


def test_an_empty_answer_of_a_paused_vgroup_still_moves_its_position() -> None:
    core, server = make([1])
    server.run(core._launch())
    ticket = server.fetched[-1].ticket
    server.pending = [fx.Fetched(ticket, Empty(BEGIN, BEGIN + 3), 1)]
    core.pause([TopicPartition("t", 1)])
    assert server.run(core.poll(0)) is None
    assert core.paused_parts() == [TopicPartition("t", 1, BEGIN + 3)]


def test_assign_from_on_assign_positions_with_confluent_offsets() -> None:
    core, server = make([1, 2, 3, 4])

    def on_assign(kind: str, parts: list[TopicPartition]) -> None:
        offsets = [OFFSET_BEGINNING, OFFSET_END, 20, OFFSET_INVALID]
        chosen = [replace(p, offset=o) for p, o in zip(parts, offsets, strict=True)]
        server.run(core.assign(chosen))

    server.on_event = on_assign
    server.run(core._maintain())
    server.run(core._announce())
    positions = core.position([TopicPartition("t", v) for v in (1, 2, 3, 4)])
    assert [p.offset for p in positions] == [BEGIN, END, 20, None]
    with pytest.raises(Error, match="assign: topic t vgroup 9 not assigned"):
        server.run(core.assign([TopicPartition("t", 9, 1)]))


class BeatServer(FakeServer):
    """A FakeServer that keeps each heartbeat and answers as a server that takes
    heartbeats of changes (`takes`), may ask for a full listing (`wants`) or fail."""

    def __init__(self, core: ConsumerCore, vgroups: list[int]) -> None:
        super().__init__(core, vgroups)
        self.beats: list[tuple[bool, dict[int, tuple[int | None, int]]]] = []
        self.takes, self.wants, self.fail = True, False, False

    def Heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        listed = {
            p.vgroup: (p.position if p.HasField("position") else None, p.rows)
            for p in request.progress
        }
        self.beats.append((request.progress_changed_only, listed))
        if self.fail:
            raise ServerUnavailable("the mnode is away")
        return pb.HeartbeatResponse(
            epoch=self.epoch, status=READY, takes_progress_changes=self.takes,
            wants_full_progress=self.wants,
        )  # fmt: skip


def beat(core: ConsumerCore, server: BeatServer) -> tuple[bool, dict[int, tuple[int | None, int]]]:
    server.run(core.heartbeat())
    return server.beats[-1]


def test_heartbeats_list_only_the_progress_that_changed_while_the_server_takes_them() -> None:
    config = {"group.id": "g", "enable.auto.commit": "false"}
    core = ConsumerCore(parse_config(config), clock=Clock())
    server = BeatServer(core, [1, 2, 3])
    server.run(core.login())
    server.run(core.subscribe(["t"]))
    unset = (None, 0)
    assert beat(core, server) == (False, {1: unset, 2: unset, 3: unset})  # the first: all
    assert beat(core, server) == (True, {})  # nothing changed
    message = server.run(core.poll(0))
    assert message is not None
    moved = core.held[("t", message.vgroup)]
    assert beat(core, server) == (True, {message.vgroup: (moved.position, moved.rows)})
    assert beat(core, server) == (True, {})
    # a heartbeat that failed: the next lists every vgroup (the server may not have it)
    server.fail = True
    with pytest.raises(ServerUnavailable):
        server.run(core.heartbeat())
    server.fail = False
    assert beat(core, server)[0] is False
    assert beat(core, server) == (True, {})
    # the server asks for a full listing: the next one is
    server.wants = True
    assert beat(core, server) == (True, {})
    server.wants = False
    assert beat(core, server)[0] is False
    # the vgroups held change: the consumer reports the one let go at once, listing
    # every vgroup it holds now
    server.epoch += 1
    server.vgroups = [1, 2]
    server.run(core._refresh())
    full, listed = server.beats[-1]
    assert (full, sorted(listed)) == (False, [1, 2])
    assert beat(core, server) == (True, {})
    # a server that does not take them gets every vgroup every time
    server.takes = False
    beat(core, server)
    full, listed = beat(core, server)
    assert (full, sorted(listed)) == (False, [1, 2])


def test_a_rejoined_consumer_lists_every_vgroup_first() -> None:
    config = {"group.id": "g", "enable.auto.commit": "false"}
    core = ConsumerCore(parse_config(config), clock=Clock())
    server = BeatServer(core, [1])
    server.run(core.login())
    server.run(core.subscribe(["t"]))
    beat(core, server)
    assert beat(core, server) == (True, {})
    server.run(core._rejoin())  # the mnode forgot it: a new member
    assert beat(core, server)[0] is False


def test_a_poll_hands_out_messages_without_waiting_for_its_auto_commit() -> None:
    """The periodic auto-commit runs on its own (a Spawn), as Kafka's clients commit in
    the background: the poll that finds it due returns its message at once, and no
    second one starts while one is under way (an older commit never lands after a
    newer one)."""
    config = {"group.id": "g", "auto.commit.interval.ms": "5000"}
    clock = Clock()
    core = ConsumerCore(parse_config(config), clock=clock)
    server = FakeServer(core, [1])
    server.run(core.login())
    server.run(core.subscribe(["t"]))
    first = server.run(core.poll(0))
    assert first is not None
    handed_out = core.position([TopicPartition("t", 1)])[0].offset
    clock.now += 10.0  # the commit is due
    second = server.run(core.poll(0))
    assert second is not None  # handed out: the commit was not waited for
    assert server.commits == []
    assert len(server.spawned) == 1
    clock.now += 10.0  # due again, the first still under way: none more
    assert server.run(core.poll(0)) is not None
    assert len(server.spawned) == 1
    # it runs: the position taken when it was due, after what the earlier polls handed
    # out, not the message of the poll that started it (not processed yet)
    server.run(server.spawned.pop())
    assert server.commits == [("t", 1, handed_out)]
    now = core.position([TopicPartition("t", 1)])[0].offset
    assert handed_out is not None
    assert now is not None
    assert handed_out < now
    clock.now += 10.0
    assert server.run(core.poll(0)) is not None  # the next due one starts
    assert len(server.spawned) == 1


class EmptyServer(FakeServer):
    """Answers every fetch at once with an empty message (the vgroup moved on without
    rows for us), each wait taking `step` seconds of the clock; `waits` counts them."""

    def __init__(self, core: ConsumerCore, vgroups: list[int], step: float) -> None:
        super().__init__(core, vgroups)
        self.step = step
        self.waits = 0

    def answer(self, fetch: fx.Fetch, position: int) -> Message | Empty:
        return Empty(position, position + 1)

    def perform(self, effect: fx.Effect) -> Any:
        if isinstance(effect, fx.Wait):
            self.waits += 1
            assert self.waits < 1_000, "poll never returned: answers kept it from its deadline"
            assert isinstance(self.core.clock, Clock)
            self.core.clock.now += self.step
        return super().perform(effect)


def test_a_poll_ends_at_its_deadline_while_answers_keep_coming() -> None:
    core, _ = make([1, 2])
    server = EmptyServer(core, [1, 2], step=0.25)
    assert server.run(core.poll(2.0)) is None
    assert core.clock() == pytest.approx(2.0)  # not a wait later than its deadline
    assert server.waits == 8
    assert core.position([TopicPartition("t", 1)])[0].offset == BEGIN + 4  # empties moved it
