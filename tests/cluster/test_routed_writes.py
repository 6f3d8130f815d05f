"""Writes through a cluster, as real processes: the client reads the routes from the
mnode and sends each part of a write to the dnode hosting its vgroups; the mnode makes
the child tables a write names; a user's rights hold on the dnodes; a SIGKILLed dnode's
vgroups are unavailable while the others take writes, and nothing acknowledged is lost
when it returns."""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa
import pytest

from sqltopic.aio import connect as aio_connect
from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import NoPermission, VgroupUnavailable
from sqltopic.server.core.routing import vgroup_for
from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly
from sqltopic.sql.entries import entry_runs, vnode_dir
from sqltopic.wal import EntryType, open_readonly
from sqltopic.wal.codec import decode_arrow
from tests.cluster.support import Cluster
from tests.live_server import ServerProcess
from tests.wal.waits import wait_for

pytestmark = pytest.mark.cluster

SCHEMA = """
CREATE DATABASE power VGROUPS 6;
CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT);
"""


@pytest.fixture
def three(three_dnodes: Cluster) -> Cluster:
    """The issue's cluster (an mnode and three dnodes) with this module's schema."""
    three_dnodes.sql(SCHEMA)
    return three_dnodes


def _placement(cluster: Cluster) -> dict[int, ServerProcess]:
    by_address = {d.address: d for d in cluster.dnodes}
    return {int(str(r[1])): by_address[str(r[3])] for r in cluster.sql("SHOW power.VGROUPS")}


def _rows(dnode: ServerProcess, vgroup: int) -> list[tuple[str, int, int]]:
    """(table, ts, v) of every row in the vgroup's WAL on the dnode's disk."""
    wal = open_readonly(vnode_dir(dnode.data, vgroup) / "wal")
    out = []
    for batch in wal.batches(wal.first_version):
        for record in batch:
            if record.entry_type is EntryType.META:
                continue
            for owner, rows in entry_runs(decode_arrow(record.body)):
                ts = rows.column("ts").cast(pa.int64()).to_pylist()
                out += [(owner.name, t, v) for t, v in zip(ts, rows.column("v").to_pylist(),
                                                           strict=True)]  # fmt: skip
    return sorted(out)


def _written(names: list[str], start: int) -> pa.Table:
    return pa.table({
        "tbname": names, "ts": pa.array(range(start, start + len(names)), pa.timestamp("ms")),
        "v": list(range(start, start + len(names))), "loc": [7] * len(names),
    })  # fmt: skip


def test_writes_reach_the_dnodes_hosting_their_rows(three: Cluster) -> None:
    placement = _placement(three)
    assert sorted({d.address for d in placement.values()}) == sorted(
        d.address for d in three.dnodes
    )  # every dnode hosts some of power's six vgroups
    names = [f"d{i}" for i in range(60)]
    with three.connect() as conn:
        # the child tables do not exist: the dnodes ask the mnode to make them
        assert conn.write("power.meters", _written(names, 1000)) == 60
        conn.execute("USE power")
        assert conn.write("meters", _written(names, 2000)) == 60  # they exist now
        assert conn.write("d7", pa.table({"ts": pa.array([3000], pa.timestamp("ms")),
                                         "v": [5]})) == 1  # fmt: skip
    catalog, _ = load_readonly(three.mnode.data / CATALOG_FILE)
    db = catalog.databases["power"]
    assert {n for (d, n) in catalog.tables if d == "power"} == set(names)
    expected: dict[int, list[tuple[str, int, int]]] = {}
    for i, name in enumerate(names):
        vgroup = vgroup_for(db, name)
        expected.setdefault(vgroup, []).extend(
            [(name, 1000 + i, 1000 + i), (name, 2000 + i, 2000 + i)]
        )
    expected[vgroup_for(db, "d7")].append(("d7", 3000, 5))
    wait_for(lambda: all(_rows(placement[v], v) == sorted(expected.get(v, []))
                         for v in placement), "every row in its vgroup's WAL")  # fmt: skip
    # every dnode's catalog copy has the tables the mnode made for the writes
    want = set(catalog.tables)
    wait_for(lambda: all(_tables(d) == want for d in three.dnodes), "the dnodes' tables")


