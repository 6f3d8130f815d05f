"""End-to-end at the protocol level: a real server process, the Mnode and Vnode services
through the generated stubs (subscribe, assignment, poll with push, commit, fencing,
retention, errors, graceful stop)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc
import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import SchemaInUseError
from sqltopic.proto.arrow_ipc import MAX_FRAME_BYTES
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.live_server import ServerProcess
from tests.server.wire import Wire, blocks, kind, offsets, rows, status
from tests.support import meters_rows

# A condition that does not hold within this long never will (retention runs every 1 s).
WAIT_DEADLINE_S = 30.0
TOPIC = (
    "CREATE TOPIC hot AS SELECT ts, voltage, tbname, location FROM power.meters WHERE voltage > 220"
)
EARLIEST = pb.OFFSET_RESET_EARLIEST


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    return live_power


Rows = list[dict[str, object]]


def _drain(wire: Wire, consumer: int, group: str, epoch: int, topic: str, vgroup: int,
           position: int | None = None, reset: int = EARLIEST) -> tuple[Rows, int]:  # fmt: skip
    """Every row of the vgroup from `position` (or the group's start) to the end."""
    got: list[dict[str, object]] = []
    _, end = wire.offset_range(topic, vgroup)
    while True:
        frames = wire.poll(consumer, group, topic, vgroup, epoch, position,
                           auto_offset_reset=reset, min_rows=100)  # fmt: skip
        assert kind(frames) in {"data", "empty"}
        got += rows(frames)
        position = offsets(frames)[1]
        if position >= end:
            return got, position


def _key(row: dict[str, object]) -> tuple[object, ...]:
    return (row["ts"], row["voltage"], row["tbname"], row["location"])


def test_consume_from_earliest_equals_the_select_then_resume_at_the_commit(
    hot: Connection, wire: Wire
) -> None:
    for i, table in enumerate(["d1", "d2", "d3", "d4"]):
        hot.write("meters", meters_rows(1000 * i, 500, table))
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    assert sorted(a.vgroup for a in asg.assignments) == [1, 2]
    assert all(a.database == "power" and a.begin == 1 for a in asg.assignments)
    got: list[dict[str, object]] = []
    for a in asg.assignments:
        vrows, end = _drain(wire, sub.consumer_id, "g", asg.epoch, "hot", a.vgroup)
        got += vrows
        wire.commit(sub.consumer_id, "g", asg.epoch, ("hot", a.vgroup, end))
        assert wire.committed("g", "hot", a.vgroup) == end
    expected = hot.query(
        "SELECT ts, voltage, tbname, location FROM power.meters WHERE voltage > 220"
    ).to_pylist()
    assert Counter(map(_key, got)) == Counter(map(_key, expected))
    written = [meters_rows(1000 * i, 500).column("voltage").to_pylist() for i in range(4)]
    assert len(got) == sum(v > 220 for vs in written for v in vs)
    # a later consumer of the group starts exactly at the commit: only new rows
    wire.mnode.Close(pb.CloseRequest(consumer_id=sub.consumer_id), metadata=wire.md)
    hot.write("meters", meters_rows(9000, 40, "d1"))
    again = wire.subscribe("g", ["hot"])
    asg2 = wire.assignment(again.consumer_id)
    later: list[dict[str, object]] = []
    for a in asg2.assignments:
        later += _drain(wire, again.consumer_id, "g", asg2.epoch, "hot", a.vgroup)[0]
    assert sorted(r["voltage"] for r in later) == list(range(221, 240))  # type: ignore[type-var]


def test_latest_sees_only_later_rows_and_none_is_an_error(hot: Connection, wire: Wire) -> None:
    hot.write("meters", meters_rows(0, 40))
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    vgroup = next(a.vgroup for a in asg.assignments if a.end > 2)  # the one holding d1
    first = wire.poll(sub.consumer_id, "g", "hot", vgroup, asg.epoch,
                      auto_offset_reset=pb.OFFSET_RESET_LATEST)  # fmt: skip
    assert kind(first) == "empty"
    position = offsets(first)[1]
    hot.write("meters", meters_rows(100, 40))
    later, _ = _drain(wire, sub.consumer_id, "g", asg.epoch, "hot", vgroup, position)
    assert sorted(r["ts"].timestamp() * 1000 for r in later) == [  # type: ignore[attr-defined]
        100 + i for i in range(40) if 200 + (100 + i) % 40 > 220
    ]
    with pytest.raises(grpc.RpcError) as info:
        wire.poll(sub.consumer_id, "g", "hot", vgroup, asg.epoch,
                  auto_offset_reset=pb.OFFSET_RESET_NONE)  # fmt: skip
    code, trailers = status(info.value)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert trailers["sqltopic-error"] == "NoCommittedOffset"


def test_a_waiting_poll_receives_a_later_write(hot: Connection, wire: Wire) -> None:
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    hot.write("meters", meters_rows(0, 1))  # creates d1 and tells its vgroup
    vgroup = next(a.vgroup for a in wire.assignment(sub.consumer_id).assignments if a.end > 2)
    _, end = wire.offset_range("hot", vgroup)
    answer: list[list[pb.PollResponse]] = []
    waiting = threading.Thread(
        target=lambda: answer.append(
            wire.poll(
                sub.consumer_id, "g", "hot", vgroup, asg.epoch, end, max_wait_ms=60_000, timeout=120
            )
        )
    )
    waiting.start()
    hot.write("meters", meters_rows(5, 1))  # voltage 205: skipped by the filter
    hot.write("meters", meters_rows(30, 1))  # voltage 230: pushed
    waiting.join(120)
    assert answer, "the poll did not answer"
    assert kind(answer[0]) == "data"
    assert [r["voltage"] for r in rows(answer[0])] == [230]
    assert offsets(answer[0]) == (end, end + 2)


def _fenced(call: Callable[[], object]) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    code, trailers = status(info.value)
    assert (code, trailers["sqltopic-error"]) == (grpc.StatusCode.ABORTED, "ConsumerFenced")
    return str(cast("grpc.Call", info.value).details())


def test_a_vgroup_moves_only_after_its_holder_commits_it(hot: Connection, wire: Wire) -> None:
    a = wire.subscribe("g", ["hot"])
    asg = wire.assignment(a.consumer_id)
    b = wire.subscribe("g", ["hot"])  # one of a's two vgroups is to move to b
    assert b.status == pb.CONSUMER_STATUS_REBALANCING
    assert list(wire.assignment(b.consumer_id).assignments) == []
    both = [pb.VgroupProgress(topic="hot", vgroup=v) for v in (1, 2)]  # a still reads both
    heartbeat = wire.mnode.Heartbeat(
        pb.HeartbeatRequest(consumer_id=a.consumer_id, epoch=asg.epoch, progress=both),
        metadata=wire.md,
    )
    assert heartbeat.refresh_assignment
    asg_a = wire.assignment(a.consumer_id, known=asg.epoch)
    (kept,) = [x.vgroup for x in asg_a.assignments]
    (moving,) = {1, 2} - {kept}
    # a may no longer poll it, nobody but a may commit it, and a may (its last position)
    assert "moves to another consumer" in _fenced(
        lambda: wire.poll(a.consumer_id, "g", "hot", moving, asg_a.epoch)
    )
    _fenced(lambda: wire.commit(0, "g", 0, ("hot", moving, 1)))  # standalone: a holds it
    _fenced(lambda: wire.poll(b.consumer_id, "g", "hot", moving, b.epoch))
    wire.commit(a.consumer_id, "g", asg_a.epoch, ("hot", moving, 1))
    asg_b = wire.assignment(b.consumer_id)
    assert ([x.vgroup for x in asg_b.assignments], asg_b.status) == (
        [moving],
        pb.CONSUMER_STATUS_READY,
    )
    frames = wire.poll(b.consumer_id, "g", "hot", moving, asg_b.epoch)
    assert offsets(frames)[0] == 1  # b starts where a committed
    _fenced(lambda: wire.commit(a.consumer_id, "g", asg_a.epoch, ("hot", moving, 1)))
    wire.mnode.Close(pb.CloseRequest(consumer_id=a.consumer_id), metadata=wire.md)
    wire.mnode.Close(pb.CloseRequest(consumer_id=b.consumer_id), metadata=wire.md)
    wire.commit(0, "g", 0, ("hot", moving, 2))  # the group is idle: a tool may commit
    assert wire.committed("g", "hot", moving) == 2
    gone = wire.mnode.Heartbeat(pb.HeartbeatRequest(consumer_id=a.consumer_id), metadata=wire.md)
    assert gone.status == pb.CONSUMER_STATUS_REMOVED


@pytest.mark.parametrize(
    ("call", "code", "error"),
    [
        (lambda w, c, e: w.subscribe("g", ["nope"]), "NOT_FOUND", "TopicNotFound"),
        (lambda w, c, e: w.subscribe("g", ["hot"], session_timeout_ms=10),
         "INVALID_ARGUMENT", "ConfigError"),
        (lambda w, c, e: w.subscribe("a:b", ["hot"]), "INVALID_ARGUMENT", "ConfigError"),
        (lambda w, c, e: w.poll(c, "g", "hot", 1, e, max_rows=-1),
         "INVALID_ARGUMENT", "ConfigError"),
        (lambda w, c, e: w.poll(c, "g", "hot", 99, e), "NOT_FOUND", "NotFoundError"),
        (lambda w, c, e: w.poll(c, "g", "hot", 1, e, position=10**6),
         "OUT_OF_RANGE", "OffsetOutOfRange"),
        (lambda w, c, e: w.commit(c, "g", e, ("hot", 1, 10**6)),
         "OUT_OF_RANGE", "OffsetOutOfRange"),
        (lambda w, c, e: w.offset_range("nope", 1), "NOT_FOUND", "TopicNotFound"),
    ],
    ids=["unknown-topic", "session-timeout", "group-id", "negative-max-rows", "vgroup",
         "position", "commit-offset", "range-of-unknown-topic"],
)  # fmt: skip
def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(
    hot: Connection, wire: Wire, call: object, code: str, error: str
) -> None:
    sub = wire.subscribe("g", ["hot"])
    epoch = wire.assignment(sub.consumer_id).epoch
    with pytest.raises(grpc.RpcError) as info:
        call(wire, sub.consumer_id, epoch)  # type: ignore[operator]
    got, trailers = status(info.value)
    assert (got.name, trailers["sqltopic-error"]) == (code, error)
    assert wire.committed("g", "hot", 1) is None
    assert kind(wire.poll(sub.consumer_id, "g", "hot", 1, epoch)) == "empty"


def test_a_large_message_comes_in_frames_under_4_mib(hot: Connection, wire: Wire) -> None:
    hot.execute("CREATE TOPIC everything AS STABLE power.meters")
    for i in range(6):
        hot.write("meters", meters_rows(i * 100_000, 100_000))
    sub = wire.subscribe("g", ["everything"])
    asg = wire.assignment(sub.consumer_id)
    vgroup = next(a.vgroup for a in asg.assignments if a.end > 2)
    frames = wire.poll(sub.consumer_id, "g", "everything", vgroup, asg.epoch,
                       auto_offset_reset=EARLIEST, min_rows=1_000_000)  # fmt: skip
    assert len(frames) > 1
    assert all(frame.ByteSize() <= MAX_FRAME_BYTES for frame in frames)
    got = blocks(frames)
    assert [name for name, _ in got] == ["d1"]
    assert got[0][1].column("ts").to_pylist() == meters_rows(0, 600_000).column("ts").to_pylist()
    assert frames[0].data.row_count == 600_000


def test_fetch_answers_the_message_poll_would_in_one_unary_call(
    hot: Connection, wire: Wire
) -> None:
    hot.write("meters", meters_rows(0, 1000))
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    vgroup = next(a.vgroup for a in asg.assignments if a.end > 2)
    args = (sub.consumer_id, "g", "hot", vgroup, asg.epoch)
    fetched = wire.fetch(*args, position=1)
    polled = wire.poll(*args, position=1)
    assert [fetched] == polled
    assert kind(polled) == "data"
    assert offsets(polled) == (1, fetched.data.end_offset)
    assert fetched.data.row_count > 0


def test_fetch_is_fenced_as_poll_is(hot: Connection, wire: Wire) -> None:
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    for call in (wire.fetch, wire.poll):
        with pytest.raises(grpc.RpcError) as fenced:
            call(sub.consumer_id + 100, "g", "hot", 1, asg.epoch, position=1)
        code, trailers = status(fenced.value)
        assert code == grpc.StatusCode.ABORTED
        assert trailers["sqltopic-error"] == "ConsumerFenced"


def test_fetch_of_a_message_over_one_frame_is_refused_and_poll_reads_it(
    hot: Connection, wire: Wire
) -> None:
    hot.execute("CREATE TOPIC everything AS STABLE power.meters")
    hot.write("meters", meters_rows(0, 400_000))  # one WAL entry of ~8 MB
    sub = wire.subscribe("g", ["everything"])
    asg = wire.assignment(sub.consumer_id)
    vgroup = next(a.vgroup for a in asg.assignments if a.end > 2)
    args = (sub.consumer_id, "g", "everything", vgroup, asg.epoch)
    first = next(a.begin for a in asg.assignments if a.vgroup == vgroup)
    with pytest.raises(grpc.RpcError) as refused:
        wire.fetch(*args, position=first, min_rows=400_000)
    code, trailers = status(refused.value)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert trailers["sqltopic-error"] == "TooLarge"
    assert "poll it with Poll" in str(cast("grpc.Call", refused.value).details())
    frames = wire.poll(*args, position=first, min_rows=400_000)
    assert len(frames) > 1
    assert frames[0].data.row_count == 400_000


def test_versions_removed_by_retention_are_reported_as_data_lost(
    hot: Connection, wire: Wire
) -> None:
    hot.execute("ALTER DATABASE power WAL_RETENTION_PERIOD 0 WAL_SEGMENT_SIZE 1")
    for i in range(20):
        hot.write("meters", meters_rows(i * 1000, 500))
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    vgroup = next(a.vgroup for a in asg.assignments if a.end > 10)
    deadline = time.monotonic() + WAIT_DEADLINE_S
    while wire.offset_range("hot", vgroup)[0] == 1:
        assert time.monotonic() < deadline, "retention deleted nothing"
        time.sleep(0.1)
    begin, _ = wire.offset_range("hot", vgroup)
    frames = wire.poll(sub.consumer_id, "g", "hot", vgroup, asg.epoch, position=1)
    assert (kind(frames), offsets(frames)) == ("data_lost", (1, begin))


def test_sigterm_answers_a_waiting_poll_and_offsets_survive_a_restart(data: Path) -> None:
    server = ServerProcess(data)
    server.wait_ready()
    try:
        with connect(server.address) as conn:
            conn.execute(
                "CREATE DATABASE power VGROUPS 1; CREATE TABLE power.t (ts TIMESTAMP, v INT)"
            )
            conn.execute("CREATE TOPIC tt AS SELECT * FROM power.t")
            conn.execute("INSERT INTO power.t VALUES (1, 1)")
        wire = Wire(server.address)
        sub = wire.subscribe("g", ["tt"])
        asg = wire.assignment(sub.consumer_id)
        _, end = wire.offset_range("tt", 1)
        wire.commit(sub.consumer_id, "g", asg.epoch, ("tt", 1, end))
        answer: list[list[pb.PollResponse]] = []
        waiting = threading.Thread(
            target=lambda: answer.append(
                wire.poll(
                    sub.consumer_id, "g", "tt", 1, asg.epoch, max_wait_ms=600_000, timeout=600
                )
            )
        )
        waiting.start()
        # the poll is waiting once the server holds it past its first read; stop then
        time.sleep(0.5)  # not a timing assertion: the answer must come either way
        assert server.stop() == 0
        waiting.join(60)
        assert answer, "the waiting poll got no answer"
        assert (kind(answer[0]), offsets(answer[0])) == ("empty", (end, end))
        wire.close()
    finally:
        server.kill()
    again = ServerProcess(data)
    again.wait_ready()
    try:
        wire = Wire(again.address)
        assert wire.committed("g", "tt", 1) == end
        wire.close()
    finally:
        again.kill()


def test_a_held_poll_is_fenced_when_its_vgroup_moves(hot: Connection, wire: Wire) -> None:
    """A held poll of a vgroup that moves is fenced; one of a vgroup the consumer keeps is
    answered empty with the consumer's new epoch (its assignment changed: refresh now),
    and a poll at that epoch waits for a write as before."""
    a = wire.subscribe("g", ["hot"])
    asg = wire.assignment(a.consumer_id)
    errors: list[tuple[grpc.StatusCode, dict[str, str]]] = []
    answers: list[tuple[int, str, int]] = []

    def hold(vgroup: int, epoch: int) -> None:
        try:
            frames = wire.poll(a.consumer_id, "g", "hot", vgroup, epoch, max_wait_ms=600_000,
                               timeout=600)  # fmt: skip
            answers.append((vgroup, kind(frames), frames[0].epoch))
        except grpc.RpcError as exc:
            errors.append(status(exc))

    held = [threading.Thread(target=hold, args=(x.vgroup, asg.epoch)) for x in asg.assignments]
    for thread in held:
        thread.start()
    time.sleep(0.5)  # not a timing assertion: the polls are held, or fenced at once
    wire.subscribe("g", ["hot"])  # a second consumer takes one of the two vgroups
    for thread in held:
        thread.join(WAIT_DEADLINE_S)
    assert [(code.name, t["sqltopic-error"]) for code, t in errors] == [
        ("ABORTED", "ConsumerFenced")
    ]
    now = wire.assignment(a.consumer_id)
    assert now.epoch > asg.epoch
    kept = [x.vgroup for x in now.assignments]
    assert answers == [(kept[0], "empty", now.epoch)]
    again = threading.Thread(target=hold, args=(kept[0], now.epoch))
    again.start()
    time.sleep(0.5)  # not a timing assertion: the poll is held until a write
    assert len(answers) == 1
    for table in ("d1", "d2", "d3", "d4"):
        hot.write("meters", meters_rows(30, 1, table))
    again.join(60)
    assert answers[1:] == [(kept[0], "data", now.epoch)]


def test_only_a_standalone_commit_may_evict(hot: Connection, wire: Wire) -> None:
    sub = wire.subscribe("g", ["hot"])
    asg = wire.assignment(sub.consumer_id)
    vgroup = asg.assignments[0].vgroup
    request = pb.CommitRequest(
        consumer_id=sub.consumer_id, group_id="g", epoch=asg.epoch, evict=True,
        offsets=[pb.TopicVgroupOffset(topic="hot", vgroup=vgroup, offset=1)],
    )  # fmt: skip
    with pytest.raises(grpc.RpcError) as info:
        wire.vnode.Commit(request, metadata=wire.md, timeout=30)
    code, trailers = status(info.value)
    assert (code, trailers["sqltopic-error"]) == (grpc.StatusCode.INVALID_ARGUMENT, "ConfigError")
    assert "only a standalone commit" in str(info.value.details())
    assert wire.committed("g", "hot", vgroup) is None
    assert wire.assignment(sub.consumer_id).epoch == asg.epoch  # nobody was evicted


def test_polling_a_dropped_subscribed_topic_is_topic_dropped(hot: Connection, wire: Wire) -> None:
    sub = wire.subscribe("g", ["hot"])
    epoch = wire.assignment(sub.consumer_id).epoch
    with pytest.raises(SchemaInUseError, match=r"1 live consumer: .*DROP TOPIC FORCE hot"):
        hot.execute("DROP TOPIC hot")
    hot.execute("DROP TOPIC FORCE hot")
    with pytest.raises(grpc.RpcError) as info:
        wire.poll(sub.consumer_id, "g", "hot", 1, epoch)
    code, trailers = status(info.value)
    assert (code.name, trailers["sqltopic-error"]) == ("NOT_FOUND", "TopicDropped")
    beat = wire.mnode.Heartbeat(
        pb.HeartbeatRequest(consumer_id=sub.consumer_id, epoch=epoch), metadata=wire.md
    )
    assert [(t.topic, t.dropped) for t in beat.topics] == [("hot", True)]
