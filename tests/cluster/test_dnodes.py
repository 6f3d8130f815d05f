"""Dnodes joining a cluster, as real processes on loopback: admission by CREATE DNODE,
the cluster secret, liveness in SHOW DNODES across a SIGKILL and a restart, DROP DNODE,
a data directory of another cluster, and hostile heartbeats sent straight to the mnode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import grpc
import pytest

from sqltopic.errors import NotFoundError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import PROOF_WINDOW_MS, prove
from sqltopic.server.rpc.cluster_service import MAX_HOSTED_VGROUPS, heartbeat_fields
from tests.cluster.support import SECRET, Cluster
from tests.live_server import free_port

pytestmark = pytest.mark.cluster

INSTANCE = "instance-of-the-tests"


def test_admitted_dnodes_become_ready_and_keep_their_identity(cluster: Cluster) -> None:
    dnodes = [cluster.add_dnode() for _ in range(3)]
    for dnode in dnodes:
        cluster.wait_status(dnode, "ready")
    rows = cluster.dnode_rows()
    assert [rows[d.address][:4] for d in dnodes] == [
        (i, d.address, "ready", 0) for i, d in enumerate(dnodes, start=1)
    ]
    identities = [json.loads((d.data / "dnode.json").read_text()) for d in dnodes]
    assert [i["dnode_id"] for i in identities] == [1, 2, 3]
    assert len({i["cluster_id"] for i in identities}) == 1
    assert [i["endpoint"] for i in identities] == [d.address for d in dnodes]


def test_a_dnode_waits_for_its_admission(cluster: Cluster) -> None:
    dnode = cluster.add_dnode(admit=False)
    cluster.wait_stderr(dnode, "is not admitted")
    assert f"CREATE DNODE '{dnode.address}'" in dnode.stderr()
    assert cluster.dnode_rows() == {}
    cluster.sql(f"CREATE DNODE '{dnode.address}'")
    cluster.wait_status(dnode, "ready")  # no restart needed


def test_a_wrong_secret_never_makes_a_dnode_ready(cluster: Cluster) -> None:
    good = cluster.add_dnode()
    bad = cluster.add_dnode(secret="not-the-cluster-secret-at-all")
    cluster.wait_stderr(bad, "the cluster secret does not match")
    cluster.wait_status(good, "ready")
    assert cluster.status(bad) == "offline"
    assert not (bad.data / "dnode.json").exists()
    assert cluster.dnode_rows()[bad.address][3] == 0


def test_a_killed_dnode_goes_offline_and_comes_back_as_itself(cluster: Cluster) -> None:
    dnode = cluster.add_dnode()
    other = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    ready_since = cluster.dnode_rows()[dnode.address][4]
    dnode.kill()
    cluster.wait_status(dnode, "offline")
    assert cluster.status(other) == "ready"
    offline_since = cluster.dnode_rows()[dnode.address][4]
    assert offline_since > ready_since  # type: ignore[operator]
    again = cluster.restart(dnode)
    cluster.wait_status(again, "ready")
    assert cluster.dnode_rows()[again.address][0] == 1
    assert json.loads((again.data / "dnode.json").read_text())["dnode_id"] == 1


def test_drop_dnode_removes_an_empty_dnode(cluster: Cluster) -> None:
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    cluster.sql("DROP DNODE 1")
    assert cluster.dnode_rows() == {}
    cluster.wait_stderr(dnode, "is not admitted")  # its heartbeats are refused now
    with pytest.raises(NotFoundError, match="dnode '1' does not exist"):
        cluster.sql("DROP DNODE 1")


def test_a_dnode_of_another_cluster_is_refused(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    dnode.stop()
    other = Cluster(tmp_path_factory.mktemp("other"))
    try:
        other.sql(f"CREATE DNODE '{dnode.address}'")
        moved = other.add_dnode(admit=False, data=dnode.data, port=dnode.port)
        other.wait_stderr(moved, "belongs to cluster")
        assert other.status(moved) == "offline"
    finally:
        other.close()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "a cluster needs a secret"),
        (["--cluster-secret", "short"], "the cluster secret has 5 characters"),
        (["--cluster-secret", "s" * 20, "--advertise", "h1"], "--advertise: dnode endpoint 'h1'"),
        (
            ["--cluster-secret", "s" * 20, "--host", "0.0.0.0", "--allow-plaintext"],
            "give --advertise HOST:PORT",
        ),
    ],
)
def test_a_dnode_without_a_usable_secret_does_not_start(
    tmp_path_factory: pytest.TempPathFactory, args: list[str], words: str
) -> None:
    data = tmp_path_factory.mktemp("d")
    env = {k: v for k, v in os.environ.items() if k != "SQLTOPIC_CLUSTER_SECRET"}
    command = [sys.executable, "-m", "sqltopic.cli", "dnode", "--data", str(data), "--port", "0"]
    done = subprocess.run(
        [*command, *args], check=False, capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 1
    assert words in done.stderr
    assert "Traceback" not in done.stderr


# --- hostile heartbeats, straight to the mnode -------------------------------------------------


def _beat(endpoint: str, *, secret: str = SECRET, sent_ms: int | None = None,
          vgroups: int = 0, dnode_id: int = 0,
          catalog_change: int = 0) -> pb.DnodeHeartbeatRequest:  # fmt: skip
    request = pb.DnodeHeartbeatRequest(
        endpoint=endpoint, dnode_id=dnode_id, catalog_change=catalog_change, instance=INSTANCE,
        sent_ms=int(time.time() * 1000) if sent_ms is None else sent_ms,
        vgroups=[pb.HostedVgroup(vgroup=v, first_version=1) for v in range(vgroups)],
    )  # fmt: skip
    request.proof = prove(secret, request.sent_ms, *heartbeat_fields(request))
    return request


def test_hostile_heartbeats_are_refused_and_change_nothing(cluster: Cluster) -> None:
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    cluster.sql(f"CREATE DNODE '{endpoint}'")
    now = int(time.time() * 1000)
    unauthenticated, invalid = grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT
    stale = now - PROOF_WINDOW_MS - 60_000
    cases = [
        (_beat(endpoint, secret="wrong-secret-wrong-secret"), unauthenticated, "does not match"),
        (_beat(endpoint, sent_ms=stale), unauthenticated, "clocks in sync"),
        (
            pb.DnodeHeartbeatRequest(endpoint=endpoint, instance=INSTANCE, proof=b"x" * 32),
            unauthenticated,
            "match",
        ),
        (_beat("127.0.0.1:1"), grpc.StatusCode.NOT_FOUND, "is not admitted"),
        (_beat(endpoint, dnode_id=7), invalid, "start it with its own data directory"),
        (_beat(endpoint, vgroups=MAX_HOSTED_VGROUPS + 1), invalid, "at most"),
    ]
    with grpc.insecure_channel(cluster.mnode.address) as channel:
        stub = pb_grpc.ClusterStub(channel)
        for request, code, words in cases:
            with pytest.raises(grpc.RpcError) as caught:
                stub.DnodeHeartbeat(request, timeout=30)
            assert caught.value.code() == code, caught.value.details()
            assert words in (caught.value.details() or "")
        assert cluster.dnode_rows()[endpoint][2] == "offline"
        beat = _beat(endpoint)
        assert stub.DnodeHeartbeat(beat, timeout=30).dnode_id == 1
        # the same heartbeat re-sent is taken (it says only what it said); an older one
        # is a replay
        assert stub.DnodeHeartbeat(beat, timeout=30).dnode_id == 1
        older = _beat(endpoint, sent_ms=beat.sent_ms - 1000)
        with pytest.raises(grpc.RpcError, match="older than one already taken"):
            stub.DnodeHeartbeat(older, timeout=30)
        ahead = _beat(endpoint, catalog_change=10**9)
        with pytest.raises(grpc.RpcError, match="restored from an older backup"):
            stub.DnodeHeartbeat(ahead, timeout=30)
        for huge in (
            pb.DnodeHeartbeatRequest(endpoint="h" * 1000, instance=INSTANCE, proof=b"x" * 32),
            pb.DnodeHeartbeatRequest(endpoint=endpoint, instance=INSTANCE, proof=b"x" * 64),
            pb.DnodeHeartbeatRequest(endpoint=endpoint, proof=b"x" * 32),  # no instance
        ):
            with pytest.raises(grpc.RpcError) as caught:
                stub.DnodeHeartbeat(huge, timeout=30)
            assert caught.value.code() == invalid
    assert cluster.dnode_rows()[endpoint][2] == "ready"


def test_a_blank_data_directory_at_a_dnode_s_endpoint_is_refused(cluster: Cluster) -> None:
    """A dnode is tied to the data directory it joined with: an empty one at its
    endpoint later (a new disk) would host its vgroups empty, and is refused."""
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    cluster.sql("CREATE DATABASE db VGROUPS 1")
    dnode.kill()
    cluster.wait_status(dnode, "offline")
    shutil.rmtree(dnode.data)
    again = cluster.restart(dnode)
    cluster.wait_stderr(again, "joined with another data directory")
    assert cluster.status(again) == "offline"
    assert not (again.data / "vnode").exists()
