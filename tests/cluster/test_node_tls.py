"""TLS between the nodes of a cluster: a dnode dials a TLS mnode when given its CA
(`--mnode-tls-ca`), presenting its own certificate when the mnode asks for one; without
the CA it never becomes ready and says why; and an mnode dials its TLS dnodes trusting
`--dnode-tls-ca`, for the rows and reads it sends them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.cluster.support import Cluster
from tests.security.certs import make_pki

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("mutual", [False, True])
def test_a_dnode_joins_a_tls_mnode_with_its_ca(tmp_path: Path, mutual: bool) -> None:
    pki = make_pki(tmp_path / "pki")
    client = (pki.client_cert, pki.client_key)
    cluster = Cluster(tmp_path / "c", pki.server_args(mutual=mutual), pki.ca, client)
    try:
        extra = ("--mnode-tls-ca", str(pki.ca), *pki.server_args())
        dnode = cluster.add_dnode(extra=extra)
        cluster.wait_status(dnode, "ready")
        plain = cluster.add_dnode()  # speaks plain text to a TLS mnode
        cluster.wait_stderr(plain, "TLS on one side only")
        assert cluster.status(plain) == "offline"
        cluster.sql("CREATE DATABASE db VGROUPS 2")
        assert {r[2] for r in cluster.sql("SHOW VGROUPS")} == {1}  # all on the TLS dnode
    finally:
        cluster.close()


def test_an_unreadable_mnode_ca_stops_the_dnode(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    try:
        with pytest.raises(AssertionError, match="--mnode-tls-ca"):
            cluster.add_dnode(extra=("--mnode-tls-ca", str(tmp_path / "missing.pem")))
    finally:
        cluster.close()


@pytest.mark.parametrize("mutual", [False, True])
def test_a_tls_cluster_carries_routed_writes_and_the_mnode_s_calls_to_its_dnodes(
    tmp_path: Path, mutual: bool
) -> None:
    """Every node speaks TLS: the client's writes go to the dnode over TLS (trusting the
    same CA), and the mnode dials the dnode with `--dnode-tls-ca` for an INSERT's rows
    (Dnode.Append) and a SELECT's (Dnode.Entries)."""
    pki = make_pki(tmp_path / "pki")
    client = (pki.client_cert, pki.client_key)
    mnode_args = (*pki.server_args(mutual=mutual), "--dnode-tls-ca", str(pki.ca))
    cluster = Cluster(tmp_path / "c", mnode_args, pki.ca, client)
    try:
        extra = ("--mnode-tls-ca", str(pki.ca), *pki.server_args(mutual=mutual))
        cluster.wait_status(cluster.add_dnode(extra=extra), "ready")
        cluster.sql(
            "CREATE DATABASE db VGROUPS 2; "
            "CREATE STABLE db.m (ts TIMESTAMP, v INT) TAGS (n INT); "
            "INSERT INTO db.t1 USING db.m TAGS (1) VALUES (1000, 1) (2000, 2)"
        )
        rows = pa.table({
            "tbname": ["t1", "t2"], "ts": pa.array([3000, 4000], pa.timestamp("ms")),
            "v": [3, 4], "n": [1, 2],
        })  # fmt: skip
        with cluster.connect() as conn:
            assert conn.write("db.m", rows) == 2
            got = conn.execute("SELECT tbname, v FROM db.m ORDER BY ts").rows
        assert got == [("t1", 1), ("t1", 2), ("t1", 3), ("t2", 4)]
    finally:
        cluster.close()
