"""Writes through a cluster, as real processes: the client reads the routes from the
mnode and sends each part of a write to the dnode hosting its vgroups; the mnode makes
the child tables a write names; a user's rights hold on the dnodes; a SIGKILLed dnode's
vgroups are unavailable while the others take writes, and nothing acknowledged is lost
when it returns; writes kept under way at every dnode land in order, stale routes or
not, as a dnode's stream refuses every write after one it refused as unavailable."""

from __future__ import annotations

import asyncio
import time

import pyarrow as pa
import pytest

from sqltopic.aio import connect as aio_connect
from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.client.routing import Routes
from sqltopic.errors import NoPermission, ServerUnavailable, VgroupUnavailable
from sqltopic.server.core.routing import vgroup_for
from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly
from sqltopic.sql.entries import entry_runs, vnode_dir
from sqltopic.wal import EntryType, open_readonly
from sqltopic.wal.codec import decode_arrow
from tests.cluster.support import Cluster
from tests.live_server import ServerProcess
from tests.server.test_writes_stream import Writes, outcome, request
from tests.server.wire import Wire
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
            written = await conn.write("meters", _written(names, 10))
            assert {e for e, d in conn._dnodes.items() if d.writes is not None} == {
                d.address for d in three.dnodes
            }  # every dnode's part went on its stream
            return written

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


def _made_stale(cluster: Cluster, conn: Connection, names: list[str]) -> Routes:
    """`names` written through `conn`; then the database made again with other vgroups,
    so that the routes `conn` holds (returned) are stale."""
    assert conn.write("power.meters", _written(names, 1)) == len(names)
    before = conn._routes
    assert before is not None
    cluster.sql("DROP DATABASE power; CREATE DATABASE power VGROUPS 4;"
                "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT)")  # fmt: skip
    return before


def _read_again(conn: Connection, before: Routes) -> None:
    after = conn._routes
    assert after is not None
    assert after.epoch > before.epoch  # a dnode said the routes were stale


def test_a_client_with_stale_routes_reads_them_again(three: Cluster) -> None:
    names = [f"r{i}" for i in range(60)]
    with three.connect() as conn:
        before = _made_stale(three, conn, names)
        assert conn.write("power.meters", _written(names, 100)) == 60
        _read_again(conn, before)
    placement = _placement(three)
    db = load_readonly(three.mnode.data / CATALOG_FILE)[0].databases["power"]
    assert sorted(placement) == list(db.vgroups)
    expected: dict[int, list[tuple[str, int, int]]] = {}
    for i, name in enumerate(names):
        expected.setdefault(vgroup_for(db, name), []).append((name, 100 + i, 100 + i))
    assert {v: _rows(placement[v], v) for v in placement} == {
        v: sorted(expected.get(v, [])) for v in placement
    }


# --- writes under way on the dnodes' streams -------------------------------------------

# Answers a test waits for at most (a bound, not a timing).
ANSWER_DEADLINE_S = 60.0


def _in_wal_order(dnode: ServerProcess, vgroup: int) -> dict[str, list[int]]:
    """Each table's v in the vgroup's WAL on the dnode's disk, in WAL order."""
    wal = open_readonly(vnode_dir(dnode.data, vgroup) / "wal")
    out: dict[str, list[int]] = {}
    for batch in wal.batches(wal.first_version):
        for record in batch:
            if record.entry_type is EntryType.META:
                continue
            for owner, rows in entry_runs(decode_arrow(record.body)):
                out.setdefault(owner.name, []).extend(rows.column("v").to_pylist())
    return out


def _wal_orders(cluster: Cluster) -> dict[str, list[int]]:
    """Every table's v over all of power's vgroups, each in its WAL's order."""
    found: dict[str, list[int]] = {}
    for vgroup, dnode in _placement(cluster).items():
        found |= _in_wal_order(dnode, vgroup)
    return found


