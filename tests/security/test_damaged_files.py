"""A damaged file of the data directory stops the start with one line naming the file
and what to do: no traceback, exit code 1, and the files are left as they were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sqltopic.client import connect
from sqltopic.server.mnode.coordinator_store import CoordinatorStore
from tests.live_server import START_DEADLINE_S, ServerProcess

SETUP = """
CREATE DATABASE d VGROUPS 2;
CREATE TABLE d.t (ts TIMESTAMP, v INT);
INSERT INTO d.t VALUES (1, 1);
"""


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    """A data directory with a database, a row and a consumer group's state file."""
    proc = ServerProcess(tmp_path / "data")
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute(SETUP)
            conn.execute("CREATE TOPIC t1 AS SELECT ts, v FROM d.t")
    finally:
        proc.stop()
    return tmp_path / "data"


EMPTY_GROUP: dict[str, list[object]] = {
    "members": [], "owners": [], "plans": [], "rows_before": [], "progress": [],
}  # fmt: skip


def group_state(data: Path, name: str) -> None:
    """A consumer group state file: mnode.sqlite, or mnode.json of an older version."""
    if name == "mnode.json":
        (data / name).write_text(json.dumps({"format": 1, "next_id": 1, **EMPTY_GROUP}))
    elif name == "mnode.sqlite":
        store = CoordinatorStore(data)
        store.save(1, {"g": dict(EMPTY_GROUP, plans=[["t1", "g", 1, 1]])})
        store.close()


def start(data: Path) -> subprocess.CompletedProcess[str]:
    """A server start that must fail at once."""
    args = [sys.executable, "-m", "sqltopic.server", "--data", str(data), "--port", "0"]
    return subprocess.run(
        args, check=False, capture_output=True, text=True, timeout=START_DEADLINE_S
    )


def damage(path: Path, content: bytes) -> bytes:
    before = path.read_bytes()
    path.write_bytes(content)
    return before


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("catalog.sqlite", b"this is not a database" * 100, "the catalog is damaged"),
        ("vnode/vnode2/offsets.sqlite", b"garbage" * 1000, "committed offsets of this vgroup"),
        ("mnode.json", b"{not json", "the consumer group state is damaged"),
        ("mnode.json", b'{"format": 1, "members": [{"id": 1}]}', "consumer group state is damaged"),
        ("mnode.json", b'{"format": 1, "next_id": 1, "members": [{"id": 1}], "owners": [], '
                       b'"plans": [], "rows_before": [], "progress": []}', "is damaged"),
        ("mnode.sqlite", b"garbage" * 1000, "the consumer group state is damaged"),
    ],
)  # fmt: skip
def test_a_damaged_file_stops_the_start_with_one_line(
    prepared: Path, name: str, content: bytes, says: str
) -> None:
    group_state(prepared, name)
    target = prepared / name
    damage(target, content)
    done = start(prepared)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sqltopic: ")
    assert str(target) in last
    assert says in last
    assert target.read_bytes() == content  # left for the operator to look at


def test_the_start_works_again_once_the_file_is_restored(prepared: Path) -> None:
    target = prepared / "catalog.sqlite"
    good = damage(target, b"garbage" * 1000)
    assert start(prepared).returncode == 1
    target.write_bytes(good)
    proc = ServerProcess(prepared)
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            assert conn.execute("SELECT v FROM d.t").rows == [(1,)]
    finally:
        proc.kill()
