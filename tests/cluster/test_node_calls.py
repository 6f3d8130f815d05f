"""Hostile calls between nodes, sent straight to a live mnode and dnode: Cluster.
CreateTables and Dnode.Append with a wrong, stale or missing proof, or too large, are
refused and change nothing; proven ones work (an mnode's rows reach a dnode's WAL)."""

from __future__ import annotations

import secrets
import time

import grpc
import pyarrow as pa
import pytest

from sqltopic.proto.arrow_ipc import to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import PROOF_WINDOW_MS, prove
from sqltopic.server.rpc.cluster_service import create_tables_fields
from sqltopic.server.rpc.dnode_service import (
    MAX_APPEND_ENTRIES,
    MAX_READ_ENTRIES,
    append_fields,
    entries_fields,
    lags_fields,
    offsets_fields,
)
from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly
from sqltopic.sql.entries import vnode_dir
from sqltopic.wal import data_entry, open_readonly
from tests.cluster.support import SECRET, Cluster

pytestmark = pytest.mark.cluster

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def one(cluster: Cluster) -> Cluster:
    dnode = cluster.add_dnode()
    cluster.wait_status(dnode, "ready")
    cluster.sql(
        "CREATE DATABASE power VGROUPS 1; "
        "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT)"
    )
    return cluster


def _create(secret: str = SECRET, sent_ms: int | None = None, user: str = "root",
            dnode_id: int = 1) -> pb.CreateTablesRequest:  # fmt: skip
    names = pa.table({"tbname": ["n1"], "loc": [1]})
    request = pb.CreateTablesRequest(
        dnode_id=dnode_id, sent_ms=int(time.time() * 1000) if sent_ms is None else sent_ms,
        user=user, target="power.meters", arrow=to_ipc(names).to_pybytes(),
    )  # fmt: skip
    request.proof = prove(secret, request.sent_ms, *create_tables_fields(request))
    return request


def _tables(cluster: Cluster) -> set[tuple[str, str]]:
    return set(load_readonly(cluster.mnode.data / CATALOG_FILE)[0].tables)


def _fails(call: object, request: object, code: grpc.StatusCode, words: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)  # type: ignore[operator]
    assert caught.value.code() == code, caught.value.details()
    assert words in (caught.value.details() or ""), caught.value.details()


def test_create_tables_needs_the_secret_and_an_admitted_dnode(one: Cluster) -> None:
    stale = int(time.time() * 1000) - PROOF_WINDOW_MS - 60_000
    with grpc.insecure_channel(one.mnode.address) as channel:
        stub = pb_grpc.ClusterStub(channel)
        _fails(stub.CreateTables, _create("wrong-secret-wrong-secret"), UNAUTHENTICATED, "match")
        _fails(stub.CreateTables, _create(sent_ms=stale), UNAUTHENTICATED, "clocks")
        _fails(stub.CreateTables, _create(dnode_id=9), grpc.StatusCode.NOT_FOUND, "not admitted")
        _fails(stub.CreateTables, _create(user="u" * 1000), INVALID, "at most")
        _fails(stub.CreateTables, _create(user="nobody"), grpc.StatusCode.NOT_FOUND, "")
        assert ("power", "n1") not in _tables(one)
        assert stub.CreateTables(_create(), timeout=30).catalog_change > 0
        assert ("power", "n1") in _tables(one)


def _append(
    entries: list[bytes], secret: str = SECRET, vgroup: int = 1, nonce: bytes | None = None
) -> pb.AppendRequest:
    request = pb.AppendRequest(
        sent_ms=int(time.time() * 1000), vgroup=vgroup, catalog_change=0, entries=entries,
        nonce=secrets.token_bytes(16) if nonce is None else nonce,
    )  # fmt: skip
    request.proof = prove(secret, request.sent_ms, *append_fields(request))
    return request


