"""What the protocol text promises, checked against a real server over real gRPC (issue
13, part 5): every point a client written from the .proto alone relies on."""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection_pb2  # type: ignore[import-untyped]

from sqltopic.client import connect
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, MESSAGE_OPTIONS
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.meta_json import event_json
from sqltopic.server.rpc.vnode_service import fetch_too_large
from tests.live_server import POWER, ServerProcess
from tests.server.wire import CALL_TIMEOUT_S, Wire, kind, offsets, status

# A reflection v1 call is the v1alpha call under another service name (same messages).
REFLECTION_V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
REFLECTION_V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
# Longest wait for a stopping server's streams to end (a deadline, not a measurement).
STOP_DEADLINE_S = 30.0
TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module (with `power.meters`, topic `hot`, 4 tables of 10
    rows): each test uses its own group."""
    proc = ServerProcess(tmp_path_factory.mktemp("protocol") / "data")
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(POWER.replace("VGROUPS 2", "VGROUPS 4"))
            conn.execute(TOPIC)
            for n, table in enumerate(("d1", "d2", "d3", "d4")):
                conn.execute(
                    f"INSERT INTO power.{table} USING power.meters TAGS ('x', {n}) VALUES "
                    + " ".join(f"({1000 + i}, 1.0, {215 + i}, 0.5)" for i in range(10))
                )
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def wire(live: ServerProcess) -> Iterator[Wire]:
    w = Wire(live.address)
    yield w
    w.close()


def _reflect(
    channel: grpc.Channel, path: str, **request: object
) -> reflection_pb2.ServerReflectionResponse:
    call = channel.stream_stream(
        path,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    answers = list(
        call(iter([reflection_pb2.ServerReflectionRequest(**request)]), timeout=CALL_TIMEOUT_S)
    )
    assert len(answers) == 1
    return answers[0]


def test_reflection_is_served_as_v1_and_v1alpha(wire: Wire) -> None:
    for path in (REFLECTION_V1, REFLECTION_V1ALPHA):
        listed = _reflect(wire.channel, path, list_services="*")
        names = {s.name for s in listed.list_services_response.service}
        assert {"sqltopic.v1.Mnode", "grpc.health.v1.Health"} <= names, path
        assert {
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        } <= names
    # v1 describes itself (a tool that lists, then describes, every service)
    found = _reflect(
        wire.channel, REFLECTION_V1, file_containing_symbol="grpc.reflection.v1.ServerReflection"
    )
    assert found.WhichOneof("message_response") == "file_descriptor_response"
    mnode = _reflect(wire.channel, REFLECTION_V1, file_containing_symbol="sqltopic.v1.Mnode")
    assert mnode.WhichOneof("message_response") == "file_descriptor_response"


def test_the_auth_scheme_and_the_user_name_are_case_insensitive(
    live: ServerProcess, wire: Wire
) -> None:
    session = pb_grpc.SessionStub(wire.channel)
    login = session.Login(pb.LoginRequest(user="ROOT", password="taosdata"), timeout=CALL_TIMEOUT_S)
    assert login.user == "root"
    assert login.max_chunk_bytes == MAX_CHUNK_BYTES == 4_128_768
    sql = pb_grpc.SqlStub(wire.channel)
    for scheme in ("bearer", "BEARER", "Bearer"):
        md = (("authorization", f"{scheme} {login.token}"),)
        sql.Run(pb.ExecuteRequest(sql="SHOW DATABASES"), metadata=md, timeout=CALL_TIMEOUT_S)
    with pytest.raises(grpc.RpcError) as err:
        sql.Run(
            pb.ExecuteRequest(sql="SHOW DATABASES"),
            metadata=(("authorization", f"Basic {login.token}"),),
        )
    assert status(err.value)[0] == grpc.StatusCode.UNAUTHENTICATED


def test_affected_rows_counts_inserted_rows_and_is_zero_for_ddl(wire: Wire) -> None:
    sql = pb_grpc.SqlStub(wire.channel)

    def run(text: str) -> pb.ResultHeader:
        return sql.Run(pb.ExecuteRequest(sql=text), metadata=wire.md, timeout=CALL_TIMEOUT_S).header

    assert run("CREATE DATABASE affected VGROUPS 1").affected_rows == 0
    assert run("CREATE TABLE affected.n (ts TIMESTAMP, v INT)").affected_rows == 0
    assert run("INSERT INTO affected.n VALUES (1, 1) (2, 2)").affected_rows == 2
    assert run("SELECT * FROM affected.n").affected_rows == 0
    assert run("DROP DATABASE affected").affected_rows == 0


def test_a_run_result_over_4128768_bytes_is_too_large(live: ServerProcess, wire: Wire) -> None:
    """The limit is 4 MiB - 64 KiB of Arrow, not 4 MiB: 276 rows of 15,000 bytes (about
    4,141,000 bytes of Arrow, between the two) are refused, 250 rows are answered."""
    with connect(live.address) as conn:
        conn.execute(
            "CREATE DATABASE big VGROUPS 1; CREATE TABLE big.t (ts TIMESTAMP, s VARCHAR(16000))"
        )
        conn.write(
            "big.t",
            pa.table({"ts": pa.array(range(276), pa.timestamp("ms")), "s": ["x" * 15_000] * 276}),
        )
    sql = pb_grpc.SqlStub(wire.channel)

    def run(text: str) -> pb.ExecuteResponse:
        return sql.Run(pb.ExecuteRequest(sql=text), metadata=wire.md, timeout=CALL_TIMEOUT_S)

    assert run("SELECT s FROM big.t WHERE ts < 250").header.row_count == 250
    with pytest.raises(grpc.RpcError) as err:
        run("SELECT s FROM big.t")
    code, trailers = status(err.value)
    assert (code, trailers["sqltopic-error"]) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TooLarge")
    assert "4032 KiB" in (err.value.details() or "")  # 4,128,768 bytes
    run("DROP DATABASE big")


def _join(wire: Wire, group: str) -> tuple[int, pb.GetAssignmentResponse]:
    sub = wire.subscribe(group, ["hot"])
    return sub.consumer_id, wire.assignment(sub.consumer_id)


def test_losing_vgroups_raises_the_epoch(wire: Wire) -> None:
    for leave in ("unsubscribe", "subscribe-no-topics"):
        consumer, plan = _join(wire, f"epochs-{leave}")
        assert len(plan.assignments) == 4
        if leave == "unsubscribe":
            answer = wire.mnode.Unsubscribe(
                pb.UnsubscribeRequest(consumer_id=consumer), metadata=wire.md
            )
            epoch = answer.epoch
        else:
            epoch = wire.subscribe(f"epochs-{leave}", [], consumer_id=consumer).epoch
        assert epoch > plan.epoch
        after = wire.assignment(consumer, known=plan.epoch)
        assert (after.unchanged, after.epoch, list(after.assignments)) == (False, epoch, [])


def test_close_consumer_and_its_deprecated_alias_both_close(wire: Wire) -> None:
    for method in ("CloseConsumer", "Close"):
        consumer, _ = _join(wire, f"close-{method}")
        getattr(wire.mnode, method)(
            pb.CloseRequest(consumer_id=consumer), metadata=wire.md, timeout=CALL_TIMEOUT_S
        )
        gone = wire.assignment(consumer, known=5)
        # REMOVED comes with epoch 0 and nothing else (documented)
        assert (gone.status, gone.epoch, gone.unchanged, list(gone.assignments)) == (
            pb.CONSUMER_STATUS_REMOVED,
            0,
            False,
            [],
        )


def test_positions_zero_and_negative(wire: Wire) -> None:
    consumer, plan = _join(wire, "positions")
    a = plan.assignments[0]
    begin, _ = wire.offset_range("hot", a.vgroup)
    assert begin == 1  # nothing removed: position 0 reads from the start, no data_lost
    frames = wire.poll(consumer, "positions", "hot", a.vgroup, plan.epoch, position=0)
    assert kind(frames) != "data_lost"
    assert offsets(frames)[0] == 1
    with pytest.raises(grpc.RpcError) as err:
        wire.poll(consumer, "positions", "hot", a.vgroup, plan.epoch, position=-1)
    code, trailers = status(err.value)
    assert (code, trailers["sqltopic-error"]) == (grpc.StatusCode.OUT_OF_RANGE, "OffsetOutOfRange")


def test_an_epoch_above_the_consumers_is_fenced_not_retried(wire: Wire) -> None:
    consumer, plan = _join(wire, "invented")
    vgroup = plan.assignments[0].vgroup
    with pytest.raises(grpc.RpcError) as err:
        wire.poll(consumer, "invented", "hot", vgroup, plan.epoch + 7)
    assert status(err.value)[0] == grpc.StatusCode.ABORTED
    assert status(err.value)[1]["sqltopic-error"] == "ConsumerFenced"
    with pytest.raises(grpc.RpcError) as err:
        wire.commit(consumer, "invented", plan.epoch + 7, ("hot", vgroup, 1))
    assert status(err.value)[1]["sqltopic-error"] == "ConsumerFenced"


def test_the_final_commit_after_a_racing_auto_commit_is_taken(wire: Wire) -> None:
    a, plan_a = _join(wire, "handover")
    b, _ = _join(wire, "handover")  # half of a's vgroups are revoked from it
    revoked = wire.assignment(a, known=plan_a.epoch)
    kept = {x.vgroup for x in revoked.assignments}
    moving = sorted({x.vgroup for x in plan_a.assignments} - kept)
    assert len(moving) == 2
    # an auto-commit a sent before it learnt of the revocation (its old epoch): stored,
    # but a has not let go, so b does not get the vgroup yet
    wire.commit(a, "handover", plan_a.epoch, ("hot", moving[0], 3))
    assert moving[0] not in {x.vgroup for x in wire.assignment(b).assignments}
    # the documented final commit, at the revoking epoch: accepted, and lets go
    wire.commit(a, "handover", revoked.epoch, ("hot", moving[0], 4))
    assert wire.committed("handover", "hot", moving[0]) == 4
    assert moving[0] in {x.vgroup for x in wire.assignment(b).assignments}


def test_meta_event_ids_are_strings(wire: Wire, live: ServerProcess) -> None:
    with connect(live.address) as conn:
        conn.execute("CREATE TOPIC hot_meta ONLY META AS DATABASE power")
        conn.execute("CREATE TABLE power.m1 USING power.meters TAGS ('y', 7)")
    sub = wire.subscribe("meta", ["hot_meta"])
    plan = wire.assignment(sub.consumer_id)
    events = []
    for a in plan.assignments:
        _, end = wire.offset_range("hot_meta", a.vgroup)
        position = 1
        while position < end:  # every message up to the end of the vgroup's WAL
            frames = wire.poll(sub.consumer_id, "meta", "hot_meta", a.vgroup, plan.epoch, position)
            if kind(frames) == "meta":
                events.append(json.loads(frames[0].meta.event_json))
            position = offsets(frames)[1]
    created = [e for e in events if e.get("tableName") == "m1"]
    assert len(created) == 1
    assert isinstance(created[0]["uid"], str)
    assert int(created[0]["uid"]) > 0
    assert all(isinstance(e["uid"], str) for e in events if "uid" in e)


def test_event_json_keeps_safe_numbers_and_strings_the_rest() -> None:
    values = [2**63 - 1, -(2**53), 2**53 - 1]
    event = {"uid": 5, "createTime": 1_700_000_000_000_000, "ok": True,
             "tags": [{"name": f"g{i}", "value": v} for i, v in enumerate(values)]}  # fmt: skip
    back = json.loads(event_json(event))
    assert back["uid"] == "5"
    assert (back["createTime"], back["ok"]) == (1_700_000_000_000_000, True)
    assert [t["value"] for t in back["tags"]] == [str(2**63 - 1), str(-(2**53)), 2**53 - 1]


def test_fetch_too_large_names_the_version_it_read_from() -> None:
    request = pb.PollRequest(topic="t", vgroup=3)  # no position: the committed offset
    frames = [pb.PollResponse(data=pb.DataMessage(offset=42, end_offset=50)), pb.PollResponse()]
    message = str(fetch_too_large(request, frames))
    assert "from version 42 of topic t vgroup 3 needs 2 frames" in message
    assert "version 0" not in message


def _polled(address: str, group: str) -> None:
    """Wait until `group` polled a vgroup (SHOW SUBSCRIPTIONS' last_poll is set: the poll
    reached the server, which notes it before holding it)."""
    deadline = time.monotonic() + STOP_DEADLINE_S
    with connect(address) as conn:
        while True:
            rows = conn.query("SHOW SUBSCRIPTIONS").to_pylist()
            if any(r["consumer_group"] == group and r["last_poll"] for r in rows):
                return
            assert time.monotonic() < deadline, f"group {group} never polled: {rows}"
            time.sleep(0.01)


def test_sigterm_ends_open_watches_reflection_streams_and_held_polls_cleanly(
    tmp_path: Path,
) -> None:
    proc = ServerProcess(tmp_path / "data")
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(POWER)
            conn.execute(TOPIC)
        channel = grpc.insecure_channel(proc.address, options=MESSAGE_OPTIONS)
        wire = Wire(proc.address)
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=STOP_DEADLINE_S
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        # a reflection stream a tool keeps open (it never half-closes)
        never: queue.Queue[None] = queue.Queue()

        def requests() -> Iterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="*")
            never.get(timeout=STOP_DEADLINE_S)

        reflect = channel.stream_stream(
            REFLECTION_V1,
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )(requests(), timeout=STOP_DEADLINE_S)
        assert next(reflect).WhichOneof("message_response") == "list_services_response"
        consumer, plan = _join(wire, "stop")
        held: list[object] = []

        def hold() -> None:  # a poll held waiting for writes when the server stops
            a = plan.assignments[0]
            held.append(
                wire.poll(
                    consumer,
                    "stop",
                    "hot",
                    a.vgroup,
                    plan.epoch,
                    timeout=STOP_DEADLINE_S,
                    max_wait_ms=int(STOP_DEADLINE_S * 1000),
                )
            )

        poller = threading.Thread(target=hold)
        poller.start()
        _polled(proc.address, "stop")  # held at the server, not still connecting
        proc.proc.send_signal(signal.SIGTERM)
        rest = [r.status for r in watch]  # ends (OK) once the shutdown starts
        assert rest[-1:] == [health_pb2.HealthCheckResponse.NOT_SERVING]
        assert list(reflect) == []  # ended by the server (OK), not cancelled at the grace's end
        poller.join(STOP_DEADLINE_S)
        assert not poller.is_alive()
        assert proc.proc.wait(timeout=STOP_DEADLINE_S) == 0
        errors = proc.stderr()
        assert "Traceback" not in errors, errors
        assert "CancelledError" not in errors, errors
        never.put(None)
        channel.close()
        wire.close()
    finally:
        proc.kill()
