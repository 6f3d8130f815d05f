"""`Dnode`, a dnode's service for its mnode: the rows of an INSERT the mnode ran for the
vgroups this dnode hosts (`Append`), proven with the cluster secret. Clients never call
it: they write to the dnodes through `Sql.Write` themselves (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import hashlib
import time

from sqltopic.errors import ConfigError, VersionNotRetained, VgroupUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import NONCE_BYTES, Nonces, verify
from sqltopic.server.core.engine import DNODE_APPLY_WAIT_S, Engine
from sqltopic.server.rpc.cluster_service import PROOF_BYTES
from sqltopic.server.rpc.rpc import Context, unary

# Entries of one forwarded INSERT in one vgroup: an INSERT is at most max_sql_bytes of
# text, which makes far fewer entries (one per run of tables).
MAX_APPEND_ENTRIES = 100_000
# Entries one Entries call reads at most, and their bytes (one larger entry alone): an
# answer within gRPC's default 4 MiB message.
MAX_READ_ENTRIES = 4096
READ_BYTES = 4 << 20


class DnodeService(pb_grpc.DnodeServicer):
    def __init__(self, engine: Engine, secret: str) -> None:
        self._engine = engine
        self._secret = secret
        self._nonces = Nonces()

    @unary
    async def Append(self, request: pb.AppendRequest, context: Context) -> pb.AppendResponse:
        self._check_sizes(request)  # before the proof: its cost grows with the request
        now_ms = int(time.time() * 1000)
        verify(self._secret, request.proof, now_ms, request.sent_ms, *append_fields(request))
        self._nonces.take(request.nonce, request.sent_ms, now_ms)  # a replay appends nothing
        last = await asyncio.to_thread(self._append, request)
        return pb.AppendResponse(last_version=last)

    @unary
    async def Entries(self, request: pb.EntriesRequest, context: Context) -> pb.EntriesResponse:
        self._check_proof(request.proof, request.sent_ms, entries_fields(request))
        if not 0 <= request.max_entries <= MAX_READ_ENTRIES:
            raise ConfigError(f"Entries reads 0..{MAX_READ_ENTRIES} entries")
        return await asyncio.to_thread(self._entries, request)

    def _entries(self, request: pb.EntriesRequest) -> pb.EntriesResponse:
        wal = self._engine.hosted(request.vgroup).wal
        answer = pb.EntriesResponse(first_version=wal.first_version, next_version=wal.next_version)
        if request.max_entries == 0:
            return answer
        start = max(request.from_version, wal.first_version)
        try:
            records = (
                self._engine.hosted(request.vgroup)
                .reader()
                .read(start, max_entries=request.max_entries, max_bytes=READ_BYTES)
            )
        except VersionNotRetained as gone:  # retention ran meanwhile: say where it starts
            answer.first_version = gone.first_version
            return answer
        answer.entries.extend(
            pb.RawEntry(version=r.version, entry_type=int(r.entry_type),
                        ingest_us=r.ingest_us, body=bytes(r.body))
            for r in records
        )  # fmt: skip
        return answer

    @unary
    async def Offsets(self, request: pb.OffsetsRequest, context: Context) -> pb.OffsetsResponse:
        self._check_proof(request.proof, request.sent_ms, offsets_fields(request))
        offsets = self._engine.hosted(request.vgroup).offsets
        pairs = offsets.subscriptions(request.topic)
        found = [(t, g, offsets.get(t, g)) for t, g in pairs]
        return pb.OffsetsResponse(offsets=[
            pb.GroupOffset(topic=t, group=g, offset=o) for t, g, o in found if o is not None
        ])  # fmt: skip

    def _check_proof(
        self, proof: bytes, sent_ms: int, fields: tuple[str | int | bytes, ...]
    ) -> None:
        if len(proof) > PROOF_BYTES:
            raise ConfigError(f"a request's proof has {PROOF_BYTES} bytes")
        verify(self._secret, proof, int(time.time() * 1000), sent_ms, *fields)

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
        if len(request.nonce) != NONCE_BYTES:
            raise ConfigError(f"Append carries a {NONCE_BYTES}-byte nonce")


def entries_fields(request: pb.EntriesRequest) -> tuple[str | int | bytes, ...]:
    """What an Entries request's proof covers after its send time."""
    return ("dnode-entries", request.vgroup, request.from_version, request.max_entries)


def offsets_fields(request: pb.OffsetsRequest) -> tuple[str | int | bytes, ...]:
    """What an Offsets request's proof covers after its send time."""
    return ("dnode-offsets", request.vgroup, request.topic)


def append_fields(request: pb.AppendRequest) -> tuple[str | int | bytes, ...]:
    """What an Append's proof covers after its send time (both sides build it here)."""
    digest = hashlib.sha256()
    for body in request.entries:
        digest.update(len(body).to_bytes(8, "big"))
        digest.update(body)
    return ("dnode-append", request.vgroup, request.catalog_change, request.nonce, digest.digest())
