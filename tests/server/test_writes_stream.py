"""`Sql.Writes` against a real server: many writes over one open stream, each applied
and answered as its own Write call would be, in order; every refusal on its ticket only
(the stream goes on), and what ends the stream; acknowledged writes survive SIGKILL."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import (
    AuthenticationFailed,
    InvalidValueError,
    NoPermission,
    NotFoundError,
    TooLarge,
)
from sqltopic.proto.arrow_ipc import MESSAGE_OPTIONS, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import from_call_status
from tests.live_server import POWER, ServerProcess
from tests.server.test_grpc_users import PASSWORD
from tests.server.wire import CALL_TIMEOUT_S, Wire

# Answers a test waits for at most (a bound, not a timing).
ANSWER_DEADLINE_S = 30.0


def rows(first_ts: int, voltages: list[int], device: str = "d1") -> pa.Table:
    """Rows of `device` (a child of power.meters), one per voltage, ts from `first_ts`."""
    n = len(voltages)
    return pa.table(
        {
            "tbname": pa.array([device] * n),
            "ts": pa.array(range(first_ts, first_ts + n), pa.timestamp("ms")),
            "voltage": pa.array(voltages, pa.int32()),
            "location": pa.array(["x"] * n),
            "groupid": pa.array([1] * n, pa.int32()),
        }
    )


def request(ticket: int, data: pa.Table | bytes, target: str = "power.meters") -> pb.WritesRequest:
    ipc = data if isinstance(data, bytes) else to_ipc(data).to_pybytes()
    return pb.WritesRequest(ticket=ticket, target=target, arrow_ipc=ipc)


class Writes:
    """One Sql.Writes stream: requests put on a queue, answers read one at a time."""

    def __init__(self, channel: grpc.Channel, metadata: Any) -> None:
        self.requests: queue.Queue[pb.WritesRequest | None] = queue.Queue()
        self._answers: queue.Queue[pb.WritesResponse | grpc.RpcError | None] = queue.Queue()
        self.call = pb_grpc.SqlStub(channel).Writes(
            iter(self.requests.get, None), metadata=metadata, timeout=CALL_TIMEOUT_S
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for answer in self.call:
                self._answers.put(answer)
            self._answers.put(None)
        except grpc.RpcError as exc:
            self._answers.put(exc)

    def send(self, *requests: pb.WritesRequest) -> None:
        for r in requests:
            self.requests.put(r)

    def next(self) -> pb.WritesResponse | grpc.RpcError | None:
        return self._answers.get(timeout=ANSWER_DEADLINE_S)

    def answer(self) -> pb.WritesResponse:
        got = self.next()
        assert isinstance(got, pb.WritesResponse), got
        return got

    def close(self) -> None:
        self.requests.put(None)


def outcome(answer: pb.WritesResponse) -> tuple[int, int | type[Exception]]:
    """An answer's ticket and rows, or the class of the error it carries."""
    if answer.WhichOneof("result") == "error":
        return answer.ticket, type(from_call_status(answer.error))
    return answer.ticket, answer.written.rows


