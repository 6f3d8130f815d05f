"""Acknowledged offset commits survive SIGKILL while many threads commit at once (group
commit): a child commits and prints each acknowledged commit, the test kills it
mid-stream, reopens the store and finds every acknowledged offset (or the one after)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sqltopic.server.vnode.offsets import OffsetStore
from tests.server.offsets_child import THREADS

CHILD = Path(__file__).with_name("offsets_child.py")
# The child starts (imports, opens the store) and acknowledges within this.
CHILD_DEADLINE_S = 30.0
# Acknowledged commits to read before each kill: a few hundred, well under a second.
ACKS_PER_RUN = 300


def _acks_until_killed(directory: Path, start: int) -> list[int]:
    """Run the child, read ACKS_PER_RUN acks, SIGKILL it; every N it acknowledged, those
    still in the pipe at the kill included. The pipe is read raw (os.read), so no ack
    waits unseen in a reader's buffer: the checks below bound offsets from above too."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + CHILD_DEADLINE_S
    try:
        while data.count(b"\n") < ACKS_PER_RUN:
            ready, _, _ = select.select([out], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the child stopped acknowledging"
            chunk = os.read(out, 1 << 16)
            assert chunk, f"the child exited early ({proc.wait()})"
            data += chunk
    finally:
        proc.kill()
        while chunk := os.read(out, 1 << 16):  # EOF once the killed child's end closes
            data += chunk
        _, err = proc.communicate(timeout=CHILD_DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL, err
    return [int(line.split()[1]) for line in data.decode().splitlines()]


@pytest.mark.crash
def test_acknowledged_commits_survive_sigkill(tmp_path: Path) -> None:
    start = 1
    for _ in range(2):  # the second child reopens the store the first one was killed on
        acked: dict[str, int] = {}
        for n in _acks_until_killed(tmp_path, start):
            group, offset = f"g{n % THREADS}", n // THREADS
            acked[group] = max(acked.get(group, 0), offset)
        store = OffsetStore.open(tmp_path)
        try:
            stored = {topic: store.groups(topic) for topic in ("t", "u")}
        finally:
            store.close()
        assert len(acked) == THREADS, "every thread acknowledged commits"
        for group, offset in acked.items():
            # At or past the acknowledged offset, and at most the one commit in flight
            # beyond it; both rows of a commit are there (one transaction).
            assert offset <= stored["t"][group] <= offset + 1, (group, offset, stored)
            assert stored["u"][group] == stored["t"][group], (group, stored)
        start = max(stored["t"].values()) + 1
