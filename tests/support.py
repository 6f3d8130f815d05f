"""Helpers shared by the WAL, engine and security tests: killing a writing child process
at a chosen point, filling a WAL with meters entries, and Arrow IPC streams as a client
writes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from sqltopic.wal import Wal, data_entry


def run_until_killed(
    script: Path, args: list[str], acks_wanted: int, deadline_s: float
) -> list[int]:
    """Run `script` with `args` in a child that prints "ack N" once each write is
    acknowledged; read `acks_wanted` acks and SIGKILL it. Returns every acknowledged N,
    those still in the pipe at the kill included (they were acknowledged before it). The
    child must ack within `deadline_s` of starting, and die of the kill."""
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[int] = []
    deadline = time.monotonic() + deadline_s
    try:
        assert proc.stdout is not None
        while len(acked) < acks_wanted:
            line = proc.stdout.readline()
            assert line, f"the child exited early ({proc.poll()})"
            acked.append(int(line.split()[1]))
            assert time.monotonic() < deadline, "the child stopped acknowledging"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=deadline_s)
        assert proc.returncode == -signal.SIGKILL, err
    return acked + [int(line.split()[1]) for line in rest.splitlines()]


def append_meters(
    wal: Wal, meters: Callable[..., pa.RecordBatch], count: int, rows: int = 20
) -> None:
    """`count` appends of one entry each: `rows` meters rows, numbered on from the last's."""
    for i in range(count):
        wal.append([data_entry(meters(rows, start=i * rows))])


def ipc_stream(table: pa.Table, batch_rows: int | None = None, **options: object) -> bytes:
    """`table` as the Arrow IPC stream a client's Write sends: in batches of at most
    `batch_rows` rows (one per chunk of `table` by default), with writer `options`."""
    sink = pa.BufferOutputStream()
    write_options = pa.ipc.IpcWriteOptions(**options)
    with pa.ipc.new_stream(sink, table.schema, options=write_options) as writer:
        for batch in table.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def meters_rows(first: int, count: int, table: str = "d1") -> pa.Table:
    """`count` rows for child `table` of the tests' power.meters (tbname and tags
    included, for Connection.write to the super table), ts from `first` ms."""
    return pa.table({
        "tbname": [table] * count,
        "location": [f"loc-{table}"] * count,
        "groupid": pa.array([1] * count, pa.int32()),
        "ts": pa.array(range(first, first + count), pa.timestamp("ms")),
        "current": pa.array([1.5] * count, pa.float32()),
        "voltage": pa.array([200 + i % 40 for i in range(first, first + count)], pa.int32()),
        "phase": pa.array([0.5] * count, pa.float32()),
    })  # fmt: skip
