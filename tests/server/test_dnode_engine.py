"""A dnode's engine (server/core/engine.py, role dnode): writes into the vgroups it hosts
over its copy of the mnode's catalog; child tables a write needs made by the mnode
(`create_children`, as Cluster.CreateTables runs it); what it refuses: DDL, vgroups it
does not host, anything before it caught up."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from sqltopic.errors import NoPermission, UnsupportedStatement, VgroupUnavailable
from sqltopic.server.common.result import Session
from sqltopic.server.common.rwlock import WouldBlock
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.routing import vgroup_for
from sqltopic.server.core.topic_reader import TopicBlock
from sqltopic.server.dnode.vnode_host import Placed, VnodeHost
from sqltopic.server.mnode.dnode_registry import DnodeRegistry

SCHEMA = """
CREATE DATABASE power VGROUPS 4;
CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT);
CREATE TABLE power.d1 USING power.meters TAGS (1);
CREATE TOPIC t AS SELECT ts, v, tbname FROM power.meters;
"""
# a fake dnode that reports every catalog change applied (statements wait for none)
CAUGHT_UP = 1 << 62


@dataclass
class Cluster:
    mnode: Engine
    dnodes: dict[int, Engine]
    hosts: dict[int, VnodeHost]
    made: list[tuple[str, str, list[str]]]  # (user, target, names) the mnode was asked for

    def sync(self) -> None:
        """What the dnodes' heartbeats do: follow the placement, apply the changes."""
        for dnode_id, engine in self.dnodes.items():
            placed = self.mnode.placed_on(dnode_id)
            self.hosts[dnode_id].follow(
                [Placed.of(db.name, v, db.precision, db.wal) for db, v in placed], engine.lock
            )
            view = self.mnode.heartbeat_view(f"h{dnode_id}:1", engine.applied_change, 1000, 1 << 30)
            engine.apply_changes(view.changes)
            engine.serve()

    def rows(self, dnode_id: int) -> list[tuple[str, int]]:
        """(tbname, v) of every row topic t reads from the dnode's vgroups."""
        engine = self.dnodes[dnode_id]
        out: list[tuple[str, int]] = []
        for vgroup in sorted(self.hosts[dnode_id].live):
            items, _ = engine.read_topic("t", vgroup, 1, 100_000)
            for item in items:
                if isinstance(item, TopicBlock):
                    data = item.data
                    out += zip(data.column("tbname").to_pylist(), data.column("v").to_pylist(),
                               strict=True)  # fmt: skip
        return sorted(out)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    registry = DnodeRegistry(lambda: 0)
    mnode = Engine(tmp_path / "m", background=False, role="mnode", registry=registry)
    hosts = {d: VnodeHost(tmp_path / f"d{d}") for d in (1, 2)}
    made: list[tuple[str, str, list[str]]] = []
    dnodes: dict[int, Engine] = {}
    cluster = Cluster(mnode, dnodes, hosts, made)

    def maker(dnode_id: int):  # type: ignore[no-untyped-def]
        def make(session: Session, target: str, table: pa.Table) -> int:
            made.append((session.user, target, table.column("tbname").to_pylist()))
            seq = mnode.create_children(session, target, table)
            cluster.sync()  # the heartbeat brings the change
            return seq

        return make

    try:
        for d in (1, 2):
            mnode.execute(f"CREATE DNODE 'h{d}:1'")
            registry.beat(d, {}, CAUGHT_UP)
        mnode.execute(SCHEMA)
        for d in (1, 2):
            dnodes[d] = Engine(tmp_path / f"d{d}", background=False, role="dnode",
                               hosted=hosts[d].live, make_tables=maker(d))  # fmt: skip
        cluster.sync()
        yield cluster
    finally:
        for engine in dnodes.values():
            engine.close()
        for host in hosts.values():
            host.close()
        mnode.close()


def test_a_dnode_writes_its_vgroups_and_the_mnode_makes_missing_child_tables(
    cluster: Cluster,
) -> None:
    assert sorted(cluster.hosts[1].live) == [1, 3]  # VGROUPS 4 over two dnodes
    assert sorted(cluster.hosts[2].live) == [2, 4]
    # a write through the super table, of names only dnode 1 hosts, creating them
    session = Session(user="root", db="power")
    probe = [f"p{i}" for i in range(64)]
    on_1 = [n for n in probe if _vgroup_of(cluster, n) in (1, 3)][:10]
    table = pa.table({"tbname": on_1, "ts": list(range(1, 11)), "v": list(range(10)),
                      "loc": [7] * 10})  # fmt: skip
    assert cluster.dnodes[1].write("meters", table, session) == 10
    assert cluster.made == [("root", "meters", on_1)]  # asked once, for these names
    assert {("power", n) for n in on_1} <= set(cluster.mnode.catalog.tables)
    assert cluster.dnodes[1].catalog == cluster.mnode.catalog
    assert cluster.dnodes[2].catalog == cluster.mnode.catalog
    assert cluster.rows(1) == sorted(zip(on_1, range(10), strict=True))
    assert cluster.rows(2) == []
    # the tables exist now: the next write does not ask the mnode again
    assert cluster.dnodes[1].write("power.meters", table, session) == 10
    assert len(cluster.made) == 1
    assert len(cluster.rows(1)) == 20


