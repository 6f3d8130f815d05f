"""An offset-committing process for tests/server/test_offsets_crash.py, killed mid-stream.

    python offsets_child.py DIR START

opens the offset store of vnode directory DIR and, on THREADS threads at once, commits
offsets START, START + 1, ... forever: thread i commits both ("t", "g<i>") and
("u", "g<i>") in each commit, then prints "ack N" with N = offset * THREADS + i. Each
line is one os.write of a few bytes: atomic on a pipe, so lines of threads never mix.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from sqltopic.server.vnode.offsets import OffsetStore

# Committer threads: enough to form groups of several commits per transaction.
THREADS = 8


def commit_forever(store: OffsetStore, index: int, start: int) -> None:
    offset = start
    while True:
        group = f"g{index}"
        store.commit([("t", group, offset), ("u", group, offset)], now_us=offset)
        os.write(1, f"ack {offset * THREADS + index}\n".encode())
        offset += 1


def main(directory: str, start: str) -> None:
    store = OffsetStore.open(Path(directory))
    threads = [
        threading.Thread(target=commit_forever, args=(store, i, int(start)), daemon=True)
        for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # until the kill


if __name__ == "__main__":
    main(*sys.argv[1:])
