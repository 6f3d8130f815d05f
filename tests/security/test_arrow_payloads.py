"""Hostile Arrow payloads over the wire: damaged offsets, invalid UTF-8, wrong framing,
compression, oversized calls and random damage (hypothesis). The server stays up, every
refusal is a clear error that writes nothing, and every row it acknowledged reads back:
by SELECT and by a consumer from `earliest`."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import grpc
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from tests.client.support import config, drain
from tests.live_server import POWER, ServerProcess
from tests.security.hostile import CALL_TIMEOUT_S, refusal
from tests.support import ipc_stream

# Status codes a bad payload may get: each is a clear sqltopic error of the client's.
CLIENT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
ROWS = pa.table(
    {
        "tbname": ["d1", "d2", "d1"],
        "ts": pa.array(
            [1_538_548_685_000, 1_538_548_686_000, 1_538_548_687_000], pa.timestamp("ms")
        ),
        "current": pa.array([10.5, 11.0, 12.5], pa.float32()),
        "voltage": pa.array([220, 221, 222], pa.int32()),
        "location": ["California.SanFrancisco", "California.LosAngeles", "x"],
    }
)


class Writer:
    """Raw Write calls of a root session."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        token = pb_grpc.SessionStub(self.channel).Login(
            pb.LoginRequest(user="root", password="taosdata"), timeout=CALL_TIMEOUT_S
        )
        self.md = (("authorization", f"Bearer {token.token}"),)
        self.stub = pb_grpc.SqlStub(self.channel)

    def write(self, target: str, *chunks: bytes) -> int:
        frames = [pb.WriteRequest(target=target), *(pb.WriteRequest(arrow_ipc=c) for c in chunks)]
        answer = self.stub.Write(iter(frames), metadata=self.md, timeout=CALL_TIMEOUT_S)
        return int(answer.rows)


@pytest.fixture
def power(conn: Connection) -> Connection:
    conn.execute(POWER)
    conn.execute("CREATE TABLE power.notes (ts TIMESTAMP, msg VARCHAR(100))")
    return conn


@pytest.fixture
def writer(server: ServerProcess, power: Connection) -> Iterator[Writer]:
    w = Writer(server.address)
    yield w
    w.channel.close()


def attempt(call: Callable[[], int]) -> tuple[int, grpc.StatusCode | None, str]:
    """Rows a write acknowledged, or 0 with its status code and message."""
    try:
        return call(), None, ""
    except grpc.RpcError as exc:
        status = cast("grpc.Call", exc)
        return 0, status.code(), status.details() or ""


def count(conn: Connection, table: str = "power.meters") -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table}").rows[0][0])


def with_offsets(offsets: tuple[int, ...], data: bytes = b"abcdef") -> bytes:
    """A payload for power.notes whose `msg` offsets and bytes are replaced."""
    good = ipc_stream(
        pa.table({"ts": pa.array([1, 2, 3], pa.timestamp("ms")), "msg": ["ab", "cd", "ef"]})
    )
    at, body = good.find(struct.pack("<4i", 0, 2, 4, 6)), good.find(b"abcdef")
    out = bytearray(good)
    out[at : at + 16] = struct.pack("<4i", *offsets)
    out[body : body + 6] = data
    return bytes(out)


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (with_offsets((0, 2, 4, 1 << 30)), "column 'msg' holds invalid Arrow data"),
        (with_offsets((0, 2, 4, 7000)), "column 'msg' holds invalid Arrow data"),
        (with_offsets((0, 4, 2, 6)), "column 'msg' holds invalid Arrow data"),
        (with_offsets((0, 2, 4, 6), b"a\xc3(def"), "column 'msg' holds invalid Arrow data"),
        (ipc_stream(ROWS)[:-40], "ends inside a message"),
        (b"garbage!" * 10, "continuation marker"),
    ],
)
def test_damaged_payloads_are_refused_and_write_nothing(
    writer: Writer, power: Connection, payload: bytes, says: str
) -> None:
    writer.write(
        "power.notes",
        ipc_stream(pa.table({"ts": pa.array([5], pa.timestamp("ms")), "msg": ["kept"]})),
    )
    code, error, message = refusal(lambda: writer.write("power.notes", payload))
    assert (code, error) == (grpc.StatusCode.INVALID_ARGUMENT, "InvalidValueError")
    assert says in message
    assert power.execute("SELECT msg FROM power.notes").rows == [("kept",)]