def test_on_the_event_loop_a_write_needing_child_tables_asks_nothing_and_writes_nothing(
    cluster: Cluster,
) -> None:
    """The server's event loop runs small writes in the lock's no-wait mode: a write that
    would call the mnode for tables raises WouldBlock first, and a worker runs it again."""
    on_1 = [n for n in (f"w{i}" for i in range(64)) if _vgroup_of(cluster, n) in (1, 3)][:2]
    table = pa.table({"tbname": on_1, "ts": [1, 2], "v": [1, 2], "loc": [1, 1]})
    before = {v: n.wal.last_version for v, n in cluster.hosts[1].live.items()}
    session = Session(user="root", db="power")
    with cluster.dnodes[1].lock.without_waiting(), pytest.raises(WouldBlock):
        cluster.dnodes[1].write("meters", table, session)
    assert cluster.made == []
    assert {v: n.wal.last_version for v, n in cluster.hosts[1].live.items()} == before
    assert cluster.dnodes[1].write("meters", table, session) == 2
    assert cluster.rows(1) == [(on_1[0], 1), (on_1[1], 2)]


def _vgroup_of(cluster: Cluster, name: str) -> int:
    return vgroup_for(cluster.mnode.catalog.databases["power"], name)


def _here_and_there(cluster: Cluster, prefix: str) -> tuple[str, str]:
    """Two child tables made (and synced): one in a vgroup of dnode 1, one of dnode 2."""
    probe = [f"{prefix}{i}" for i in range(64)]
    here = next(n for n in probe if _vgroup_of(cluster, n) in (1, 3))
    there = next(n for n in probe if _vgroup_of(cluster, n) in (2, 4))
    for name, loc in ((here, 1), (there, 2)):
        cluster.mnode.execute(f"CREATE TABLE power.{name} USING power.meters TAGS ({loc})")
    cluster.sync()
    return here, there


def test_a_write_naming_a_vgroup_the_dnode_does_not_host_writes_nothing(cluster: Cluster) -> None:
    here, there = _here_and_there(cluster, "q")
    before = {v: n.wal.last_version for v, n in cluster.hosts[1].live.items()}
    table = pa.table({"tbname": [here, there], "ts": [1, 2], "v": [1, 2]})
    with pytest.raises(VgroupUnavailable, match=r"is not hosted by the dnode .*stale"):
        cluster.dnodes[1].write("meters", table, Session(user="root", db="power"))
    assert {v: n.wal.last_version for v, n in cluster.hosts[1].live.items()} == before
    # a normal write to its own table goes through
    one = pa.table({"ts": [5], "v": [9]})
    assert cluster.dnodes[1].write(f"power.{here}", one, Session(user="root")) == 1
    assert cluster.rows(1) == [(here, 9)]


def test_a_group_with_a_write_to_a_vgroup_not_hosted_writes_those_before_it_only(
    cluster: Cluster,
) -> None:
    """Writes of a Writes stream taken together (Engine.write_group): the group is
    refused before anything is written, then one by one the writes before the one naming
    a vgroup not hosted here are written, it is refused, and so is every write after it
    (server/rpc/write_stream.py)."""
    here, there = _here_and_there(cluster, "g")

    def one(name: str, v: int) -> pa.Table:
        return pa.table({
            "tbname": [name], "ts": pa.array([v], pa.timestamp("ms")),
            "v": pa.array([v], pa.int32()), "loc": pa.array([1], pa.int32()),
        })  # fmt: skip

    done = cluster.dnodes[1].write_group(
        "power.meters", [one(here, 1), one(there, 2), one(here, 3)], Session(user="root")
    )
    assert done[0] == 1
    assert isinstance(done[1], VgroupUnavailable)
    assert "is not hosted by the dnode" in str(done[1])
    assert isinstance(done[2], VgroupUnavailable)
    assert "an earlier write of this stream was refused" in str(done[2])
    assert cluster.rows(1) == [(here, 1)]


def test_a_dnode_refuses_ddl_and_serves_nothing_before_it_caught_up(
    cluster: Cluster, tmp_path: Path
) -> None:
    with pytest.raises(UnsupportedStatement, match="run it on the mnode"):
        cluster.dnodes[1].execute("CREATE DATABASE other")
    with pytest.raises(UnsupportedStatement, match="run it on the mnode"):
        cluster.dnodes[1].execute("CREATE TABLE power.x USING power.meters TAGS (1)")
    host = VnodeHost(tmp_path / "d3")
    fresh = Engine(tmp_path / "d3", background=False, role="dnode", hosted=host.live,
                   make_tables=lambda *a: 0)  # fmt: skip
    try:
        assert not fresh.serving
        host.follow([Placed.of(db.name, v, db.precision, db.wal)
                     for db, v in cluster.mnode.placed_on(1)], fresh.lock)  # fmt: skip
        view = cluster.mnode.heartbeat_view("h1:1", 0, 1000, 1 << 30)
        fresh.apply_changes(view.changes)
        one = pa.table({"ts": [5], "v": [9]})
        assert cluster.mnode.catalog.tables[("power", "d1")].vgroup in host.live
        with pytest.raises(VgroupUnavailable, match="catching up"):
            fresh.write("power.d1", one)
        fresh.serve()
        assert fresh.write("power.d1", one) == 1
    finally:
        fresh.close()
        host.close()


def test_the_mnode_checks_the_writer_s_rights_and_a_dnode_asks_for_none_it_lacks(
    cluster: Cluster,
) -> None:
    cluster.mnode.execute("CREATE USER reader PASS 'reader_pass1'")
    cluster.mnode.execute("GRANT READ ON power.* TO reader")
    cluster.sync()
    table = pa.table({"tbname": ["n1"], "ts": [1], "v": [1], "loc": [1]})
    with pytest.raises(NoPermission):
        cluster.dnodes[1].write("power.meters", table, Session(user="reader"))
    assert cluster.made == []  # refused on the dnode: the mnode was not asked
    with pytest.raises(NoPermission):  # and the mnode refuses it as well
        cluster.mnode.create_children(Session(user="reader"), "power.meters", table)
    assert ("power", "n1") not in cluster.mnode.catalog.tables
