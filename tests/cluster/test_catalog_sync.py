"""The mnode's catalog reaching its dnodes, as real processes: every dnode's copy of the
catalog and the DDL events in its vgroups' WALs, a dnode SIGKILLed while DDL runs that
catches up when it returns, and dropped topics' offsets."""

from __future__ import annotations

import contextlib
import json
import sqlite3

import pytest

from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly
from sqltopic.sql.entries import vnode_dir
from sqltopic.wal import EntryType, open_readonly
from tests.cluster.support import Cluster
from tests.live_server import ServerProcess
from tests.wal.waits import wait_for

pytestmark = pytest.mark.cluster

SCHEMA = """
CREATE DATABASE power VGROUPS 4;
CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (loc INT);
CREATE TABLE power.d1 USING power.meters TAGS (1);
CREATE TOPIC over AS SELECT ts, voltage FROM power.meters WHERE voltage > 220;
"""


def _replica(dnode: ServerProcess) -> tuple[set[object], set[object], set[str]]:
    catalog, _ = load_readonly(dnode.data / CATALOG_FILE)
    return set(catalog.tables), set(catalog.stables), set(catalog.topics)


def _events(dnode: ServerProcess, vgroup: int) -> list[dict[str, object]]:
    wal = open_readonly(vnode_dir(dnode.data, vgroup) / "wal")
    return [
        json.loads(bytes(r.body))
        for batch in wal.batches(wal.first_version)
        for r in batch
        if r.entry_type is EntryType.META
    ]


def _mnode_tables(cluster: Cluster) -> tuple[set[object], set[object], set[str]]:
    catalog, _ = load_readonly(cluster.mnode.data / CATALOG_FILE)
    return set(catalog.tables), set(catalog.stables), set(catalog.topics)


def _placement(cluster: Cluster) -> dict[int, ServerProcess]:
    by_address = {d.address: d for d in cluster.dnodes}
    return {int(str(r[1])): by_address[str(r[3])] for r in cluster.sql("SHOW power.VGROUPS")}


def _synced(cluster: Cluster) -> bool:
    want = _mnode_tables(cluster)
    return all((d.data / CATALOG_FILE).exists() and _replica(d) == want for d in cluster.dnodes)


def test_ddl_reaches_every_dnode_and_its_vgroups_wals(cluster: Cluster) -> None:
    for _ in range(2):
        cluster.wait_status(cluster.add_dnode(), "ready")
    with cluster.connect() as conn:
        conn.execute(SCHEMA)
    wait_for(lambda: _synced(cluster), "every dnode's catalog as the mnode's")
    tables, stables, topics = _mnode_tables(cluster)
    assert tables == {("power", "d1")}
    assert stables == {("power", "meters")}
    assert topics == {"over"}
    placement = _placement(cluster)
    (d1_vgroup,) = [r[5] for r in cluster.sql("SHOW power.TABLES")]
    for vgroup, dnode in placement.items():
        events = _events(dnode, vgroup)
        kinds = [(e["type"], e["tableName"]) for e in events]
        want = [("create", "meters")] + ([("create", "d1")] if vgroup == d1_vgroup else [])
        assert kinds == want, (vgroup, kinds)
    # every vgroup got the very same stable event, byte for byte
    stable_events = {json.dumps(_events(d, v)[0], sort_keys=True) for v, d in placement.items()}
    assert len(stable_events) == 1