def test_write_async_keeps_writes_under_way_at_every_dnode_in_order(three: Cluster) -> None:
    names = [f"p{i}" for i in range(30)]
    with three.connect() as conn:
        assert conn.write("power.meters", _written(names, 0)) == 30  # makes the tables
        made = [conn.write_async("power.meters", _written(names, 100 * k)) for k in range(1, 41)]
        assert [f.result(ANSWER_DEADLINE_S) for f in made] == [30] * 40
        assert {e for e, d in conn._dnodes.items() if d.writes is not None} == {
            d.address for d in three.dnodes
        }  # every dnode's parts went on its stream
        settler = conn._routed._thread if conn._routed is not None else None
    assert settler is not None
    assert not settler.is_alive()  # ended with the connection
    with pytest.raises(ServerUnavailable, match="closed"):
        conn.write_async("power.meters", _written(names, 9000))
    orders = _wal_orders(three)
    assert sorted(orders) == sorted(names)
    for i, name in enumerate(names):
        assert orders[name] == [i, *(100 * k + i for k in range(1, 41))]


def test_writes_under_way_with_stale_routes_land_in_order(three: Cluster) -> None:
    names = [f"s{i}" for i in range(60)]
    with three.connect() as conn:
        before = _made_stale(three, conn, names)  # the writes under way are refused at first
        made = [conn.write_async("power.meters", _written(names, 1000 * k)) for k in range(1, 13)]
        assert [f.result(ANSWER_DEADLINE_S) for f in made] == [60] * 12
        _read_again(conn, before)
    orders = _wal_orders(three)
    assert sorted(orders) == sorted(names)
    for i, name in enumerate(names):
        assert orders[name] == [1000 * k + i for k in range(1, 13)]


def test_a_dnode_s_stream_refuses_every_write_after_one_refused_as_unavailable(
    three: Cluster,
) -> None:
    placement = _placement(three)
    dnode = three.dnodes[0]
    probe = [f"q{i}" for i in range(40)]
    with three.connect() as conn:
        conn.write("power.meters", _written(probe, 0))  # the tables, on their dnodes
    db = load_readonly(three.mnode.data / CATALOG_FILE)[0].databases["power"]
    mine = next(n for n in probe if placement[vgroup_for(db, n)] is dnode)
    other = next(n for n in probe if placement[vgroup_for(db, n)] is not dnode)
    wire = Wire(dnode.address)
    stream = Writes(wire.channel, wire.md)
    try:
        # sent together: applied as one group or one by one, the answers are the same
        stream.send(request(0, _written([mine], 5)), request(1, _written([other], 10)),
                    request(2, _written([mine], 20)))  # fmt: skip
        written, first, second = stream.answer(), stream.answer(), stream.answer()
        assert outcome(written) == (0, 1)
        assert outcome(first) == (1, VgroupUnavailable)
        assert "not hosted by the dnode" in first.error.message
        assert outcome(second) == (2, VgroupUnavailable)
        assert "an earlier write of this stream was refused" in second.error.message
        stream.send(request(3, _written([mine], 30)))  # still refused: the same stream
        assert outcome(stream.answer()) == (3, VgroupUnavailable)
    finally:
        stream.close()
    again = Writes(wire.channel, wire.md)  # a new stream takes it
    try:
        again.send(request(4, _written([mine], 40)))
        assert outcome(again.answer()) == (4, 1)
    finally:
        again.close()
        wire.close()
    vgroup = vgroup_for(db, mine)
    assert _in_wal_order(placement[vgroup], vgroup)[mine] == [probe.index(mine), 5, 40]


def test_asyncio_writes_awaited_together_with_stale_routes_all_land(three: Cluster) -> None:
    names = [f"t{i}" for i in range(60)]
    with three.connect() as conn:
        before = _made_stale(three, conn, names)

    async def run() -> list[int]:
        async with await aio_connect(three.mnode.address) as aconn:
            aconn._routes = before  # as a connection made before the database changed
            writes = [aconn.write("power.meters", _written(names, 1000 * k)) for k in range(1, 9)]
            return await asyncio.gather(*writes)

    assert asyncio.run(run()) == [60] * 8
    orders = _wal_orders(three)
    for i, name in enumerate(names):  # awaited together: each write once, in any order
        assert sorted(orders[name]) == [1000 * k + i for k in range(1, 9)]
