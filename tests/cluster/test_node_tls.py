"""TLS between the nodes of a cluster: a dnode dials a TLS mnode when given its CA
(`--mnode-tls-ca`), presenting its own certificate when the mnode asks for one; without
the CA it never becomes ready and says why."""

from __future__ import annotations

from pathlib import Path

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
