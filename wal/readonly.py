"""Reading a WAL directory without writing to it (Spark tasks, offline tools).

No lock is taken and nothing is repaired: a torn tail, or a tail that a live writer is
still appending, simply ends the view. The view is a snapshot of the directory at open.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqltopic.errors import WalSegmentMissing
from sqltopic.wal.meta import load_meta
from sqltopic.wal.notify import VersionNotifier
from sqltopic.wal.options import INITIAL_VERSION, wall_clock_us
from sqltopic.wal.reader import WalReader, WalState
from sqltopic.wal.recovery import Recovered, recover


def open_readonly(directory: str | os.PathLike[str]) -> WalReader:
    """A reader over the WAL in `directory` as it is now."""
    path = Path(directory)
    rec = _recover(path)
    segs = tuple(rec.segments)
    last = segs[-1].last_version if segs else rec.next_version - 1
    nxt = last + 1 if segs else rec.next_version
    state = WalState(segs, nxt, last, rec.removed_below)
    return WalReader(lambda: state, VersionNotifier(nxt))


# A live writer's retention may delete a segment between listing and opening it; look
# again a few times before giving up.
OPEN_ATTEMPTS = 3


def _recover(path: Path) -> Recovered:
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return recover(
                path,
                load_meta(path),
                repair=False,
                initial_version=INITIAL_VERSION,
                now_us=wall_clock_us(),
            )
        except (FileNotFoundError, WalSegmentMissing):
            if attempt == OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
