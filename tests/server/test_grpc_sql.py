"""End-to-end: a real `sqltopic server` process on a free port, driven through the
Python client and plain gRPC stubs (Session, Sql, health)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from sqltopic.client import Connection, connect
from sqltopic.client.connection import writes_only
from sqltopic.errors import (
    AuthenticationFailed,
    Error,
    InvalidTopicQuery,
    ServerUnavailable,
    SqlSyntaxError,
    TopicNotFound,
)
from sqltopic.proto.arrow_ipc import MAX_FRAME_BYTES, MESSAGE_OPTIONS, from_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from tests.live_server import POWER, START_DEADLINE_S, ServerProcess, free_port


def _meters(rows: int, table: str = "d1") -> pa.Table:
    return pa.table({
        "tbname": [table] * rows,
        "location": ["California.SanFrancisco"] * rows,
        "groupid": pa.array([2] * rows, pa.int32()),
        "ts": pa.array(range(1_000, 1_000 + rows), pa.timestamp("ms")),
        "current": pa.array([10.5] * rows, pa.float32()),
        "voltage": pa.array([i % 300 for i in range(rows)], pa.int32()),
        "phase": pa.array([0.25] * rows, pa.float32()),
    })  # fmt: skip


def _token(address: str) -> tuple[grpc.Channel, str]:
    channel = grpc.insecure_channel(address, options=MESSAGE_OPTIONS)
    login = pb_grpc.SessionStub(channel).Login(
        pb.LoginRequest(user="root", password="taosdata"), timeout=30
    )
    return channel, login.token


def _call(exc: grpc.RpcError) -> grpc.Call:
    """A failed call's status: every RpcError a stub raises is also its grpc.Call."""
    return cast("grpc.Call", exc)


def test_login_and_wrong_password(server: ServerProcess) -> None:
    with connect(server.address) as conn:
        assert conn.execute("SHOW DATABASES").columns
    with pytest.raises(AuthenticationFailed, match="wrong user or password"):
        connect(server.address, password="nope")
    with pytest.raises(AuthenticationFailed):
        connect(server.address, user="alice")


@pytest.mark.parametrize(
    "metadata",
    [(), (("authorization", "Bearer not-a-token"),), (("authorization", "Basic x"),)],
    ids=["missing", "unknown", "malformed"],
)
def test_calls_without_a_valid_token_fail_and_the_server_keeps_serving(
    server: ServerProcess, metadata: tuple[tuple[str, str], ...]
) -> None:
    request = pb.ExecuteRequest(sql="SHOW DATABASES")
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.SqlStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Execute(request, metadata=metadata, timeout=30))
    call = _call(info.value)
    assert call.code() == grpc.StatusCode.UNAUTHENTICATED
    assert ("sqltopic-error", "AuthenticationFailed") in tuple(call.trailing_metadata() or ())
    with connect(server.address) as conn:
        assert conn.execute("SHOW DATABASES").columns


def test_logout_ends_the_token(server: ServerProcess) -> None:
    channel, token = _token(server.address)
    meta = (("authorization", f"Bearer {token}"),)
    request = pb.ExecuteRequest(sql="SHOW DATABASES")
    with channel:
        pb_grpc.SessionStub(channel).Logout(pb.LogoutRequest(), metadata=meta, timeout=30)
        stub = pb_grpc.SqlStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Execute(request, metadata=meta, timeout=30))
    assert _call(info.value).code() == grpc.StatusCode.UNAUTHENTICATED


def test_ddl_insert_select(live_power: Connection) -> None:
    inserted = live_power.execute(
        "INSERT INTO d1 USING meters TAGS ('California.SanFrancisco', 2) "
        "VALUES (1000, 10.5, 219, 0.25) (2000, 12.0, 231, 0.5)"
    )
    assert inserted.affected_rows == 2
    assert inserted.database == "power"
    result = live_power.execute("SELECT ts, voltage, location, groupid FROM meters ORDER BY ts")
    assert result.columns == ["ts", "voltage", "location", "groupid"]
    assert [row[1:] for row in result.rows] == [
        (219, "California.SanFrancisco", 2),
        (231, "California.SanFrancisco", 2),
    ]


