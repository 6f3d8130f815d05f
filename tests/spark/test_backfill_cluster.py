"""The backfill of a cluster's topic, from a machine that sees no data directory: the
job reads through the mnode and each vgroup's dnode (ReadCatalog, Routes, OffsetRange,
ReadEntries), and its rows equal what a consumer receives; the hand-off to a group
commits at each dnode."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sqltopic.cli import backfill
from sqltopic.client import admin, connect
from tests.cluster.support import Cluster
from tests.spark.test_backfill_vs_consumer import TOPICS, _history, check_against_consumer
from tests.spark.test_handoff import manifest_ends

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

POWER = """
CREATE DATABASE power VGROUPS 3;
USE power;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);
"""


@pytest.fixture
def three(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path / "cluster")
    try:
        for _ in range(3):
            dnode = made.add_dnode()
            made.wait_status(dnode, "ready")
        made.sql(POWER)
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_a_cluster_s_backfill_equals_consuming_from_earliest(
    three: Cluster, spark: Any, tmp_path: Path, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no data directory here, nor at the default path
    with three.connect() as conn:
        conn.execute(f"CREATE TOPIC {topic} AS {TOPICS[topic]}")
        _history(conn)  # SQL INSERTs through the mnode, forwarded to the dnodes
    dnodes = {str(r[3]) for r in three.sql("SHOW power.VGROUPS")}
    assert len(dnodes) == 3  # one vgroup on each
    check_against_consumer(three.mnode.address, topic, tmp_path / "out", spark, [])


def test_a_cluster_s_backfill_hands_the_group_over_at_each_dnode(
    three: Cluster, spark: Any, tmp_path: Path
) -> None:
    with three.connect() as conn:
        conn.execute(f"CREATE TOPIC calc AS {TOPICS['calc']}")
        _history(conn)
    out = tmp_path / "out"
    parser = argparse.ArgumentParser()
    backfill.add_parser(parser.add_subparsers())
    args = parser.parse_args(["backfill", "calc", "--output", str(out), "--server",
                              three.mnode.address, "--group", "g"])  # fmt: skip
    assert backfill.run(args, spark=spark) == 0
    ends = manifest_ends(out)
    by_address = {d.address: d for d in three.dnodes}
    placement = {int(str(r[1])): str(r[3]) for r in three.sql("SHOW power.VGROUPS")}
    for vgroup, end in ends.items():
        with connect(by_address[placement[vgroup]].address) as node:
            assert admin.committed(node, "calc", "g", [vgroup]) == {vgroup: end}
