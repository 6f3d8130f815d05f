"""The `cluster` fixture: an mnode process in a temp directory, dnodes added by tests;
`three_dnodes`: the cluster with three ready dnodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.support import Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def three_dnodes(cluster: Cluster) -> Cluster:
    """The issue's cluster: an mnode and three ready dnodes."""
    for _ in range(3):
        dnode = cluster.add_dnode()
        cluster.wait_status(dnode, "ready")
    return cluster
