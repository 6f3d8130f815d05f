"""Wide Arrow writes (issue 14, point 5): 1,000-row writes through the super table over
1,000 existing children (one row each, what a gateway sends) against the same rows over
10 children; and 1,000-row writes creating 1,000 new children each (tag columns given).

Default: the embedded engine, rows/s and CPU µs per row of `Engine.write`. `--server`:
a server process (`python -m sqltopic.server`) written to back to back by one client
through `sqltopic.connect(...).write(...)`: rows/s the client sees, and the server's
CPU µs per row (from /proc). `--profile` runs cProfile over one engine-level case.

`python bench/wide_bench.py [--writes N] [--server] [--profile {wide,narrow,create}]`
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from sqltopic.client import connect
from sqltopic.server.core.engine import Engine

# Rows per write, as the issue measures them.
ROWS = 1_000
# Child tables created beforehand (the wide case names each once per write).
CHILDREN = 1_000
VGROUPS = 4
START_MS = 1_538_548_685_000


def batch(tables: int, step: int, prefix: str = "d", tags: bool = False) -> pa.Table:
    """ROWS rows over `tables` children, rows of one child not contiguous (a gateway's
    readings arrive device after device)."""
    names = [f"{prefix}{i % tables}" for i in range(ROWS)]
    ts = [START_MS + step * ROWS + i for i in range(ROWS)]
    cols: dict[str, pa.Array] = {
        "tbname": pa.array(names),
        "ts": pa.array(ts, pa.timestamp("ms")),
        "current": pa.array([float(i % 17) for i in range(ROWS)], pa.float32()),
        "voltage": pa.array([200 + i % 100 for i in range(ROWS)], pa.int32()),
        "phase": pa.array([0.5] * ROWS, pa.float32()),
    }
    if tags:
        cols["location"] = pa.array([f"loc{i % 10}" for i in range(ROWS)])
        cols["groupid"] = pa.array([i % 10 for i in range(ROWS)], pa.int32())
    return pa.table(cols)


# Seconds a server process may take to start (it prints its ready line).
START_DEADLINE_S = 60.0
READY = "sqltopic server listening on"


def setup(execute: Callable[[str], object]) -> None:
    execute(f"CREATE DATABASE w VGROUPS {VGROUPS}")
    execute(
        "CREATE STABLE w.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
        "TAGS (location BINARY(64), groupid INT)"
    )
    execute(
        "; ".join(
            f"CREATE TABLE w.d{i} USING w.meters TAGS ('loc{i % 10}', {i % 10})"
            for i in range(CHILDREN)
        )
    )


def measure(
    write: Callable[[str, pa.Table], int], cpu: Callable[[], float], tables: int, writes: int,
    create: bool = False,
) -> dict[str, float]:  # fmt: skip
    """Rows/s of `writes` back-to-back writes, and CPU µs per row by `cpu()`."""
    data = [
        batch(tables, s, prefix=f"n{s}_" if create else "d", tags=create) for s in range(writes)
    ]
    write("w.meters", data[0] if not create else batch(tables, -1, "warm", True))
    cpu0, wall0 = cpu(), time.perf_counter()
    written = sum(write("w.meters", d) for d in data)
    spent, wall = cpu() - cpu0, time.perf_counter() - wall0
    rows = ROWS * writes
    if written != rows:
        raise RuntimeError(f"wrote {written} rows of {rows}")
    return {"rows_s": round(rows / wall), "cpu_us_per_row": round(spent / rows * 1e6, 3)}


def cases(
    write: Callable[[str, pa.Table], int], cpu: Callable[[], float], writes: int
) -> dict[str, dict[str, float]]:
    return {
        "wide_1000": measure(write, cpu, CHILDREN, writes),
        "narrow_10": measure(write, cpu, 10, writes),
        "create_1000": measure(write, cpu, CHILDREN, max(1, writes // 20), create=True),
    }


def process_cpu(pid: int) -> Callable[[], float]:
    """CPU seconds (user + system) of process `pid` so far, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return read


def run_server(data_dir: Path, writes: int) -> dict[str, dict[str, float]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [sys.executable, "-m", "sqltopic.server", "--data", str(data_dir)]
    proc = subprocess.Popen([*args, "--port", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_DEADLINE_S
        while not proc.stdout.readline().startswith(READY):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
        with connect(f"127.0.0.1:{port}") as conn:
            setup(conn.execute)
            return cases(conn.write, process_cpu(proc.pid), writes)
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--server", action="store_true")
    ap.add_argument("--profile", choices=["wide", "narrow", "create"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.server:
            print(json.dumps(run_server(Path(tmp) / "data", args.writes)))
            return 0
        with Engine(Path(tmp) / "data") as engine:
            setup(engine.execute)
            if args.profile:
                tables = 10 if args.profile == "narrow" else CHILDREN
                prof = cProfile.Profile()
                prof.enable()
                measure(engine.write, time.process_time, tables, args.writes,
                        create=args.profile == "create")  # fmt: skip
                prof.disable()
                pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(40)
                return 0
            print(json.dumps(cases(engine.write, time.process_time, args.writes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
