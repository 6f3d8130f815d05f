"""An engine process for crash tests: runs statements on a data directory, then dies.

    python engine_child.py DIR crash-commit SQL...   run each SQL; the last one is killed
                                                    (SIGKILL) when it commits the catalog,
                                                    after its WAL append
    python engine_child.py DIR insert-loop START    INSERT rows K = START, START+1, ...
                                                    forever into d0..d2 of `power`,
                                                    printing "ack K" after each

This file is a test harness: the patch of `CatalogStore.commit` lives only in this child
process. The engine under test is opened unmodified by the parent afterwards.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from sqltopic.server.core.engine import Engine
from sqltopic.sql.catalog_store import CatalogStore


def _die(*args: Any, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def crash_commit(directory: str, statements: list[str]) -> None:
    engine = Engine(directory, background=False)
    for sql in statements[:-1]:
        engine.execute(sql)
    CatalogStore.commit = _die  # type: ignore[method-assign]
    engine.execute(statements[-1])
    sys.stderr.write("the statement did not commit the catalog\n")
    os._exit(3)


def insert_loop(directory: str, start: int) -> None:
    engine = Engine(directory, background=False)
    engine.execute("USE power")
    k = start - 1
    while True:
        k += 1
        table = f"d{k % 3}"
        engine.execute(f"INSERT INTO {table} VALUES ({k}, {k})")
        sys.stdout.write(f"ack {k}\n")
        sys.stdout.flush()


def main() -> None:
    directory, mode = sys.argv[1], sys.argv[2]
    if mode == "crash-commit":
        crash_commit(directory, sys.argv[3:])
    elif mode == "insert-loop":
        insert_loop(directory, int(sys.argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