def test_compressed_payloads_are_refused(writer: Writer, power: Connection) -> None:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, ROWS.schema, options=options) as w:
        w.write_table(ROWS)
    code, _, message = refusal(lambda: writer.write("power.meters", sink.getvalue().to_pybytes()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "compressed Arrow IPC bodies" in message
    assert count(power) == 0


def test_a_nested_column_is_refused_naming_it(writer: Writer, power: Connection) -> None:
    bad = ROWS.append_column("voltage2", pa.array([[1], [2], [3]]))
    code, _, message = refusal(lambda: writer.write("power.meters", ipc_stream(bad)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "column 'voltage2' has Arrow type list<item: int64>" in message
    assert count(power) == 0


def test_a_payload_split_anywhere_into_frames_is_written(writer: Writer, power: Connection) -> None:
    data = ipc_stream(ROWS)
    assert writer.write("power.meters", *(data[i : i + 5] for i in range(0, len(data), 5))) == 3
    assert count(power) == 3


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(
        st.tuples(st.integers(0, len(ipc_stream(ROWS)) - 1), st.integers(1, 255)),
        min_size=1,
        max_size=4,
    )
)
def test_random_damage_never_stores_what_cannot_be_read(
    server: ServerProcess, flips: list[tuple[int, int]]
) -> None:
    """Flipped bytes anywhere in a valid payload: each write is acknowledged or refused
    with a client error; afterwards the server answers, and the acknowledged rows read
    back whole, by SELECT (as Arrow) and by a consumer."""
    with connect(server.address) as conn:
        conn.execute("CREATE DATABASE IF NOT EXISTS fz VGROUPS 2")
        conn.execute(
            "CREATE STABLE IF NOT EXISTS fz.meters (ts TIMESTAMP, current FLOAT, voltage INT) "
            "TAGS (location VARCHAR(64))"
        )
        before = count(conn, "fz.meters")
        data = bytearray(ipc_stream(ROWS.drop_columns([])))
        for at, xor in flips:
            data[at] ^= xor
        w = Writer(server.address)
        try:
            written, code, message = attempt(lambda: w.write("fz.meters", bytes(data)))
        finally:
            w.channel.close()
        assert code is None or code in CLIENT_CODES, message
        assert count(conn, "fz.meters") == before + written
        table = conn.query("SELECT * FROM fz.meters")
        table.validate(full=True)
        assert table.num_rows == before + written


def test_every_acknowledged_row_is_consumed_after_damage(
    writer: Writer, server: ServerProcess, power: Connection
) -> None:
    """Damage at every byte of the payload, one at a time: what the server acknowledged
    a consumer of the super table receives, and nothing else."""
    data = ipc_stream(ROWS)
    acknowledged = 0
    for at in range(len(data)):
        bad = bytearray(data)
        bad[at] ^= 0x5A
        written, code, why = attempt(lambda b=bytes(bad): writer.write("power.meters", b))  # type: ignore[misc]
        assert code is None or code in CLIENT_CODES, why
        acknowledged += written
    assert count(power) == acknowledged
    power.execute("CREATE TOPIC everything AS STABLE power.meters")
    with Consumer(config(server.address, "g")) as consumer:
        consumer.subscribe(["everything"])
        messages = drain(consumer)
    assert sum(m.row_count for m in messages) == acknowledged
    for message in messages:
        message.to_arrow().validate(full=True)


def test_a_call_over_the_write_limit_is_refused_as_it_arrives(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", extra=("--max-write-bytes", "1MiB"))
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(POWER)
            writer = Writer(proc.address)
            pulled = 0
            gate = threading.Event()
            data = ipc_stream(ROWS)
            n = 200_000  # ~25 MiB of Arrow, were it all sent
            big = pa.table(
                {
                    "tbname": ["d1"] * n,
                    "ts": pa.array(range(n), pa.timestamp("ms")),
                    "location": ["x" * 100] * n,
                }
            )
            chunk = 64 * 1024
            whole = ipc_stream(big)
            parts = len(range(0, len(whole), chunk))

            def frames() -> Iterator[pb.WriteRequest]:
                nonlocal pulled
                yield pb.WriteRequest(target="power.meters")
                for start in range(0, len(whole), chunk):
                    pulled += 1
                    yield pb.WriteRequest(arrow_ipc=whole[start : start + chunk])
                gate.set()

            with pytest.raises(grpc.RpcError) as refused:
                writer.stub.Write(frames(), metadata=writer.md, timeout=CALL_TIMEOUT_S)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "more than 1048576 bytes of Arrow in one call" in str(refused.value.details())
            assert not gate.is_set()  # refused before the client had sent it all
            assert pulled < parts
            assert count(conn) == 0
            assert writer.write("power.meters", data) == 3  # a call within the limit
            writer.channel.close()
    finally:
        proc.kill()


@pytest.mark.crash
def test_a_sigkill_during_a_refused_write_leaves_the_wal_as_it_was(tmp_path: Path) -> None:
    """A write refused for its size, and one cut off mid-stream, then kill -9: after the
    restart the table holds exactly the rows acknowledged before."""
    proc = ServerProcess(tmp_path / "data", extra=("--max-write-bytes", "1MiB"))
    proc.wait_ready()
    try:
        with connect(proc.address) as conn:
            conn.execute(POWER)
        writer = Writer(proc.address)
        assert writer.write("power.meters", ipc_stream(ROWS)) == 3
        n = 50_000
        big = ipc_stream(
            pa.table({"tbname": ["d9"] * n, "ts": pa.array(range(n), pa.timestamp("ms")),
                      "location": ["y" * 100] * n})
        )  # fmt: skip
        code, _, _ = refusal(lambda: writer.write("power.meters", big[: 1 << 19], big[1 << 19 :]))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        sent = threading.Event()
        hold = threading.Event()

        def frames() -> Iterator[pb.WriteRequest]:
            yield pb.WriteRequest(target="power.meters", arrow_ipc=big[:100_000])
            sent.set()
            hold.wait(timeout=60)  # the server is killed meanwhile

        call = writer.stub.Write.future(frames(), metadata=writer.md, timeout=CALL_TIMEOUT_S)
        assert sent.wait(timeout=30)
        proc.kill()
        hold.set()
        with pytest.raises(grpc.RpcError):
            call.result()
        writer.channel.close()
        proc = ServerProcess(proc.data, extra=("--max-write-bytes", "1MiB"))
        proc.wait_ready()
        with connect(proc.address) as conn:
            assert conn.execute("SELECT tbname, voltage FROM power.meters ORDER BY ts").rows == [
                ("d1", 220), ("d2", 221), ("d1", 222)
            ]  # fmt: skip
    finally:
        proc.kill()


def test_a_duplicate_column_name_is_a_clear_error(writer: Writer, power: Connection) -> None:
    twice = pa.table(
        [pa.array([1], pa.timestamp("ms")), pa.array(["a"]), pa.array(["b"])],
        names=["ts", "msg", "msg"],
    )
    code, _, message = refusal(lambda: writer.write("power.notes", ipc_stream(twice)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "column msg is given twice" in message
    assert count(power, "power.notes") == 0


def test_a_write_without_arrow_bytes_says_so(writer: Writer, power: Connection) -> None:
    code, _, message = refusal(lambda: writer.write("power.meters", b""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "Write to 'power.meters': no Arrow bytes; send the rows as an Arrow IPC" in message
    assert count(power) == 0
