"""The server's files are its user's alone: a data directory it creates is 0700, and
every directory and file in it (the catalog with password hashes, WAL segments,
offsets, mnode.sqlite) is private, whatever the umask it was started with."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer
from tests.client.support import config, drain
from tests.live_server import ServerProcess


def test_everything_the_server_creates_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a permissive umask, inherited by the server
    try:
        proc = ServerProcess(tmp_path / "data")
    finally:
        os.umask(old)
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            conn.execute("CREATE DATABASE d VGROUPS 2; CREATE TABLE d.t (ts TIMESTAMP, v INT)")
            conn.execute("INSERT INTO d.t VALUES (1, 1); CREATE USER alice PASS 'alice-pw-1'")
            conn.execute("CREATE TOPIC t1 AS SELECT ts, v FROM d.t")
        with Consumer(config(proc.address, "g")) as consumer:
            consumer.subscribe(["t1"])
            drain(consumer)
            consumer.commit()
    finally:
        proc.stop()
    data = tmp_path / "data"
    found = [data, *data.rglob("*")]
    names = {p.name for p in found}
    assert {"catalog.sqlite", "mnode.sqlite", "offsets.sqlite", "LOCK"} <= names
    assert any(p.suffix == ".log" for p in found)
    loose = [f"{p} {stat.filemode(p.stat().st_mode)}" for p in found if p.stat().st_mode & 0o077]
    assert loose == []
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
