"""The `sqltopic` command line. It sits on top of every other layer.

Until the server lands, `sqltopic demo-wal` shows the vnode WAL at work: a producer
appends smart-meter rows while a follower reads them back as they become durable.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from sqltopic.errors import Error
from sqltopic.wal import Wal, WalOptions, data_entry

# How long the follower waits for a new version before checking whether the producer
# has finished: short enough to exit promptly, long enough not to spin.
FOLLOW_WAIT_S = 0.2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqltopic", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo-wal", help="append meter rows to a WAL and follow them")
    demo.add_argument("--data", default="./sqltopic-data", help="data directory")
    demo.add_argument("--batches", type=int, default=20, help="batches to append")
    demo.add_argument("--rows", type=int, default=10_000, help="rows per batch")
    demo.add_argument("--level", type=int, choices=(1, 2), default=2, help="WAL_LEVEL")
    args = parser.parse_args(argv)
    try:
        return demo_wal(Path(args.data), args.batches, args.rows, args.level)
    except Error as exc:
        print(f"sqltopic: {exc}", file=sys.stderr)
        return 1


def demo_wal(data: Path, batches: int, rows: int, level: int) -> int:
    wal_dir = data / "demo" / "vnode1" / "wal"
    with Wal.open(wal_dir, WalOptions(level=1 if level == 1 else 2)) as wal:
        start = wal.next_version
        print(f"WAL {wal_dir}: versions {wal.first_version}..{wal.last_version} retained")
        done = threading.Event()
        follower = threading.Thread(target=_follow, args=(wal, start, done), daemon=True)
        follower.start()
        began = time.perf_counter()
        for i in range(batches):
            wal.append([data_entry(_meters(i, rows))])
        elapsed = time.perf_counter() - began
        done.set()
        follower.join()
        total = batches * rows
        print(
            f"appended {total:,} rows in {batches} entries at WAL_LEVEL {level}: "
            f"{total / elapsed:,.0f} rows/s; WAL now ends at version {wal.last_version}"
        )
    return 0


def _follow(wal: Wal, position: int, done: threading.Event) -> None:
    reader = wal.reader()
    while True:
        batch = reader.read(position)
        for rec in batch:
            b = rec.arrow()
            volts = b.column("voltage")
            print(
                f"  read version {rec.version}: {b.num_rows} rows, first voltage "
                f"{volts[0].as_py()} V, ingest at {rec.ingest_us} us"
            )
        if batch:
            position = batch[-1].version + 1
        elif done.is_set() and position >= wal.next_version:
            return
        else:
            reader.wait_for(position, FOLLOW_WAIT_S)


def _meters(batch: int, rows: int) -> pa.RecordBatch:
    base = int(time.time() * 1000)
    ts = pa.array([base + i for i in range(rows)], pa.timestamp("ms"))
    current = pa.array([10.0 + (i % 7) / 10 for i in range(rows)], pa.float32())
    voltage = pa.array([215 + (batch + i) % 10 for i in range(rows)], pa.int32())
    phase = pa.array([0.3 + (i % 5) / 100 for i in range(rows)], pa.float32())
    return pa.RecordBatch.from_arrays(
        [ts, current, voltage, phase], names=["ts", "current", "voltage", "phase"]
    )


if __name__ == "__main__":
    sys.exit(main())
