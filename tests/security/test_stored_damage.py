"""Reading is defended too: a stored data entry whose Arrow body passes its checksum but
not validation (what an older version could store from a hostile client) is reported as
WalCorruptionError naming the file and offset, by SELECT and by a topic poll, in the
engine and over the wire; never a crash, never foreign bytes. Other vgroups still read
(a read of the damaged vgroup meets the entry whatever table it wants: reads decode each
entry to learn its table)."""

from __future__ import annotations

import struct
from pathlib import Path

import grpc
import pytest

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import WalCorruptionError
from sqltopic.server.core.engine import Engine
from sqltopic.wal import EntryType, WalEntry
from tests.client.support import config, first_error
from tests.live_server import ServerProcess

SETUP = """
CREATE DATABASE d VGROUPS 1;
CREATE TABLE d.notes (ts TIMESTAMP, msg VARCHAR(100));
CREATE DATABASE d2 VGROUPS 1;
CREATE TABLE d2.other (ts TIMESTAMP, v INT);
INSERT INTO d.notes VALUES (1, 'ab') (2, 'cd') (3, 'ef');
INSERT INTO d2.other VALUES (1, 7);
CREATE TOPIC notes_topic AS SELECT ts, msg FROM d.notes;
"""


def store_damaged_entry(data: Path) -> str:
    """Set up `SETUP` in `data` and append, after the notes rows, a copy of their entry
    whose string offsets point 1 GiB past the buffer; the path of the WAL segment."""
    with Engine(data, background=False) as engine:
        engine.execute(SETUP)
        vnode = engine.state.vnode(engine.state.catalog.database("d").vgroups[0])
        reader = vnode.reader()
        records = reader.read(reader.first_version, max_entries=100)
        entries = [r for r in records if r.entry_type is EntryType.DATA]
        notes = next(r for r in entries if b"ef" in bytes(r.body))
        body = bytearray(notes.body)
        at = body.find(struct.pack("<4i", 0, 2, 4, 6))
        assert at > 0
        body[at + 12 : at + 16] = struct.pack("<i", 1 << 30)
        vnode.wal.append([WalEntry(EntryType.DATA, bytes(body))])
        assert notes.segment is not None
        return str(notes.segment.log_path)


def test_the_engine_reports_a_damaged_stored_entry(tmp_path: Path) -> None:
    path = store_damaged_entry(tmp_path / "data")
    with Engine(tmp_path / "data", background=False) as engine:
        with pytest.raises(WalCorruptionError) as damaged:
            engine.execute("SELECT * FROM d.notes")
        assert damaged.value.path == path
        assert damaged.value.offset > 0
        assert "is not valid Arrow data" in str(damaged.value)
        assert engine.execute("SELECT v FROM d2.other").rows == [(7,)]
        with pytest.raises(WalCorruptionError):
            engine.read_topic("notes_topic", engine.state.catalog.database("d").vgroups[0], 1, 1000)


def test_the_server_reports_a_damaged_stored_entry_and_stays_up(tmp_path: Path) -> None:
    store_damaged_entry(tmp_path / "data")
    proc = ServerProcess(tmp_path / "data")
    try:
        proc.wait_ready()
        with connect(proc.address) as conn:
            with pytest.raises(WalCorruptionError, match=r"not valid Arrow data.*file .*\.log"):
                conn.execute("SELECT * FROM d.notes")
            with Consumer(config(proc.address, "g")) as consumer:
                consumer.subscribe(["notes_topic"])
                error = first_error(consumer)
            assert isinstance(error, WalCorruptionError)
            assert conn.execute("SELECT v FROM d2.other").rows == [(7,)]
        assert proc.proc.poll() is None
    finally:
        proc.kill()


def test_the_damage_travels_as_data_loss(tmp_path: Path) -> None:
    store_damaged_entry(tmp_path / "data")
    proc = ServerProcess(tmp_path / "data")
    try:
        proc.wait_ready()
        from tests.security.hostile import UserWire, refusal  # noqa: PLC0415

        with UserWire(proc.address) as root:
            code, error, message = refusal(lambda: root.execute("SELECT msg FROM d.notes"))
        assert (code, error) == (grpc.StatusCode.DATA_LOSS, "WalCorruptionError")
        assert "byte offset" in message
    finally:
        proc.kill()
