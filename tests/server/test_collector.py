"""The server process's garbage collector settings (server/common/collector.py), in a
process of their own: they are the whole process's."""

from __future__ import annotations

import json
import subprocess
import sys

from sqltopic.server.common import collector

# What the child reports: its thresholds and frozen objects after `settle`, and whether
# a cycle made afterwards is still collected, and one made before is not (frozen).
CHILD = """
import gc, json, weakref
from sqltopic.server.common import collector

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

before = cycle()
kept = before()  # alive while settling: frozen with the startup's objects
collector.settle()
del kept
after = cycle()
gc.collect()
print(json.dumps({
    "threshold": gc.get_threshold(),
    "frozen": gc.get_freeze_count(),
    "before_collected": before() is None,
    "after_collected": after() is None,
}))
"""
# Seconds a child that imports the collector module may take at most.
CHILD_DEADLINE_S = 60


def test_settle_freezes_the_startup_and_spaces_out_full_collections() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=CHILD_DEADLINE_S,
        check=True,
    )  # fmt: skip
    found = json.loads(done.stdout)
    assert found["threshold"] == [collector.YOUNG, collector.MIDDLE_EVERY, collector.OLD_EVERY]
    assert collector.OLD_EVERY > 10  # CPython's default: full collections are rarer
    assert found["frozen"] > 1_000  # the interpreter's and the modules' objects at least
    assert found["after_collected"]  # cycles made while serving are collected
    assert not found["before_collected"]  # frozen: never scanned again