def test_a_dnode_down_during_ddl_catches_up_when_it_returns(cluster: Cluster) -> None:
    first, second = (cluster.add_dnode() for _ in range(2))
    for dnode in (first, second):
        cluster.wait_status(dnode, "ready")
    with cluster.connect() as conn:
        conn.execute(SCHEMA)
    wait_for(lambda: _synced(cluster), "the schema on both dnodes")
    second.kill()
    cluster.wait_status(second, "offline")
    with cluster.connect() as conn:
        conn.execute(
            "CREATE TABLE power.d2 USING power.meters TAGS (2);"
            "CREATE TABLE power.d3 USING power.meters TAGS (3);"
            "ALTER STABLE power.meters ADD COLUMN phase FLOAT;"
            "DROP TOPIC over"
        )
    assert _replica(second)[0] == {("power", "d1")}  # it was down: nothing reached it
    again = cluster.restart(second)
    cluster.wait_status(again, "ready")
    wait_for(lambda: _synced(cluster), "the dnode caught up")
    assert _replica(again)[2] == set()
    placement = _placement(cluster)
    for vgroup, dnode in placement.items():
        events = _events(dnode, vgroup)
        assert [e["type"] for e in events].count("alter") == 1, (vgroup, events)
    # DDL events in the same order on every vgroup of the restarted dnode as on the other
    orders = {
        v: [e["type"] for e in _events(d, v) if e.get("tableName") == "meters"]
        for v, d in placement.items()
    }
    assert set(map(tuple, orders.values())) == {("create", "alter")}


def test_the_replica_survives_a_restart_without_applying_twice(cluster: Cluster) -> None:
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    with cluster.connect() as conn:
        conn.execute(SCHEMA)
    wait_for(lambda: _synced(cluster), "the schema on the dnode")
    before = {v: _events(dnode, v) for v in _placement(cluster)}
    dnode.stop()
    again = cluster.restart(dnode)
    cluster.wait_status(again, "ready")
    cluster.sql("CREATE TABLE power.d9 USING power.meters TAGS (9)")
    wait_for(lambda: _synced(cluster), "the new table on the dnode")
    after = {v: _events(again, v) for v in _placement(cluster)}
    assert sum(len(e) for e in after.values()) == sum(len(e) for e in before.values()) + 1


@pytest.mark.crash
def test_a_killed_mnode_comes_back_and_its_dnodes_go_on(cluster: Cluster) -> None:
    """SIGKILL of the mnode: its dnodes keep what they applied, become ready again once
    it is back, and the changes go on from there, none applied twice."""
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    with cluster.connect() as conn:
        conn.execute(SCHEMA)
    wait_for(lambda: _synced(cluster), "the schema on the dnode")
    before = {v: len(_events(dnode, v)) for v in _placement(cluster)}
    cluster.mnode.kill()
    cluster.wait_stderr(dnode, "not reachable")
    cluster.mnode = cluster.restart_mnode()
    cluster.wait_status(dnode, "ready")
    cluster.sql("CREATE TABLE power.d5 USING power.meters TAGS (5)")
    wait_for(lambda: _synced(cluster), "the new table on the dnode")
    after = {v: len(_events(dnode, v)) for v in _placement(cluster)}
    assert sum(after.values()) == sum(before.values()) + 1
    assert _replica(dnode)[0] == {("power", "d1"), ("power", "d5")}


def test_a_statement_returns_once_the_ready_dnodes_applied_it(cluster: Cluster) -> None:
    """Held heartbeats take a change at once, and the statement waits for the ready
    dnodes: what it created is on every one of them when it returns, with no wait."""
    for _ in range(2):
        cluster.wait_status(cluster.add_dnode(), "ready")
    with cluster.connect() as conn:
        conn.execute(SCHEMA)
        assert _synced(cluster)
        conn.execute("CREATE TABLE power.d4 USING power.meters TAGS (4)")
        assert all(("power", "d4") in _replica(d)[0] for d in cluster.dnodes)


def test_a_dnode_joining_after_the_log_was_trimmed_gets_a_snapshot(cluster: Cluster) -> None:
    first = cluster.add_dnode()
    cluster.wait_status(first, "ready")
    with cluster.connect() as conn:
        conn.execute(SCHEMA)
        conn.execute(
            ";".join(f"CREATE TABLE power.t{i} USING power.meters TAGS ({i})" for i in range(110))
        )
    mnode_db = cluster.mnode.data / CATALOG_FILE

    def first_kept() -> int:
        uri = f"{mnode_db.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as con:
            return int(con.execute("SELECT MIN(seq) FROM changes").fetchone()[0] or 0)

    wait_for(lambda: first_kept() > 100, "the applied changes trimmed")
    second = cluster.add_dnode()
    cluster.wait_status(second, "ready")
    wait_for(lambda: _synced(cluster), "the snapshot on the new dnode")
    assert len(_replica(second)[0]) == 111
