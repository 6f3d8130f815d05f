"""Acknowledged offset commits survive SIGKILL while many threads commit at once (group
commit): a child commits and prints each acknowledged commit, the test kills it
mid-stream, reopens the store and finds every acknowledged offset (or a later one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqltopic.server.offsets import OffsetStore
from tests.server.offsets_child import THREADS
from tests.support import run_until_killed

CHILD = Path(__file__).with_name("offsets_child.py")
# The child starts (imports, opens the store) and acknowledges within this.
CHILD_DEADLINE_S = 30.0
# Acknowledged commits to read before each kill: a few hundred, well under a second.
ACKS_PER_RUN = 300


@pytest.mark.crash
def test_acknowledged_commits_survive_sigkill(tmp_path: Path) -> None:
    start = 1
    for _ in range(2):  # the second child reopens the store the first one was killed on
        acked: dict[str, int] = {}
        for n in run_until_killed(
            CHILD, [str(tmp_path), str(start)], ACKS_PER_RUN, CHILD_DEADLINE_S
        ):
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
