"""Reads of history through the protocol against a real server (Mnode.ReadCatalog,
Vnode.ReadEntries; client/history.py): what they return, the rights they need (READ on
all of the database, and SUBSCRIBE on a topic read through), and their refusals."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.client import Connection, admin, connect
from sqltopic.client import history as h
from sqltopic.errors import NoPermission, NotFoundError, SqlError, TopicNotFound
from sqltopic.sql.catalog_store import catalog_of
from sqltopic.wal import EntryType
from sqltopic.wal.codec import decode_arrow
from tests.live_server import ServerProcess

TOPIC = "CREATE TOPIC hot AS SELECT ts, voltage FROM power.meters WHERE voltage > 220"


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    live_power.execute(
        "INSERT INTO d1 USING meters TAGS ('a', 1) VALUES (1, 10.0, 230, 0.1) (2, 11.0, 210, 0.2)"
        " d2 USING meters TAGS ('b', 2) VALUES (3, 12.0, 225, 0.3)"
    )
    live_power.execute("CREATE STABLE other (ts TIMESTAMP, v INT) TAGS (t INT)")
    return live_power


def _rows(conn: Connection, vgroup: int, **who: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for entry in h.read_entries(conn, vgroup, 1, 0, **who):
        if entry.entry_type == EntryType.DATA:
            batch = decode_arrow(entry.body)
            out += list(zip(batch.column("ts").cast(pa.int64()).to_pylist(),
                            batch.column("voltage").to_pylist(), strict=True))  # fmt: skip
    return out


def test_a_topic_s_catalog_and_entries(hot: Connection) -> None:
    rows = h.read_catalog(hot, topic="hot")
    kinds = sorted(kind for kind, _key, _body in rows)
    assert kinds == ["database", "stable", "table", "table", "topic"]  # never users
    catalog = catalog_of(rows)
    assert set(catalog.tables) == {("power", "d1"), ("power", "d2")}
    assert catalog.topic("hot").target == "meters"
    assert h.endpoints(hot, "power") == {}  # one server hosts every vgroup
    ranges = admin.offset_ranges(hot, "hot", [1, 2])
    got = []
    for vgroup in (1, 2):
        entries = list(h.read_entries(hot, vgroup, 1, 0, topic="hot"))
        assert [e.version for e in entries] == list(range(ranges[vgroup].begin, ranges[vgroup].end))
        got += _rows(hot, vgroup, topic="hot")
    assert sorted(got) == [(1, 230), (2, 210), (3, 225)]  # raw: the topic's WHERE is not applied
    last = ranges[1].end
    assert [e.version for e in h.read_entries(hot, 1, last - 1, last, topic="hot")] == [last - 1]
    assert list(h.read_entries(hot, 1, last, last + 10, topic="hot")) == []


def test_a_database_s_catalog_and_entries_need_read_on_all_of_it(
    server: ServerProcess, hot: Connection
) -> None:
    rows = h.read_catalog(hot, database="power", table="meters")
    assert "topic" not in {kind for kind, _k, _b in rows}
    hot.execute("CREATE USER reader PASS 'reader_pass1'; GRANT READ ON power.* TO reader")
    hot.execute("CREATE USER partial PASS 'partial_pass1'; GRANT READ ON power.meters TO partial")
    hot.execute("CREATE USER nobody PASS 'nobody_pass1'")
    hot.execute("CREATE USER sub PASS 'subscriber_pass1'; GRANT SUBSCRIBE ON hot TO sub")
    with connect(server.address, "sub", "subscriber_pass1") as sub:
        # SUBSCRIBE alone: the WAL holds every table's rows and columns, not only the topic's
        with pytest.raises(NoPermission, match="all of database power"):
            h.read_catalog(sub, topic="hot")
        with pytest.raises(NoPermission, match="all of database power"):
            list(h.read_entries(sub, 1, 1, 0, topic="hot"))
    hot.execute("GRANT READ ON power.* TO sub")
    with connect(server.address, "sub", "subscriber_pass1") as sub:
        assert len(h.read_catalog(sub, topic="hot")) == 5
        assert sorted(_rows(sub, 1, topic="hot") + _rows(sub, 2, topic="hot"))
    with connect(server.address, "reader", "reader_pass1") as reader:
        assert len(h.read_catalog(reader, database="power", table="d1")) == 3  # db, stable, d1
        assert sorted(_rows(reader, 1, database="power") + _rows(reader, 2, database="power"))
        with pytest.raises(NoPermission):  # READ is not SUBSCRIBE on the topic
            list(h.read_entries(reader, 1, 1, 0, topic="hot"))
    with connect(server.address, "partial", "partial_pass1") as partial:
        with pytest.raises(NoPermission, match="all of database power"):
            h.read_catalog(partial, database="power", table="meters")
        with pytest.raises(NoPermission, match="all of database power"):
            list(h.read_entries(partial, 1, 1, 0, database="power"))
    with connect(server.address, "nobody", "nobody_pass1") as nobody:
        with pytest.raises(TopicNotFound):
            h.read_catalog(nobody, topic="hot")
        with pytest.raises(TopicNotFound):
            list(h.read_entries(nobody, 1, 1, 0, topic="hot"))


def test_refusals(hot: Connection) -> None:
    with pytest.raises(NotFoundError, match="not a vgroup of database power"):
        list(h.read_entries(hot, 99, 1, 0, topic="hot"))
    with pytest.raises(SqlError, match="give the topic read"):
        h.read_catalog(hot)
    with pytest.raises(TopicNotFound):
        h.read_catalog(hot, topic="nope")
    with pytest.raises(NotFoundError):
        h.read_catalog(hot, database="power", table="nope")
