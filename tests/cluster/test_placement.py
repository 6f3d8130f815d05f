"""Databases placed on a cluster's dnodes, as real processes: the placement rule, the
dnodes opening and dropping their vgroups as their heartbeats learn the placement, a
restart reopening them, offline dnodes, and what the mnode refuses meanwhile."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from sqltopic.errors import VgroupUnavailable
from tests.cluster.support import Cluster
from tests.wal.waits import wait_for

pytestmark = pytest.mark.cluster


def _vgroups(cluster: Cluster) -> list[tuple[object, ...]]:
    return cluster.sql("SHOW VGROUPS")


def _all_ready(cluster: Cluster) -> None:
    wait_for(lambda: {r[4] for r in _vgroups(cluster)} <= {"ready"}, "every vgroup ready")


def test_vgroups_spread_over_the_dnodes_by_load(cluster: Cluster) -> None:
    dnodes = [cluster.add_dnode() for _ in range(3)]
    for dnode in dnodes:
        cluster.wait_status(dnode, "ready")
    cluster.sql("CREATE DATABASE power VGROUPS 4")
    cluster.sql("CREATE DATABASE small VGROUPS 2")
    _all_ready(cluster)
    rows = _vgroups(cluster)
    # power: round-robin from dnode 1; small: the least loaded first (2 and 3 host one)
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in rows] == [
        ("power", 1, 1, dnodes[0].address, "empty"),
        ("power", 2, 2, dnodes[1].address, "empty"),
        ("power", 3, 3, dnodes[2].address, "empty"),
        ("power", 4, 1, dnodes[0].address, "empty"),
        ("small", 5, 2, dnodes[1].address, "empty"),
        ("small", 6, 3, dnodes[2].address, "empty"),
    ]
    assert [r[3] for r in cluster.dnode_rows().values()] == [2, 2, 2]
    hosted = [sorted(p.name for p in (d.data / "vnode").iterdir()) for d in dnodes]
    assert hosted == [["vnode1", "vnode4"], ["vnode2", "vnode5"], ["vnode3", "vnode6"]]
    assert not (cluster.mnode.data / "vnode").exists() or not any(
        (cluster.mnode.data / "vnode").iterdir()
    )

    cluster.sql("ALTER DATABASE small WAL_LEVEL 2 WAL_RETENTION_PERIOD 60")
    wait_for(
        lambda: (
            json.loads((dnodes[1].data / "placed.json").read_text())[-1]["wal"]
            == {"WAL_LEVEL": 2, "WAL_RETENTION_PERIOD": 60}
        ),
        "the new options on dnode 2",
    )
    cluster.sql("DROP DATABASE power")
    wait_for(
        lambda: (
            not (dnodes[0].data / "vnode" / "vnode1").exists()
            and not (dnodes[1].data / "vnode" / "vnode2").exists()
        ),
        "power's vgroups dropped on their dnodes",
    )
    assert [r[1] for r in _vgroups(cluster)] == [5, 6]
    assert (dnodes[1].data / "vnode" / "vnode5").is_dir()


def test_a_restarted_dnode_reopens_its_vgroups(cluster: Cluster) -> None:
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    cluster.sql("CREATE DATABASE db VGROUPS 2")
    _all_ready(cluster)
    dnode.kill()
    cluster.wait_status(dnode, "offline")
    assert {r[4] for r in _vgroups(cluster)} == {"offline"}
    with pytest.raises(VgroupUnavailable, match="no dnode is ready"):
        cluster.sql("CREATE DATABASE later VGROUPS 1")
    assert [r[0] for r in cluster.sql("SHOW DATABASES")].count("later") == 0
    again = cluster.restart(dnode)
    cluster.wait_status(again, "ready")
    _all_ready(cluster)
    assert sorted(p.name for p in (again.data / "vnode").iterdir()) == ["vnode1", "vnode2"]


def test_without_dnodes_no_database_is_created(cluster: Cluster) -> None:
    with pytest.raises(VgroupUnavailable, match="no dnode is ready to host its vgroups"):
        cluster.sql("CREATE DATABASE db VGROUPS 2")
    cluster.add_dnode(admit=False)  # not admitted: not a host either
    with pytest.raises(VgroupUnavailable, match="no dnode is ready"):
        cluster.sql("CREATE DATABASE db VGROUPS 2")
    assert "db" not in [r[0] for r in cluster.sql("SHOW DATABASES")]


def test_the_mnode_s_sql_over_a_dead_dnode_s_vgroup_says_so(cluster: Cluster) -> None:
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    cluster.sql("CREATE DATABASE db VGROUPS 1; CREATE TABLE db.t (ts TIMESTAMP, v INT)")
    cluster.sql("INSERT INTO db.t VALUES (1, 1)")
    assert cluster.sql("SELECT * FROM db.t") == [(datetime(1970, 1, 1, 0, 0, 0, 1000), 1)]
    dnode.kill()
    cluster.wait_status(dnode, "offline")
    for sql in ("SELECT * FROM db.t", "INSERT INTO db.t VALUES (2, 2)"):
        with pytest.raises(VgroupUnavailable, match="does not answer"):
            cluster.sql(sql)
    assert [r[0] for r in cluster.sql("SHOW db.TABLES")] == ["t"]
    back = cluster.restart(dnode)
    cluster.wait_status(back, "ready")
    wait_for(lambda: _served(cluster), "the restarted dnode serving its vgroup")
    assert [r[1] for r in cluster.sql("SELECT * FROM db.t")] == [1]  # the refused row is not


def _served(cluster: Cluster) -> bool:
    """Whether the mnode's SELECT of db.t is answered (a dnode that was just restarted
    answers VgroupUnavailable until it caught up with the catalog)."""
    try:
        cluster.sql("SELECT * FROM db.t")
    except VgroupUnavailable:
        return False
    return True
