"""A real server's threads and file descriptors under many vgroups: a database of
hundreds of vgroups adds no thread per vgroup, and one that needs more descriptors than
the open-files limit allows fails with LimitExceeded naming the limit, leaves nothing
behind, and harms neither the running server, its data, nor its next start. Engines in
child processes run out at every step of a creation and of a start in turn: each is a
LimitExceeded too. And the soft limit rises to the hard one as the server starts."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import LimitExceeded
from tests.live_server import POWER, ServerProcess

# Enough vgroups that one thread each would show at once (the server has a few dozen).
MANY_VGROUPS = 256
# Threads the server may start besides, while it creates a database (a gRPC poller, a
# worker of its pool): far below one per vgroup.
THREAD_SLACK = 4
# The open-files limit of the constrained server: room for the server itself (Python,
# gRPC, DuckDB, the catalog: well under a hundred) and a few small databases, not for
# the big one, which needs three per vgroup.
LOW_FILES = 256
BIG_VGROUPS = 200
ROWS = 8
INSERT = "INSERT INTO power.d{i} USING power.meters TAGS ('here', {i}) VALUES ({ts}, 1.5, 220, 0.3)"
# An engine in a child process runs out of descriptors at every step of creating a
# database of SWEEP_VGROUPS vgroups in turn: with 0, 1, 2, ... descriptors to spare.
SWEEP_VGROUPS = 10
SWEEP = """
import json, os, resource, sys
from sqltopic.errors import LimitExceeded
from sqltopic.server.core.engine import Engine

data, vgroups = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
outcomes = []
with Engine(data, background=True) as engine:
    engine.execute("CREATE DATABASE small VGROUPS 2")
    dirs = sorted(os.listdir(os.path.join(data, "vnode")))
    for spare in range(4 * vgroups):
        open_now = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + spare, hard))
        try:
            engine.execute(f"CREATE DATABASE big VGROUPS {vgroups}")
            outcome = "created"
        except LimitExceeded as exc:
            outcome = type(exc.__cause__).__name__
            assert "open-files limit" in str(exc), exc
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if outcome == "created":
            engine.execute("DROP DATABASE big")
        names = [row[0] for row in engine.execute("SHOW DATABASES").rows]
        assert names == ["small"], (spare, names)
        assert sorted(os.listdir(os.path.join(data, "vnode"))) == dirs, (spare, outcome)
        assert engine.state.scheduler.tasks == 2, (spare, outcome)
        outcomes.append(outcome)
with Engine(data, background=True) as engine:
    assert [row[0] for row in engine.execute("SHOW DATABASES").rows] == ["small"]
print(json.dumps(outcomes))
"""
# The same at the engine's start: a data directory of SWEEP_VGROUPS vgroups holding data
# opened with 0, 1, 2, ... descriptors to spare beyond the catalog's (CATALOG_FILES).
CATALOG_FILES = 4
SWEEP_START = """
import json, os, resource, sys
from sqltopic.errors import LimitExceeded
from sqltopic.server.core.engine import Engine

data, vgroups, catalog_files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with Engine(data, background=True) as engine:
    engine.execute(f"CREATE DATABASE big VGROUPS {vgroups}; USE big")
    engine.execute("CREATE STABLE m (ts TIMESTAMP, v INT) TAGS (g INT)")
    for i in range(2 * vgroups):
        engine.execute(f"INSERT INTO c{i} USING m TAGS ({i}) VALUES ({1700000000000 + i}, {i})")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
outcomes = []
while not outcomes or outcomes[-1] != "opened":
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + catalog_files + len(outcomes), hard))
    engine = None
    try:
        engine = Engine(data, background=True)
        outcomes.append("opened")
    except LimitExceeded as exc:
        assert "open-files limit" in str(exc) and "opening" in str(exc), exc
        outcomes.append(type(exc.__cause__).__name__)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if engine is not None:
        engine.close()
with Engine(data, background=True) as engine:
    assert engine.execute("SELECT count(*) FROM big.m").rows == [(2 * vgroups,)]