def test_query_returns_an_arrow_table(live_power: Connection) -> None:
    live_power.execute("INSERT INTO d1 USING meters TAGS ('x', 1) VALUES (1000, 1.0, 220, 0.1)")
    table = live_power.query("SELECT voltage FROM meters")
    assert isinstance(table, pa.Table)
    assert table.to_pydict() == {"voltage": [220]}


def test_connect_with_a_database(server: ServerProcess, live_power: Connection) -> None:
    with connect(server.address, database="power") as other:
        assert other.execute("SELECT count(*) FROM meters").rows == [(0,)]


def test_write_through_the_super_table(live_power: Connection) -> None:
    assert live_power.write("meters", _meters(10_000)) == 10_000
    assert live_power.execute("SELECT count(*) FROM meters").rows == [(10_000,)]


def test_a_large_result_streams_in_chunks(server: ServerProcess, live_power: Connection) -> None:
    rows = 300_000
    assert live_power.write("power.meters", _meters(rows)) == rows
    channel, token = _token(server.address)
    with channel:
        meta = (("authorization", f"Bearer {token}"),)
        request = pb.ExecuteRequest(sql="SELECT * FROM meters", database="power")
        frames = list(pb_grpc.SqlStub(channel).Execute(request, metadata=meta, timeout=120))
    assert frames[0].header.row_count == -1  # streamed: not counted ahead
    assert all(frame.ByteSize() <= MAX_FRAME_BYTES for frame in frames)
    parts = [frame.arrow_ipc for frame in frames if frame.arrow_ipc]
    assert len(parts) > 1
    table = from_ipc(parts)
    assert table.num_rows == rows
    assert (
        table.column("voltage").to_pylist()
        == live_power.query("SELECT voltage FROM meters").column("voltage").to_pylist()
    )


def test_run_answers_a_small_result_in_one_message_and_refuses_a_large_one(
    server: ServerProcess, live_power: Connection
) -> None:
    channel, token = _token(server.address)
    with channel:
        meta = (("authorization", f"Bearer {token}"),)
        stub = pb_grpc.SqlStub(channel)
        insert = "INSERT INTO d1 USING meters TAGS ('a', 1) VALUES (1000, 1.5, 220, 0.5)"
        answer = stub.Run(pb.ExecuteRequest(sql=insert, database="power"), metadata=meta)
        assert answer.header.affected_rows == 1
        assert from_ipc([answer.arrow_ipc]).num_rows == 0
        query = pb.ExecuteRequest(sql="SELECT ts, voltage FROM meters", database="power")
        rows = stub.Run(query, metadata=meta)
        assert from_ipc([rows.arrow_ipc]).column("voltage").to_pylist() == [220]
        assert live_power.write("power.meters", _meters(300_000)) == 300_000
        with pytest.raises(grpc.RpcError) as info:
            stub.Run(pb.ExecuteRequest(sql="SELECT * FROM meters", database="power"),
                     metadata=meta, timeout=120)  # fmt: skip
        call = _call(info.value)
        assert call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert dict(call.trailing_metadata() or ())["sqltopic-error"] == "TooLarge"
        assert "run queries with Execute" in str(call.details())
        with pytest.raises(grpc.RpcError) as info:
            stub.Run(pb.ExecuteRequest(sql="INSERT INTO nowhere VALUES (1, 2)"), metadata=meta)
        assert _call(info.value).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_run_inserts_at_either_wal_level_and_with_table_creation(
    server: ServerProcess, live_power: Connection
) -> None:
    """A small INSERT runs on the server's event loop unless it would wait (an fsync at
    WAL_LEVEL 2, a table to create): each case is acknowledged and readable."""
    live_power.execute(
        "CREATE DATABASE safe VGROUPS 2 WAL_LEVEL 2; "
        "CREATE STABLE safe.m (ts TIMESTAMP, v INT) TAGS (n INT); "
        "CREATE TABLE power.d0 USING power.meters TAGS ('a', 1)"
    )
    statements = [
        "INSERT INTO power.d0 VALUES (1000, 1.5, 220, 0.5) (2000, 1.5, 221, 0.5)",
        "INSERT INTO safe.t1 USING safe.m TAGS (1) VALUES (1000, 7)",
        "INSERT INTO safe.t1 VALUES (2000, 8)",
        "INSERT INTO power.d9 USING power.meters TAGS ('b', 2) VALUES (3000, 1.5, 222, 0.5)",
    ]
    assert [live_power.execute(sql).affected_rows for sql in statements] == [2, 1, 1, 1]
    assert live_power.execute("SELECT v FROM safe.t1 ORDER BY ts").rows == [(7,), (8,)]
    got = live_power.execute("SELECT tbname, voltage FROM power.meters ORDER BY ts").rows
    assert got == [("d0", 220), ("d0", 221), ("d9", 222)]