def voltages(conn: Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT voltage FROM power.meters ORDER BY ts").rows]


@pytest.fixture
def writes(server: ServerProcess, live_power: Connection) -> Iterator[Writes]:
    wire = Wire(server.address)
    stream = Writes(wire.channel, wire.md)
    yield stream
    stream.close()
    wire.close()


def test_writes_are_applied_in_order_and_answered_under_their_tickets(
    writes: Writes, live_power: Connection
) -> None:
    writes.send(*(request(t, rows(1000 * t, [t, t + 100])) for t in (7, 3, 9)))
    assert [outcome(writes.answer()) for _ in range(3)] == [(7, 2), (3, 2), (9, 2)]
    assert voltages(live_power) == [3, 103, 7, 107, 9, 109]


def test_a_refused_write_fails_its_ticket_only_and_writes_nothing(
    writes: Writes, live_power: Connection
) -> None:
    bad_value = rows(0, [1]).set_column(2, "voltage", pa.array(["high"]))
    unknown_column = rows(0, [1]).append_column("nope", pa.array([1]))
    writes.send(
        request(1, rows(0, [1])),
        request(2, b"not arrow at all"),
        request(3, bad_value),
        request(4, unknown_column),
        request(5, rows(10, [5]), target="power.nothing"),
        request(6, rows(20, [6]), target=""),
        request(7, rows(30, [7]), target="power.me\x01ters"),
        request(8, rows(40, [8]), target="power." + "m" * 300),
        request(9, rows(50, [9])),
    )
    assert [outcome(writes.answer()) for _ in range(9)] == [
        (1, 1),
        (2, InvalidValueError),
        (3, InvalidValueError),
        (4, NotFoundError),
        (5, NotFoundError),
        (6, InvalidValueError),
        (7, InvalidValueError),
        (8, InvalidValueError),
        (9, 1),
    ]
    assert voltages(live_power) == [1, 9]


def test_a_write_over_the_servers_write_limit_is_too_large(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", extra=("--max-write-bytes", "1KiB"))
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(POWER)
            wire = Wire(proc.address)
            stream = Writes(wire.channel, wire.md)
            stream.send(request(1, rows(0, list(range(200)))), request(2, rows(500, [2])))
            first, second = stream.answer(), stream.answer()
            assert outcome(first) == (1, TooLarge)
            assert "--max-write-bytes" in first.error.message
            assert outcome(second) == (2, 1)
            assert voltages(conn) == [2]
            stream.close()
            wire.close()
    finally:
        proc.kill()


def test_a_request_that_does_not_parse_ends_the_stream_and_the_server_serves_on(
    server: ServerProcess, live_power: Connection
) -> None:
    wire = Wire(server.address)
    raw = wire.channel.stream_stream(
        "/sqltopic.v1.Sql/Writes",
        request_serializer=lambda b: b,
        response_deserializer=pb.WritesResponse.FromString,
    )
    good = request(1, rows(0, [1])).SerializeToString()
    with pytest.raises(grpc.RpcError) as caught:
        list(raw(iter([good, b"\xff\xff\xff"]), metadata=wire.md, timeout=CALL_TIMEOUT_S))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "WritesRequest" in (caught.value.details() or "")
    live_power.write("power.meters", rows(10, [2]))
    assert voltages(live_power) == [1, 2]
    wire.close()


def test_a_stream_without_a_session_is_refused(server: ServerProcess) -> None:
    channel = grpc.insecure_channel(server.address, options=MESSAGE_OPTIONS)
    stream = Writes(channel, (("authorization", "Bearer nope"),))
    stream.send(request(1, rows(0, [1])))
    ended = stream.next()
    assert isinstance(ended, grpc.RpcError)
    assert ended.code() == grpc.StatusCode.UNAUTHENTICATED
    stream.close()
    channel.close()


def test_a_user_without_write_rights_is_refused_on_each_ticket(
    server: ServerProcess, live_power: Connection
) -> None:
    live_power.execute(f"CREATE USER alice PASS '{PASSWORD}'; GRANT READ ON power.* TO alice")
    channel = grpc.insecure_channel(server.address, options=MESSAGE_OPTIONS)
    login = pb_grpc.SessionStub(channel).Login(
        pb.LoginRequest(user="alice", password=PASSWORD), timeout=CALL_TIMEOUT_S
    )
    stream = Writes(channel, (("authorization", f"Bearer {login.token}"),))
    stream.send(request(1, rows(0, [1])), request(2, rows(10, [2])))
    assert [outcome(stream.answer()) for _ in range(2)] == [(1, NoPermission), (2, NoPermission)]
    live_power.execute("GRANT WRITE ON power.* TO alice")
    stream.send(request(3, rows(20, [3])))
    assert outcome(stream.answer()) == (3, 1)  # the rights of the moment, per write
    assert voltages(live_power) == [3]
    stream.close()
    channel.close()


def test_after_a_logout_each_write_fails_unauthenticated(
    server: ServerProcess, writes: Writes, live_power: Connection
) -> None:
    wire = Wire(server.address)
    stream = Writes(wire.channel, wire.md)
    stream.send(request(1, rows(0, [1])))
    assert outcome(stream.answer()) == (1, 1)
    pb_grpc.SessionStub(wire.channel).Logout(
        pb.LogoutRequest(), metadata=wire.md, timeout=CALL_TIMEOUT_S
    )
    stream.send(request(2, rows(10, [2])))
    assert outcome(stream.answer()) == (2, AuthenticationFailed)
    assert voltages(live_power) == [1]
    stream.close()
    wire.close()


def test_a_stopping_server_ends_an_open_stream(server: ServerProcess, writes: Writes) -> None:
    writes.send(request(1, rows(0, [1])))
    assert outcome(writes.answer()) == (1, 1)
    assert server.stop() == 0
    ended = writes.next()
    assert ended is None or isinstance(ended, grpc.RpcError), ended


def test_acknowledged_writes_survive_a_sigkill(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data")
    proc.wait_ready()
    try:
        with connect(proc.address) as conn:
            conn.execute(POWER.replace("VGROUPS 2", "VGROUPS 2 WAL_LEVEL 2"))
        wire = Wire(proc.address)
        stream = Writes(wire.channel, wire.md)
        stream.send(*(request(t, rows(10 * t, [t])) for t in range(1, 51)))
        assert [outcome(stream.answer()) for _ in range(50)] == [(t, 1) for t in range(1, 51)]
        proc.proc.kill()
        proc.proc.wait(timeout=ANSWER_DEADLINE_S)
        wire.close()
        proc = ServerProcess(tmp_path / "data", port=proc.port)
        proc.wait_ready()
        with connect(proc.address) as conn:
            assert voltages(conn) == list(range(1, 51))
    finally:
        proc.kill()
