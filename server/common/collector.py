"""The garbage collector's settings for a server process (server, mnode, dnode).

A server holds a large, long-lived set of objects: its modules, DuckDB, the catalog, and
for every consumer's follow a task with its coroutines, waiter and credit (some sixty
objects each: 4,000 follows hold ~250,000). CPython's full collection walks all of them,
holding the GIL: at 1,000 subscribed topics that was 90 to 300 ms every 5 to 20 s on
the machine of docs/performance.md, every stream waiting meanwhile (docs/performance.md
§9.13, §9.14). What it finds there is almost never garbage: what dies between full
collections is freed by its reference count, and the cyclic garbage (parse trees,
cancelled tasks) is mostly caught young.

So once the server is ready, what it made while starting is moved out of the
collector's sight for good (`gc.freeze`: nothing of it is scanned again; of it, only
cycles that become garbage later are never freed, a bounded one-time amount), and a
full collection runs after `OLD_EVERY` middle ones instead of CPython's 10 (and still
only once the objects promoted since the last one are a quarter of the old ones, as
CPython decides). Young and middle collections keep CPython's thresholds. The embedded
engine (`sqltopic.connect` with no server) leaves its host process's collector alone.
"""

from __future__ import annotations

import gc

# Allocations (net of frees) that start a young collection: CPython's default; the
# per-message objects die young either way.
YOUNG = 700
# Young collections per middle one: CPython's default.
MIDDLE_EVERY = 10
# Middle collections per full one, at least: CPython's is 10, which at 1,000 topics made
# a full collection every 5 to 20 s; 100 makes it every few minutes under that load.
OLD_EVERY = 100


def settle() -> None:
    """Freeze what the process made while starting, and space out full collections:
    call once, when the server is ready to serve."""
    gc.collect()  # the startup's own garbage goes first, not into the frozen set
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE_EVERY, OLD_EVERY)