def test_append_needs_the_secret_and_changes_nothing_when_refused(one: Cluster) -> None:
    dnode = one.dnodes[0]
    body = bytes(data_entry(pa.table({"ts": [1], "v": [1]})).body)
    with grpc.insecure_channel(dnode.address) as channel:
        stub = pb_grpc.DnodeStub(channel)
        _fails(stub.Append, _append([body], "wrong-secret-wrong-secret"), UNAUTHENTICATED, "match")
        _fails(stub.Append, _append([]), INVALID, "entries")
        _fails(stub.Append, _append([b""]), INVALID, "no body")
        _fails(stub.Append, _append([b"x"] * (MAX_APPEND_ENTRIES + 1)), INVALID, "entries")
        _fails(stub.Append, _append([body], vgroup=99), grpc.StatusCode.UNAVAILABLE, "not hosted")
        forged = _append([body])
        forged.vgroup = 2  # the proof covers the vgroup
        _fails(stub.Append, forged, UNAUTHENTICATED, "match")
        _fails(stub.Append, _append([body], nonce=b""), INVALID, "nonce")
        taken = _append([body])
        first = stub.Append(taken, timeout=30).last_version
        _fails(stub.Append, taken, UNAUTHENTICATED, "replay")  # its nonce was taken
    wal = open_readonly(vnode_dir(one.dnodes[0].data, 1) / "wal")
    assert wal.state().next_version == first + 1  # appended once: the refused wrote nothing


def _entries(secret: str = SECRET, vgroup: int = 1, max_entries: int = 10) -> pb.EntriesRequest:
    request = pb.EntriesRequest(
        sent_ms=int(time.time() * 1000), vgroup=vgroup, from_version=1, max_entries=max_entries
    )
    request.proof = prove(secret, request.sent_ms, *entries_fields(request))
    return request


def _offsets(secret: str = SECRET, vgroup: int = 1) -> pb.OffsetsRequest:
    request = pb.OffsetsRequest(sent_ms=int(time.time() * 1000), vgroup=vgroup, topic="t")
    request.proof = prove(secret, request.sent_ms, *offsets_fields(request))
    return request


def _lags(
    secret: str = SECRET, vgroup: int = 1, position: int | None = 1, count: int = 1
) -> pb.LagsRequest:
    request = pb.LagsRequest(sent_ms=int(time.time() * 1000), vgroup=vgroup)
    for _ in range(count):
        request.subscriptions.add(topic="t", group="g", position=position)
    request.proof = prove(secret, request.sent_ms, *lags_fields(request))
    return request


def test_the_mnode_s_reads_of_a_dnode_need_the_secret(one: Cluster) -> None:
    with grpc.insecure_channel(one.dnodes[0].address) as channel:
        stub = pb_grpc.DnodeStub(channel)
        _fails(stub.Entries, _entries("wrong-secret-wrong-secret"), UNAUTHENTICATED, "match")
        _fails(stub.Entries, _entries(max_entries=MAX_READ_ENTRIES + 1), INVALID, "entries")
        _fails(stub.Entries, _entries(vgroup=99), grpc.StatusCode.UNAVAILABLE, "not hosted")
        _fails(stub.Offsets, _offsets("wrong-secret-wrong-secret"), UNAUTHENTICATED, "match")
        _fails(stub.Offsets, _offsets(vgroup=99), grpc.StatusCode.UNAVAILABLE, "not hosted")
        answer = stub.Entries(_entries(), timeout=30)
        assert answer.first_version == 1
        assert [e.version for e in answer.entries] == list(range(1, answer.next_version))
        assert stub.Offsets(_offsets(), timeout=30).offsets == []
        _fails(stub.Lags, _lags("wrong-secret-wrong-secret"), UNAUTHENTICATED, "match")
        _fails(stub.Lags, _lags(vgroup=99), grpc.StatusCode.UNAVAILABLE, "not hosted")
        _fails(stub.Lags, _lags(count=65_537), grpc.StatusCode.RESOURCE_EXHAUSTED, "at most")
        forged = _lags(position=1)
        forged.subscriptions[0].position = 2  # changed after the proof: refused
        _fails(stub.Lags, forged, UNAUTHENTICATED, "match")
        (lag,) = stub.Lags(_lags(), timeout=30).lags
        assert lag.lag_rows >= 0
        assert not lag.HasField("last_commit_us")  # group g never committed
        (unknown,) = stub.Lags(_lags(position=None), timeout=30).lags
        assert not unknown.HasField("lag_rows")
