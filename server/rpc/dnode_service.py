"""`Dnode`, a dnode's service for its mnode: the rows of an INSERT the mnode ran for the
vgroups this dnode hosts (`Append`), proven with the cluster secret. Clients never call
it: they write to the dnodes through `Sql.Write` themselves (docs/cluster.md)."""

from __future__ import annotations

import asyncio
import hashlib
import time

from sqltopic.errors import ConfigError, LimitExceeded, VersionNotRetained, VgroupUnavailable
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
# Subscriptions one Lags call may ask about: every (subscription, group) of a vgroup in
# one SHOW SUBSCRIPTIONS (10,000 bindings x a few groups), a few ms of work.
MAX_LAG_LOOKUPS = 65_536


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

    @unary
    async def Lags(self, request: pb.LagsRequest, context: Context) -> pb.LagsResponse:
        self._check_proof(request.proof, request.sent_ms, lags_fields(request))
        if len(request.subscriptions) > MAX_LAG_LOOKUPS:
            raise LimitExceeded(
                f"Lags: {len(request.subscriptions)} subscriptions in one call; at most "
                f"{MAX_LAG_LOOKUPS} (MAX_LAG_LOOKUPS)"
            )
        return await asyncio.to_thread(self._lags, request)

    def _lags(self, request: pb.LagsRequest) -> pb.LagsResponse:
        vnode = self._engine.hosted(request.vgroup)
        now_us = self._engine.now_us()
        answer = pb.LagsResponse()
        for sub in request.subscriptions:
            position = sub.position if sub.HasField("position") else None
            rows, ms, polled, committed = vnode.subscription_lag(
                sub.topic, sub.group, position, now_us
            )
            answer.lags.add(lag_rows=rows, lag_ms=ms, last_poll_us=polled, last_commit_us=committed)
        return answer

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


def lags_fields(request: pb.LagsRequest) -> tuple[str | int | bytes, ...]:
    """What a Lags request's proof covers after its send time: its vgroup and a digest
    of its subscriptions and positions (both sides build it here)."""
    digest = hashlib.sha256()
    for sub in request.subscriptions:
        position = str(sub.position) if sub.HasField("position") else ""
        for part in (sub.topic, sub.group, position):
            data = part.encode()
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
    return ("dnode-lags", request.vgroup, digest.hexdigest())


def append_fields(request: pb.AppendRequest) -> tuple[str | int | bytes, ...]:
    """What an Append's proof covers after its send time (both sides build it here)."""
    digest = hashlib.sha256()
    for body in request.entries:
        digest.update(len(body).to_bytes(8, "big"))
        digest.update(body)
    return ("dnode-append", request.vgroup, request.catalog_change, request.nonce, digest.digest())
