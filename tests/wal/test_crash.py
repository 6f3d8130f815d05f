"""SIGKILL a WAL_LEVEL 2 writer at random points: every acknowledged version survives.

A child process appends in a loop and prints each acknowledged version; the test kills
it with SIGKILL after a random number of acks, reopens the directory and checks every
entry, then lets the next child continue on the same directory.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sqltopic.wal import Wal, WalOptions
from sqltopic.wal.segment import scan
from tests.support import run_until_killed
from tests.wal.wal_child import payload

CHILD = Path(__file__).with_name("wal_child.py")
ROUNDS = 6
# A child that prints no ack this long after starting is stuck, not slow: fail.
ACK_DEADLINE_S = 60.0


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
        # a writer on `directory`, killed after a random number of acks
        args = [str(directory), "2", "loop"]
        acked = run_until_killed(CHILD, args, rng.randint(1, 120), ACK_DEADLINE_S)
        assert acked, "the writer acknowledged nothing"
        assert acked[0] > last, "versions were reused after recovery"
        all_acked += acked
        last = _check_directory(directory, all_acked)
        assert last >= acked[-1]