print(json.dumps(outcomes))
"""


class LimitedServer(ServerProcess):
    """A server whose open-files limit (soft and hard) is `files`: set on the child
    right after it starts, long before it opens its data directory."""

    def __init__(self, data: Path, files: int, port: int | None = None) -> None:
        super().__init__(data, port)
        resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE, (files, files))


def _threads(server: ServerProcess) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/task"))


def _databases(conn: Connection) -> list[str]:
    return sorted(row[0] for row in conn.execute("SHOW DATABASES").rows)


def _vnode_dirs(data: Path) -> list[str]:
    return sorted(os.listdir(data / "vnode"))


def _fill_power(conn: Connection) -> None:
    conn.execute(POWER)
    for i in range(ROWS):
        conn.execute(INSERT.format(i=i, ts=1_700_000_000_000 + i))


def _count(conn: Connection) -> int:
    rows = conn.execute("SELECT count(*) FROM power.meters").rows
    return int(rows[0][0])


@pytest.fixture
def limited(data: Path) -> Iterator[LimitedServer]:
    server = LimitedServer(data, LOW_FILES)
    try:
        server.wait_ready()
        yield server
    finally:
        server.kill()


def test_many_vgroups_add_no_threads(server: ServerProcess, conn: Connection) -> None:
    # the soft limit up to the hard one, as the server does at start (server/common/resources.py)
    _, hard = resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (hard, hard))
    _fill_power(conn)  # the server's pools have started their threads
    assert _count(conn) == ROWS
    before = _threads(server)
    conn.execute(f"CREATE DATABASE big VGROUPS {MANY_VGROUPS}")
    assert _threads(server) <= before + THREAD_SLACK
    # a super table's event reaches every vnode: each WAL then has a segment to sync
    conn.execute("CREATE STABLE big.m (ts TIMESTAMP, v INT) TAGS (g INT)")
    for i in range(16):
        conn.execute(f"INSERT INTO big.c{i} USING big.m TAGS ({i}) VALUES (now, {i})")
    assert _threads(server) <= before + THREAD_SLACK


def test_out_of_descriptors_fails_cleanly(limited: LimitedServer, data: Path) -> None:
    with connect(limited.address) as conn:
        _fill_power(conn)
        kept = _vnode_dirs(data)
        with pytest.raises(LimitExceeded) as failed:
            conn.execute(f"CREATE DATABASE big VGROUPS {BIG_VGROUPS}")
        message = str(failed.value)
        assert "open-files limit" in message
        assert "`ulimit -n`" in message
        assert f"is {LOW_FILES}" in message
        assert "fewer vgroups" in message
        # nothing of it is left, and what was there is intact
        assert _databases(conn) == ["power"]
        assert _vnode_dirs(data) == kept
        assert _count(conn) == ROWS
        # the server goes on serving, new databases included
        conn.execute("CREATE DATABASE modest VGROUPS 4")
        conn.execute(INSERT.format(i=ROWS, ts=1_700_000_001_000))
    with connect(limited.address) as again:
        assert _databases(again) == ["modest", "power"]
        assert _count(again) == ROWS + 1
    assert limited.stop() == 0
    restarted = LimitedServer(data, LOW_FILES)
    try:
        restarted.wait_ready()
        with connect(restarted.address) as conn:
            assert _databases(conn) == ["modest", "power"]
            assert _count(conn) == ROWS + 1
            conn.execute(INSERT.format(i=ROWS + 1, ts=1_700_000_002_000))
            assert _count(conn) == ROWS + 2
    finally:
        restarted.kill()


def test_running_out_anywhere_in_creation_is_a_clean_limit_exceeded(tmp_path: Path) -> None:
    """Whichever file of whichever vnode the limit strikes (a WAL's lock, its directory
    listing, offsets.sqlite, its -wal), the statement fails with LimitExceeded and
    leaves no directory, no database and no background task behind."""
    done = subprocess.run(
        [sys.executable, "-c", SWEEP, str(tmp_path / "data"), str(SWEEP_VGROUPS)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcomes: list[str] = json.loads(done.stdout)
    assert outcomes[-1] == "created"  # with enough to spare, it works
    failures = set(outcomes) - {"created"}
    assert failures == {"OSError", "OperationalError"}  # the WAL's files and SQLite's


def test_running_out_at_start_is_a_limit_exceeded(tmp_path: Path) -> None:
    """A start that runs out of descriptors while opening the vnodes fails with
    LimitExceeded naming the vgroup, closes what it opened (closing needs descriptors
    too, and does not hide the cause), and the next start with enough of them works."""
    args = [str(tmp_path / "data"), str(SWEEP_VGROUPS), str(CATALOG_FILES)]
    done = subprocess.run(
        [sys.executable, "-c", SWEEP_START, *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    outcomes: list[str] = json.loads(done.stdout)
    assert outcomes[-1] == "opened"
    assert set(outcomes[:-1]) == {"OSError", "OperationalError"}


RAISE = """
import json, resource
from sqltopic.server.common.resources import raise_open_files_limit
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
before, after = raise_open_files_limit()
print(json.dumps([before.soft, before.hard, after.soft, after.hard,
                  resource.getrlimit(resource.RLIMIT_NOFILE)[0]]))
"""


def test_the_soft_limit_rises_to_the_hard_one() -> None:
    """What the server does at start (server/common/resources.py), in a child process."""
    done = subprocess.run(
        [sys.executable, "-c", RAISE], capture_output=True, text=True, timeout=60, check=True
    )
    before_soft, before_hard, after_soft, after_hard, now = json.loads(done.stdout)
    assert (before_soft, before_hard) == (64, after_hard)
    assert after_soft == now == (after_hard if after_hard != resource.RLIM_INFINITY else 1 << 20)
