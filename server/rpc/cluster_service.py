"""`Cluster`, the mnode's service for its dnodes: their heartbeats, checked against the
cluster secret and the dnodes CREATE DNODE admitted, recorded in the dnodes' registry
(SHOW DNODES, SHOW VGROUPS)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from sqltopic.errors import ConfigError, NotFoundError, excerpt
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import prove, verify
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.dnode_registry import DnodeRegistry
from sqltopic.server.rpc.rpc import Context, unary
from sqltopic.sql.model import Dnode

# A dnode's heartbeat period (TDengine's statusInterval: one second). The mnode holds a
# heartbeat that finds no new catalog change up to this long, answering at once when one
# comes; the dnode beats again as soon as it is answered. The registry marks a dnode
# offline after three periods without one (dnode_registry.DNODE_TIMEOUT_S).
DNODE_HEARTBEAT_INTERVAL_MS = 1000
HOLD_S = DNODE_HEARTBEAT_INTERVAL_MS / 1000
# Vgroups one heartbeat may report: far more than a dnode hosts, a bound on the request.
MAX_HOSTED_VGROUPS = 100_000
# Catalog changes per answer: a dnode far behind catches up over several heartbeats,
# and an answer stays far below gRPC's 4 MiB (a change is a few KB at most).
MAX_CHANGES_PER_BEAT = 256
# Trim the change log once every admitted dnode applied this many more: one DELETE per
# hundred changes, not one per heartbeat.
TRIM_EVERY = 100


class ClusterService(pb_grpc.ClusterServicer):
    def __init__(self, engine: Engine, registry: DnodeRegistry, secret: str) -> None:
        self._engine = engine
        self._registry = registry
        self._secret = secret
        self._cluster_id = engine.cluster_id()
        self._waiters: list[asyncio.Future[None]] = []
        self._watching = False
        self._trimmed = 0  # changes up to here are trimmed from the log

    @unary
    async def DnodeHeartbeat(
        self, request: pb.DnodeHeartbeatRequest, context: Context
    ) -> pb.DnodeHeartbeatResponse:
        verify(
            self._secret, request.proof, int(time.time() * 1000), request.sent_ms,
            *heartbeat_fields(request),
        )  # fmt: skip
        dnode = self._admitted(request)
        if len(request.vgroups) > MAX_HOSTED_VGROUPS:
            raise ConfigError(f"a heartbeat reports at most {MAX_HOSTED_VGROUPS} vgroups")
        versions = {v.vgroup: (v.first_version, v.last_version) for v in request.vgroups}
        self._registry.beat(dnode.id, versions, request.catalog_change)
        await self._trim()
        await self._hold(request.catalog_change)
        placed = [
            pb.PlacedVgroup(
                database=db.name, vgroup=vgroup, precision=db.precision, wal_options=db.wal
            )
            for db, vgroup in self._engine.placed_on(dnode.id)
        ]
        last, changes = await asyncio.to_thread(
            self._engine.catalog_changes, request.catalog_change, MAX_CHANGES_PER_BEAT
        )
        answer = pb.DnodeHeartbeatResponse(
            dnode_id=dnode.id, cluster_id=self._cluster_id,
            heartbeat_interval_ms=0, placed=placed,  # held already: beat again at once
            catalog_change=last,
            changes=[pb.CatalogChange(seq=seq, body=body) for seq, body in changes],
        )  # fmt: skip
        answer.proof = prove(self._secret, *answer_fields(answer, request.proof))
        return answer

    async def _trim(self) -> None:
        """Drop the logged changes every admitted dnode applied."""
        floor = self._registry.applied_by_all(self._engine.catalog.dnodes)
        if floor is not None and floor >= self._trimmed + TRIM_EVERY:
            await asyncio.to_thread(self._engine.trim_changes, floor)
            self._trimmed = floor

    async def _hold(self, applied: int) -> None:
        """Until a catalog change after `applied` is logged, at most HOLD_S."""
        if not self._watching:  # on the loop, so that changes wake its futures
            loop = asyncio.get_running_loop()

            def watcher() -> None:
                loop.call_soon_threadsafe(self._wake)

            self._registry.watch(watcher)
            self._watching = True
        if self._registry.last_change > applied:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._registry.last_change > applied:  # logged while registering
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, HOLD_S)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _admitted(self, request: pb.DnodeHeartbeatRequest) -> Dnode:
        endpoint = request.endpoint.lower()
        found = [d for d in self._engine.catalog.dnodes.values() if d.endpoint == endpoint]
        if not found:
            raise NotFoundError(
                f"dnode {excerpt(request.endpoint)} is not admitted: as root on the mnode, "
                f"run CREATE DNODE {excerpt(request.endpoint)}"
            )
        dnode = found[0]
        if request.cluster_id and request.cluster_id != self._cluster_id:
            raise ConfigError(
                f"dnode {endpoint}: its data directory belongs to cluster "
                f"{excerpt(request.cluster_id)}, not this one ({self._cluster_id}); give it "
                "an empty data directory to join this cluster"
            )
        if request.dnode_id and request.dnode_id != dnode.id:
            raise ConfigError(
                f"dnode {endpoint}: its data directory is dnode {request.dnode_id}'s, but "
                f"{endpoint} is dnode {dnode.id}; start it with its own data directory"
            )
        return dnode


def heartbeat_fields(request: pb.DnodeHeartbeatRequest) -> tuple[str | int | bytes, ...]:
    """What a heartbeat's proof covers after its send time (both sides build it here)."""
    hosted = b"".join(
        f"{v.vgroup},{v.first_version},{v.last_version};".encode() for v in request.vgroups
    )
    return (
        "dnode-heartbeat", request.endpoint, request.dnode_id, request.cluster_id, hosted,
        request.catalog_change,
    )  # fmt: skip


def answer_fields(
    answer: pb.DnodeHeartbeatResponse, request_proof: bytes
) -> tuple[str | int | bytes, ...]:
    placed = b"".join(
        f"{p.database},{p.vgroup},{p.precision},".encode()
        + ",".join(f"{k}={v}" for k, v in sorted(p.wal_options.items())).encode()
        + b";"
        for p in answer.placed
    )
    changes = "".join(f"{c.seq}:{c.body}\n" for c in answer.changes).encode()
    return (
        "dnode-heartbeat-answer", answer.dnode_id, answer.cluster_id,
        answer.heartbeat_interval_ms, request_proof, placed, answer.catalog_change, changes,
    )  # fmt: skip
