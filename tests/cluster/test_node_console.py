"""`sqltopic mnode --http-port`: the cluster's console, on its mnode: vgroups on their
dnodes, and a group's lag in rows and time, which the mnode asks the dnodes for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.client.consumer import Consumer
from tests.client.support import config, drain
from tests.cluster.support import Cluster
from tests.console.support import call, console_url, login, wait_for

pytestmark = pytest.mark.cluster

DEVICES = [f"d{i}" for i in range(8)]
BEHIND = 3  # rows per device written after the group caught up


@pytest.fixture
def cluster_console(tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    cluster = Cluster(tmp_path, mnode_extra=("--http-port", "0"))
    try:
        for _ in range(2):
            cluster.wait_status(cluster.add_dnode(), "ready")
        yield cluster, console_url(cluster.mnode)
    finally:
        cluster.close()


def _write(cluster: Cluster, start: int, count: int) -> None:
    rows = [(d, t) for t in range(start, start + count) for d in DEVICES]
    ts = pa.array([t for _, t in rows], pa.timestamp("ms"))
    with cluster.connect() as conn:
        conn.write("power.meters", pa.table({
            "tbname": [d for d, _ in rows], "ts": ts, "v": [t for _, t in rows],
            "loc": [1] * len(rows),
        }))  # fmt: skip


def test_the_mnode_console_shows_lag_from_the_dnodes(
    cluster_console: tuple[Cluster, str],
) -> None:
    cluster, url = cluster_console
    cluster.sql(
        "CREATE DATABASE power VGROUPS 4; "
        "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT); "
        "CREATE TOPIC every AS SELECT ts, v FROM power.meters"
    )
    _write(cluster, 0, 5)
    consumer = Consumer(config(cluster.mnode.address, "g1"))
    try:
        consumer.subscribe(["every"])
        drain(consumer)
        consumer.commit(asynchronous=False)
        _write(cluster, 5, BEHIND)
        token = login(url)
        data = call(url + "api/overview", token=token).json
        dnodes = {d.address for d in cluster.dnodes}
        assert {v["endpoint"] for v in data["vgroups"]} == dnodes
        shown = [s for s in data["subscriptions"] if s["consumer_group"] == "g1"]
        assert sorted(s["vgroup_id"] for s in shown) == [1, 2, 3, 4]
        assert sum(s["lag_rows"] for s in shown) == BEHIND * len(DEVICES)
        assert [r["cause"] for r in data["rebalances"]] == ["join"]

        def sampled() -> list[Any]:
            lag = call(url + "api/overview", token=token).json["lag"]
            return [s for s in lag["series"] if s["group"] == "g1" and max(s["lag_ms"]) > 0]

        assert wait_for("the dnodes' lag sampled by the mnode", sampled)
    finally:
        consumer.close()