def test_a_user_s_rights_hold_on_the_dnodes(three: Cluster) -> None:
    three.sql(
        "CREATE USER writer PASS 'writer_pass1'; GRANT WRITE ON power.* TO writer;"
        "CREATE USER reader PASS 'reader_pass1'; GRANT READ ON power.* TO reader"
    )
    address = three.mnode.address
    with connect(address, "writer", "writer_pass1") as conn:
        assert conn.write("power.meters", _written(["w1", "w2", "w3"], 1)) == 3
    with connect(address, "reader", "reader_pass1") as conn:
        with pytest.raises(NoPermission):
            conn.write("power.meters", _written(["r1"], 1))
        with pytest.raises(NoPermission):
            conn.write("power.meters", _written(["w1"], 9))
    names = {n for (d, n) in load_readonly(three.mnode.data / CATALOG_FILE)[0].tables}
    assert names == {"w1", "w2", "w3"}


def test_a_killed_dnode_s_vgroups_are_unavailable_and_its_rows_kept(three: Cluster) -> None:
    placement = _placement(three)
    victim = three.dnodes[0]
    probe = [f"k{i}" for i in range(200)]
    with three.connect() as conn:
        conn.write("power.meters", _written(probe, 1))
        catalog, _ = load_readonly(three.mnode.data / CATALOG_FILE)
        db = catalog.databases["power"]
        mine = [n for n in probe if placement[vgroup_for(db, n)] is victim]
        others = [n for n in probe if placement[vgroup_for(db, n)] is not victim]
        assert mine
        assert others
        before = {v: _rows(victim, v) for v, d in placement.items() if d is victim}
        victim.kill()
        with pytest.raises(VgroupUnavailable, match="does not answer"):
            conn.write("power.meters", _written(mine[:5], 500))
        # a write over the victim and the others: their parts (sent at the same time)
        # are written, then the victim's error is raised
        spread = mine[:3] + others[20:25]
        with pytest.raises(VgroupUnavailable, match=r"does not answer.*other dnodes' parts"):
            conn.write("power.meters", _written(spread, 800))
        for i, name in enumerate(spread[3:], start=3):
            vgroup = vgroup_for(db, name)
            assert (name, 800 + i, 800 + i) in _rows(placement[vgroup], vgroup)
        # the other dnodes go on taking writes
        assert conn.write("power.meters", _written(others[:20], 600)) == 20
        three.wait_status(victim, "offline")
        back = three.restart(victim)
        three.wait_status(back, "ready")
        placement = _placement(three)
        for v, rows in before.items():
            assert _rows(back, v) == rows  # nothing acknowledged was lost
        # the same connection logs in again to the restarted dnode
        wait_for(lambda: _try_write(conn, mine[:5]), "a write to the restarted dnode")
    assert sum(len(_rows(back, v)) for v in before) == sum(map(len, before.values())) + 5


def _tables(dnode: ServerProcess) -> set[tuple[str, str]]:
    return set(load_readonly(dnode.data / CATALOG_FILE)[0].tables)


def _try_write(conn: Connection, names: list[str]) -> bool:
    try:
        return conn.write("power.meters", _written(names, 700)) == len(names)
    except VgroupUnavailable:
        return False


def test_an_asyncio_connection_routes_its_writes_the_same(three: Cluster) -> None:
    names = [f"a{i}" for i in range(40)]

    async def run() -> int:
        async with await aio_connect(three.mnode.address) as conn:
            await conn.execute("USE power")
            return await conn.write("meters", _written(names, 10))

    assert asyncio.run(run()) == 40
    placement = _placement(three)
    db = load_readonly(three.mnode.data / CATALOG_FILE)[0].databases["power"]
    by_vgroup: dict[int, list[tuple[str, int, int]]] = {}
    for i, name in enumerate(names):
        by_vgroup.setdefault(vgroup_for(db, name), []).append((name, 10 + i, 10 + i))
    assert {v: _rows(placement[v], v) for v in placement} == {
        v: sorted(by_vgroup.get(v, [])) for v in placement
    }


