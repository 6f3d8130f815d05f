"""`Dnode`, a dnode's service for its mnode: the rows of an INSERT the mnode ran for the
vgroups this dnode hosts (`Append`), proven with the cluster secret. Clients never call
it: they write to the dnodes through `Sql.Write` themselves (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import hashlib
import time

from sqltopic.errors import ConfigError, VgroupUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import verify
from sqltopic.server.core.engine import DNODE_APPLY_WAIT_S, Engine
from sqltopic.server.rpc.cluster_service import PROOF_BYTES
from sqltopic.server.rpc.rpc import Context, unary

# Entries of one forwarded INSERT in one vgroup: an INSERT is at most max_sql_bytes of
# text, which makes far fewer entries (one per run of tables).
MAX_APPEND_ENTRIES = 100_000


class DnodeService(pb_grpc.DnodeServicer):
    def __init__(self, engine: Engine, secret: str) -> None:
        self._engine = engine
        self._secret = secret

    @unary
    async def Append(self, request: pb.AppendRequest, context: Context) -> pb.AppendResponse:
        self._check_sizes(request)  # before the proof: its cost grows with the request
        now_ms = int(time.time() * 1000)
        verify(self._secret, request.proof, now_ms, request.sent_ms, *append_fields(request))
        last = await asyncio.to_thread(self._append, request)
        return pb.AppendResponse(last_version=last)

    def _append(self, request: pb.AppendRequest) -> int:
        if not self._engine.wait_change(request.catalog_change, DNODE_APPLY_WAIT_S):
            raise VgroupUnavailable(
                f"vgroup {request.vgroup}: this dnode has not applied catalog change "
                f"{request.catalog_change} (the tables of these rows) within "
                f"{DNODE_APPLY_WAIT_S:g} s; nothing was written, retry"
            )
        return self._engine.append_rows(request.vgroup, list(request.entries))

    def _check_sizes(self, request: pb.AppendRequest) -> None:
        if len(request.proof) > PROOF_BYTES:
            raise ConfigError(f"a request's proof has {PROOF_BYTES} bytes")
        if not 0 < len(request.entries) <= MAX_APPEND_ENTRIES:
            raise ConfigError(f"Append carries 1..{MAX_APPEND_ENTRIES} entries")
        if any(not body for body in request.entries):
            raise ConfigError("Append: an entry has no body")


def append_fields(request: pb.AppendRequest) -> tuple[str | int | bytes, ...]:
    """What an Append's proof covers after its send time (both sides build it here)."""
    digest = hashlib.sha256()
    for body in request.entries:
        digest.update(len(body).to_bytes(8, "big"))
        digest.update(body)
    return ("dnode-append", request.vgroup, request.catalog_change, digest.digest())
