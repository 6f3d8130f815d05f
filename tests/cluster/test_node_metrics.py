"""`--metrics-port` on a dnode: its own WALs' figures (rows written to the vgroups it
hosts), without the groups' (the mnode's)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.cluster.support import Cluster
from tests.server.test_metrics import METRICS_LINE, scrape

pytestmark = pytest.mark.cluster


def test_a_dnode_serves_its_own_metrics(cluster: Cluster) -> None:
    dnode = cluster.add_dnode(extra=("--metrics-port", "0"))
    cluster.wait_status(dnode, "ready")
    (line,) = dnode.before_ready
    url = line[len(METRICS_LINE) :].strip()
    cluster.sql(
        "CREATE DATABASE power VGROUPS 2; "
        "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT)"
    )
    with cluster.connect() as conn:
        conn.write("power.meters", pa.table({
            "tbname": [f"d{i}" for i in range(10)], "ts": pa.array(range(10), pa.timestamp("ms")),
            "v": list(range(10)), "loc": [1] * 10,
        }))  # fmt: skip
    found = scrape(url)
    assert found[("sqltopic_rows_written_total", (("database", "power"),))] == 10
    assert ("sqltopic_polls_total", ()) in found
    assert not any(name == "sqltopic_consumers" for name, _ in found)  # the mnode's
