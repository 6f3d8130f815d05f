"""Each limit of ad hoc queries exceeded against a real server with a small setting: the
result's Arrow bytes (--max-result-bytes), DuckDB's memory (--query-memory-bytes) and
the query's time (--query-timeout-ms); and a client whose deadline passes, whose query
the server interrupts. After each, the server answers and nothing changed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pyarrow as pa
import pytest

from sqltopic import errors as e
from sqltopic.client import Connection, connect
from sqltopic.proto.arrow_ipc import MAX_FRAME_BYTES
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.live_server import POWER, ServerProcess
from tests.security.hostile import CALL_TIMEOUT_S, UserWire, refusal

# Rows of `meters`: its cross join with itself (2.25 million rows, ~36 MB of two
# timestamps) passes the small limits below; a join of four copies never ends.
ROWS = 1_500
# Four copies of `meters` joined: 5e12 rows to count, a query that only a limit stops.
ENDLESS = (
    "SELECT count(*) FROM meters a, meters b, meters c, meters d "
    "WHERE a.voltage + b.voltage + c.voltage + d.voltage = -1"
)
# The server's log line once an interrupted query has returned (its worker free).
FREED = "ad hoc query interrupted, its worker free: its call ended first"
# How long the server may take to log it; waiting longer means it never will.
LOG_DEADLINE_S = 60.0
# How often the log is looked at meanwhile.
LOG_POLL_S = 0.05


def meters(rows: int) -> pa.Table:
    return pa.table({
        "tbname": [f"d{i % 10}" for i in range(rows)],
        "location": [f"California.City{i % 10}" for i in range(rows)],
        "groupid": pa.array([i % 10 for i in range(rows)], pa.int32()),
        "ts": pa.array(range(1_000, 1_000 + rows), pa.timestamp("ms")),
        "current": pa.array([10.5] * rows, pa.float32()),
        "voltage": pa.array([200 + i % 100 for i in range(rows)], pa.int32()),
        "phase": pa.array([0.25] * rows, pa.float32()),
    })  # fmt: skip


@contextmanager
def served(data: Path, *options: str) -> Iterator[tuple[ServerProcess, Connection]]:
    """A server with `options`, `meters` holding ROWS rows, and a connection to it."""
    proc = ServerProcess(data, extra=options)
    try:
        proc.wait_ready()
        with connect(proc.address, database=None) as conn:
            conn.execute(POWER)
            assert conn.write("power.meters", meters(ROWS)) == ROWS
            yield proc, conn
    finally:
        proc.kill()


def unchanged(conn: Connection) -> None:
    """The server answers, and the data is what it was."""
    assert conn.execute("SELECT count(*), sum(voltage) FROM power.meters").rows == [
        (ROWS, sum(200 + i % 100 for i in range(ROWS)))
    ]


def test_a_result_over_max_result_bytes_ends_its_stream_with_too_large(data: Path) -> None:
    with served(data, "--max-result-bytes", "4MiB") as (proc, conn):
        sql = "SELECT a.ts, b.ts AS ts2 FROM power.meters a, power.meters b"
        frames: list[pb.ExecuteResponse] = []
        with UserWire(proc.address) as wire:
            request = pb.ExecuteRequest(sql=sql)
            stream = wire.sql.Execute(request, metadata=wire.md, timeout=CALL_TIMEOUT_S)
            code, error, message = refusal(lambda: frames.extend(stream))
        assert (code, error) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "TooLarge")
        assert "--max-result-bytes (4 MiB" in message
        assert frames[0].header.row_count == -1  # streamed: rows not counted ahead
        assert list(frames[0].header.columns) == ["ts", "ts2"]
        sent = sum(len(f.arrow_ipc) for f in frames)
        assert 0 < sent <= 4 * 1024 * 1024 + 64 * 1024  # batches up to the cap, stayed sent
        assert all(f.ByteSize() <= MAX_FRAME_BYTES for f in frames)
        with pytest.raises(e.TooLarge, match="--max-result-bytes"):
            conn.execute(sql)
        unchanged(conn)
        assert len(conn.execute("SELECT ts FROM power.meters LIMIT 3").rows) == 3


def test_a_query_over_query_memory_bytes_fails_with_too_large(data: Path) -> None:
    with served(data, "--query-memory-bytes", "32MiB") as (_, conn):
        sorted_join = (
            "SELECT a.ts, b.ts AS ts2, a.location FROM power.meters a, power.meters b "
            "ORDER BY b.voltage, a.location, b.ts DESC"
        )
        with pytest.raises(e.TooLarge, match="--query-memory-bytes") as info:
            conn.execute(sorted_join)
        assert "32 MiB" in str(info.value)
        unchanged(conn)
        assert conn.execute("SELECT count(*) FROM power.meters a, power.meters b").rows == [
            (ROWS * ROWS,)
        ]


def test_a_query_past_query_timeout_ms_is_interrupted(data: Path) -> None:
    with served(data, "--query-timeout-ms", "300") as (proc, conn):
        with pytest.raises(e.QueryTimeout, match=r"--query-timeout-ms \(300 ms\)"):
            conn.execute(f"USE power; {ENDLESS}")
        with UserWire(proc.address) as wire:
            request = pb.ExecuteRequest(sql=ENDLESS, database="power")
            code, error, _ = refusal(
                lambda: list(wire.sql.Execute(request, metadata=wire.md, timeout=CALL_TIMEOUT_S))
            )
        assert (code, error) == (grpc.StatusCode.DEADLINE_EXCEEDED, "QueryTimeout")
        unchanged(conn)


def test_a_query_whose_client_deadline_passed_is_interrupted(data: Path) -> None:
    """The client gives up (its deadline passes) while DuckDB counts: the server
    interrupts the query at once, long before its own time limit, and logs it once the
    query's worker is free."""
    with served(data, "--query-timeout-ms", "3600000") as (proc, conn):
        with UserWire(proc.address) as wire:
            request = pb.ExecuteRequest(sql=ENDLESS, database="power")
            code, _, _ = refusal(
                lambda: list(wire.sql.Execute(request, metadata=wire.md, timeout=2.0))
            )
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        _wait_for_log(proc, FREED)
        unchanged(conn)


def _wait_for_log(proc: ServerProcess, text: str) -> None:
    """Wait until the server's log (stderr, read as it comes) holds `text`."""
    deadline = time.monotonic() + LOG_DEADLINE_S
    while text not in proc.stderr():
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line {text!r}; the log has:\n{proc.stderr()}")
        time.sleep(LOG_POLL_S)