@pytest.mark.parametrize(
    ("sql", "unary"),
    [
        ("INSERT INTO d1 VALUES (1, 2)", True),
        ("  insert into d1 values (1, 2);  ", True),
        ("INSERT INTO d1 VALUES (1, 2); INSERT INTO d2 VALUES (1, 2)", False),
        ("INSERT INTO d1 VALUES ('a;b')", False),
        ("SELECT * FROM d1", False),
        ("CREATE TABLE t (ts TIMESTAMP, v INT)", False),
    ],
)
def test_the_client_sends_inserts_alone_by_the_unary_call(sql: str, unary: bool) -> None:
    assert writes_only(sql) is unary


def test_sql_errors_keep_their_class_and_position(live_power: Connection) -> None:
    with pytest.raises(SqlSyntaxError) as syntax:
        live_power.execute("SELECT FROM WHERE")
    assert syntax.value.line == 1
    assert syntax.value.column is not None
    with pytest.raises(TopicNotFound, match="topic 't' does not exist") as missing:
        live_power.execute("DROP TOPIC t")
    assert (missing.value.line, missing.value.column) == (1, 1)
    with pytest.raises(InvalidTopicQuery) as invalid:
        live_power.execute("CREATE TOPIC bad AS SELECT DISTINCT voltage FROM meters")
    assert invalid.value.line is not None
    assert live_power.execute("SELECT count(*) FROM meters").rows == [(0,)]


def test_health_is_serving(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "sqltopic.v1.Session", "sqltopic.v1.Sql"):
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_a_second_server_on_the_same_directory_fails(server: ServerProcess) -> None:
    second = ServerProcess(server.data)
    try:
        code = second.proc.wait(timeout=START_DEADLINE_S)
        err = second.stderr()
    finally:
        second.kill()
    assert code != 0
    assert "is in use by another writer" in err
    with connect(server.address) as conn:
        assert conn.execute("SHOW DATABASES").columns


def test_sigterm_stops_cleanly_and_a_restart_keeps_the_data(data: Path) -> None:
    first = ServerProcess(data)
    try:
        first.wait_ready()
        with connect(first.address) as conn:
            conn.execute(POWER)
            conn.write("meters", _meters(1_000))
        assert first.stop() == 0
    finally:
        first.kill()
    again = ServerProcess(data)
    try:
        again.wait_ready()
        with connect(again.address, database="power") as conn:
            assert conn.execute("SELECT count(*) FROM meters").rows == [(1_000,)]
        assert again.stop() == 0
    finally:
        again.kill()


def test_an_oversized_request_is_refused_and_the_server_keeps_serving(
    live_power: Connection,
) -> None:
    huge = "SELECT 1 -- " + "x" * (64 << 20)
    with pytest.raises(Error, match="larger than max"):
        live_power.execute(huge)
    assert live_power.execute("SELECT count(*) FROM meters").rows == [(0,)]


def test_no_server_at_the_address_is_server_unavailable() -> None:
    with pytest.raises(ServerUnavailable):
        connect(f"127.0.0.1:{free_port()}", timeout=5)
