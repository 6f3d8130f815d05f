"""Failures in the middle of engine work: crashes after retention, a vgroup's append or
the catalog's commit failing, NULL tags through the Arrow path."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.server.core.engine import Engine
from sqltopic.sql.catalog_store import CatalogStore

CRASH_AFTER_RETENTION = """
import os, sys
from sqltopic.server.core.engine import Engine
e = Engine(sys.argv[1], background=False)
e.execute("CREATE DATABASE db VGROUPS 1 WAL_RETENTION_PERIOD 0 WAL_SEGMENT_SIZE 1")
e.execute("USE db")
e.execute("CREATE TABLE t (ts TIMESTAMP, v INT)")
for i in range(50):
    e.execute(f"INSERT INTO t VALUES ({1700000000000 + i}, {i})")
e.state.vnode(1).wal.maintain()
e.execute("INSERT INTO t VALUES (1800000000000, 99)")
os._exit(0)  # a crash: no close
"""


def test_a_crash_after_retention_reopens(tmp_path: Path) -> None:
    """Replay starts at the first retained version, not below it."""
    subprocess.run(
        [sys.executable, "-c", CRASH_AFTER_RETENTION, str(tmp_path)], check=True, timeout=120
    )
    with Engine(tmp_path, background=False) as engine:
        wal = engine.state.vnode(1).wal
        assert wal.first_version > 2  # retention deleted the early versions
        rows = engine.execute("SELECT v FROM db.t ORDER BY ts").rows
        assert rows[-1] == (99,)
        assert len(rows) < 51  # what retention deleted is gone, the rest reads


def test_select_reads_what_retention_left(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False) as engine:
        engine.execute(
            "CREATE DATABASE db VGROUPS 1 WAL_RETENTION_PERIOD 0 WAL_SEGMENT_SIZE 1;"
            "USE db; CREATE TABLE t (ts TIMESTAMP, v INT)"
        )
        for i in range(30):
            engine.execute(f"INSERT INTO t VALUES ({1700000000000 + i}, {i})")
        assert engine.state.vnode(1).wal.maintain()  # deletes every closed segment
        engine.execute("INSERT INTO t VALUES (1800000000000, 99)")
        assert engine.execute("SELECT v FROM t").rows == [(99,)]


def _failing_append(*_: Any) -> list[int]:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_ddl_event_written_to_some_vgroups_takes_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WAL is the source of truth: once an event reached a WAL, the catalog follows
    it, and the failure of the other vgroup is still reported."""
    engine = Engine(tmp_path, background=False)
    engine.execute("CREATE DATABASE db VGROUPS 2; USE db")
    engine.execute("CREATE STABLE s (ts TIMESTAMP, a INT, b INT) TAGS (g INT)")
    monkeypatch.setattr(engine.state.vnode(2).wal, "append", _failing_append)
    with pytest.raises(OSError, match="No space left"):
        engine.execute("ALTER STABLE s DROP COLUMN b")
    monkeypatch.undo()
    assert [c.name for c in engine.state.catalog.stable("db", "s").columns] == ["ts", "a"]
    engine.close()
    with Engine(tmp_path, background=False) as again:
        assert [c.name for c in again.state.catalog.stable("db", "s").columns] == ["ts", "a"]


def test_a_failed_catalog_commit_leaves_memory_as_disk_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(tmp_path, background=False)
    engine.execute("CREATE DATABASE db VGROUPS 1; USE db")
    engine.execute("CREATE STABLE s (ts TIMESTAMP, v INT) TAGS (g INT)")
    engine.execute("CREATE TOPIC all_s AS STABLE s")
    real_commit = CatalogStore.commit

    def locked(*args: Any, **kwargs: Any) -> None:
        raise OSError("database is locked")

    monkeypatch.setattr(CatalogStore, "commit", locked)
    with pytest.raises(OSError, match="locked"):
        engine.execute("INSERT INTO c1 USING s TAGS (1) VALUES (1700000000000, 1)")
    monkeypatch.setattr(CatalogStore, "commit", real_commit)
    # memory matches disk: the table is not there yet (its event waits in the WAL)...
    assert ("db", "c1") not in engine.state.catalog.tables
    engine.close()  # ...and a clean close must not mark that event as applied
    with Engine(tmp_path, background=False) as again:
        assert ("db", "c1") in again.state.catalog.tables
        assert again.execute("SELECT count(*) FROM db.s").rows == [(1,)]
        items, _ = again.read_topic("all_s", 1, 0, 1000)
        rows = sum(i.data.num_rows for i in items if hasattr(i, "data"))
        assert rows == 1


def test_arrow_writes_accept_null_timestamp_tags(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False) as engine:
        engine.execute(
            "CREATE DATABASE db VGROUPS 1; USE db;"
            "CREATE STABLE s (ts TIMESTAMP, v INT) TAGS (since TIMESTAMP, g INT)"
        )
        data = pa.table(
            {
                "tbname": ["c1"],
                "ts": pa.array([1700000000000], pa.timestamp("ms")),
                "v": pa.array([1], pa.int32()),
                "since": pa.array([None], pa.timestamp("ms")),
                "g": pa.array([7], pa.int32()),
            }
        )
        assert engine.write("s", data) == 1
        assert engine.state.catalog.table("db", "c1").tags == {"since": None, "g": 7}
        bad = data.set_column(1, "ts", pa.array([None], pa.timestamp("ms")))
        with pytest.raises(Exception, match="NULL timestamp in column ts"):
            engine.write("s", bad)


def test_a_failed_create_database_commit_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Engine(tmp_path, background=False) as engine:
        real_commit = CatalogStore.commit

        def full(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(CatalogStore, "commit", full)
        with pytest.raises(OSError, match="No space left"):
            engine.execute("CREATE DATABASE db VGROUPS 2")
        monkeypatch.setattr(CatalogStore, "commit", real_commit)
        assert "db" not in engine.state.catalog.databases
        assert engine.state.vnodes == {}
        engine.execute("CREATE DATABASE db VGROUPS 2")  # not WalLockedError
        assert engine.state.catalog.database("db").vgroups == (1, 2)
