"""A WAL writer process for crash tests: appends, reports acks, dies when told.

    python wal_child.py DIR LEVEL exit COUNT [SEGMENT_KB] [GROUP]
        COUNT appends of GROUP entries each (default 1), then os._exit
    python wal_child.py DIR LEVEL loop                      append forever, printing "ack V"

Entry bodies derive from their version (see `payload`), so a reader can check that a
recovered entry is exactly what was acknowledged.
"""

from __future__ import annotations

import os
import sys

import pyarrow as pa

from sqltopic.wal import Wal, WalOptions, data_entry


def payload(version: int) -> pa.RecordBatch:
    """Rows whose size varies with the version, so kills land at every kind of offset."""
    rows = 1 + (version * 7919) % 300
    return pa.record_batch(
        {
            "version": pa.array([version] * rows, pa.int64()),
            "text": pa.array([f"v{version}-{i}" for i in range(rows)], pa.string()),
        }
    )


def main() -> None:
    directory, level, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    segment_kb = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    opts = WalOptions(level=1 if level == 1 else 2, segment_size_kb=segment_kb)
    wal = Wal.open(directory, opts, background=False)
    if mode == "exit":
        group = int(sys.argv[6]) if len(sys.argv) > 6 else 1
        for _ in range(int(sys.argv[4])):
            first = wal.next_version
            wal.append([data_entry(payload(first + k)) for k in range(group)])
        os._exit(0)  # a crash: no close, no final sync of metadata
    while True:
        (version,) = wal.append([data_entry(payload(wal.next_version))])
        sys.stdout.write(f"ack {version}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