def test_an_insert_on_the_mnode_reaches_the_dnodes(three: Cluster) -> None:
    names = [f"s{i}" for i in range(12)]
    values = " ".join(
        f"power.{n} USING power.meters TAGS ({i}) VALUES ({100 + i}, {i}) ({200 + i}, {i})"
        for i, n in enumerate(names)
    )
    with three.connect() as conn:
        assert conn.execute(f"INSERT INTO {values}").affected_rows == 24  # creates them
        assert conn.execute("INSERT INTO power.s0 VALUES (300, 7) power.s5 VALUES (301, 8)"
                            ).affected_rows == 2  # fmt: skip
    placement = _placement(three)
    db = load_readonly(three.mnode.data / CATALOG_FILE)[0].databases["power"]
    expected: dict[int, list[tuple[str, int, int]]] = {}
    for i, name in enumerate(names):
        expected.setdefault(vgroup_for(db, name), []).extend(
            [(name, 100 + i, i), (name, 200 + i, i)]
        )
    expected[vgroup_for(db, "s0")].append(("s0", 300, 7))
    expected[vgroup_for(db, "s5")].append(("s5", 301, 8))
    assert len({placement[v].address for v in expected}) > 1  # the INSERT spans dnodes
    assert {v: _rows(placement[v], v) for v in placement} == {
        v: sorted(expected.get(v, [])) for v in placement
    }


def test_an_insert_on_the_mnode_for_a_killed_dnode_is_unavailable(three: Cluster) -> None:
    three.sql("CREATE TABLE power.x0 USING power.meters TAGS (0)")
    placement = _placement(three)
    db = load_readonly(three.mnode.data / CATALOG_FILE)[0].databases["power"]
    victim = placement[vgroup_for(db, "x0")]
    victim.kill()
    with pytest.raises(VgroupUnavailable, match="does not answer"):
        three.sql("INSERT INTO power.x0 VALUES (1, 1)")


def test_select_and_show_subscriptions_on_the_mnode_read_the_dnodes(three: Cluster) -> None:
    names = [f"q{i}" for i in range(30)]
    with three.connect() as conn:
        conn.write("power.meters", _written(names, 1000))
        rows = conn.execute("SELECT tbname, v FROM power.meters ORDER BY v").rows
        assert rows == [(n, 1000 + i) for i, n in enumerate(names)]
        count = conn.execute("SELECT COUNT(*), SUM(v) FROM power.meters WHERE v >= 1010").rows
        assert count == [(20, sum(range(1010, 1030)))]
        conn.execute("CREATE TOPIC allrows AS SELECT ts, v FROM power.meters")
        settings = {"server": three.mnode.address, "group.id": "g", "auto.offset.reset": "earliest",
                    "enable.auto.commit": "false"}  # fmt: skip
        with Consumer(settings) as consumer:
            consumer.subscribe(["allrows"])
            got = 0
            deadline = time.monotonic() + 60
            while got < 30:
                assert time.monotonic() < deadline
                message = consumer.poll(0.5)
                got += message.row_count if message is not None else 0
            consumer.commit(asynchronous=False)
            shown = conn.execute("SHOW SUBSCRIPTIONS").to_arrow().to_pylist()
        mine = [r for r in shown if r["topic_name"] == "allrows"]
        assert sorted(r["vgroup_id"] for r in mine) == [1, 2, 3, 4, 5, 6]
        assert all(r["offset"] and r["offset"].startswith("log:") for r in mine)


def test_a_client_with_stale_routes_reads_them_again(three: Cluster) -> None:
    names = [f"r{i}" for i in range(60)]
    with three.connect() as conn:
        assert conn.write("power.meters", _written(names, 1)) == 60
        before = conn._routes
        assert before is not None
        # the database made again with other vgroups: the routes the client holds are stale
        three.sql("DROP DATABASE power; CREATE DATABASE power VGROUPS 4;"
                  "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT)")  # fmt: skip
        assert conn.write("power.meters", _written(names, 100)) == 60
        after = conn._routes
        assert after is not None
        assert after.epoch > before.epoch  # a dnode said the routes were stale
    placement = _placement(three)
    db = load_readonly(three.mnode.data / CATALOG_FILE)[0].databases["power"]
    assert sorted(placement) == list(db.vgroups)
    expected: dict[int, list[tuple[str, int, int]]] = {}
    for i, name in enumerate(names):
        expected.setdefault(vgroup_for(db, name), []).append((name, 100 + i, 100 + i))
    assert {v: _rows(placement[v], v) for v in placement} == {
        v: sorted(expected.get(v, [])) for v in placement
    }
