"""SIGKILL a WAL_LEVEL 2 writer at random points: every acknowledged version survives.

A child process appends in a loop and prints each acknowledged version; the test kills
it with SIGKILL after a random number of acks, reopens the directory and checks every
entry, then lets the next child continue on the same directory.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqltopic.wal import Wal, WalOptions
from sqltopic.wal.segment import scan
from tests.wal.wal_child import payload

CHILD = Path(__file__).with_name("wal_child.py")
ROUNDS = 6
# A child that prints no ack this long after starting is stuck, not slow: fail.
ACK_DEADLINE_S = 60.0


def _run_until_killed(directory: Path, acks_wanted: int) -> list[int]:
    """Start a writer, read `acks_wanted` acks, SIGKILL it; returns the acked versions."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), "2", "loop"],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: list[int] = []
    deadline = time.monotonic() + ACK_DEADLINE_S
    try:
        assert proc.stdout is not None
        while len(acked) < acks_wanted:
            line = proc.stdout.readline()
            assert line, f"writer exited early with {proc.poll()}"
            acked.append(int(line.split()[1]))
            assert time.monotonic() < deadline, "writer stopped acknowledging"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            # acks still in the pipe were acknowledged before the kill too
            acked += [int(line.split()[1]) for line in proc.stdout.read().splitlines()]
            proc.stdout.close()
    return acked


def _check_directory(directory: Path, acked: list[int]) -> int:
    """Reopen; every acked version must read back intact. Returns the last version."""
    with Wal.open(directory, WalOptions(level=2, segment_size_kb=256), background=False) as wal:
        reader = wal.reader()
        versions = []
        for batch in reader.batches(0, max_entries=500):
            for rec in batch:
                assert rec.arrow().equals(payload(rec.version)), f"version {rec.version} differs"
                versions.append(rec.version)
        assert versions == list(range(1, len(versions) + 1)), "versions must be gap-free here"
        missing = set(acked) - set(versions)
        assert not missing, f"acknowledged versions lost: {sorted(missing)[:10]}"
        last_seg = wal.state().segments[-1]
        # nothing after the last valid record survives the reopen
        result = scan(memoryview(last_seg.log_path.read_bytes()), last_seg.first_version - 1)
        assert result.bad_offset is None
        assert result.valid_end == last_seg.log_path.stat().st_size
        return wal.last_version


@pytest.mark.crash
def test_sigkill_never_loses_acknowledged_versions(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    directory = tmp_path / "wal"
    all_acked: list[int] = []
    last = 0
    for _ in range(ROUNDS):
        acked = _run_until_killed(directory, rng.randint(1, 120))
        assert acked, "the writer acknowledged nothing"
        assert acked[0] > last, "versions were reused after recovery"
        all_acked += acked
        last = _check_directory(directory, all_acked)
        assert last >= acked[-1]
