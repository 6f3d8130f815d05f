"""`Cluster`, the mnode's service for its dnodes: their heartbeats, checked against the
cluster secret and the dnodes CREATE DNODE admitted, recorded in the dnodes' registry
(SHOW DNODES, SHOW VGROUPS); and the child tables their writes need (CreateTables)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

from sqltopic.errors import AuthenticationFailed, ConfigError, NotFoundError, excerpt
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import prove, verify
from sqltopic.server.common.result import Session
from sqltopic.server.core import arrow_check
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.placement import HeartbeatView
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.dnode_registry import DnodeRegistry
from sqltopic.server.rpc.rpc import Context, unary
from sqltopic.sql.change_log import MAX_CHANGES_KEPT
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
# ... and at most this many bytes of them (at least one change): far under gRPC's 64 MiB.
MAX_ANSWER_BYTES = 8 << 20
# Threads for the heartbeats' catalog reads: a few dnodes beat at once.
CLUSTER_WORKERS = 4
# DNS names have at most 253 characters; a port and brackets fit in the rest.
MAX_ENDPOINT_CHARS = 300
# An HMAC-SHA256.
PROOF_BYTES = 32
# A user, database or `db.stable` name with room to spare (names have at most 192).
MAX_NAME_CHARS = 400
# Trim the change log once every admitted dnode applied this many more: one DELETE per
# hundred changes, not one per heartbeat.
TRIM_EVERY = 100


class ClusterService(pb_grpc.ClusterServicer):
    def __init__(
        self, engine: Engine, registry: DnodeRegistry, secret: str, root: tuple[str, str],
        coordinator: Coordinator,
    ) -> None:  # fmt: skip
        """`root`: the salt and hash of root's password, for the dnodes' logins;
        `coordinator`: the consumer groups, whose assignments fence the dnodes' polls."""
        self._engine = engine
        self._coordinator = coordinator
        self._root = root
        self._registry = registry
        self._secret = secret
        self._cluster_id = engine.cluster_id()
        self._waiters: list[asyncio.Future[None]] = []
        self._watching = False
        self._trimmed = 0  # changes up to here are trimmed from the log
        # the catalog reads of heartbeats, apart from the engine's workers: statements
        # that wait for the dnodes hold those, and must not starve the heartbeats
        self._executor = ThreadPoolExecutor(CLUSTER_WORKERS, thread_name_prefix="sqltopic-cluster")
        registry.changed(engine.last_change())  # held heartbeats of dnodes behind go on

    @unary
    async def DnodeHeartbeat(
        self, request: pb.DnodeHeartbeatRequest, context: Context
    ) -> pb.DnodeHeartbeatResponse:
        _check_sizes(request)  # before the proof: its cost grows with the request
        now_ms = int(time.time() * 1000)
        verify(self._secret, request.proof, now_ms, request.sent_ms, *heartbeat_fields(request))
        endpoint, after = request.endpoint.lower(), request.catalog_change
        view = await self._view(endpoint, after)
        dnode = self._admitted(request, view)
        if not dnode.instance:  # its first heartbeat: tie it to this data directory
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._engine.dnode_joined, dnode.id, request.instance
            )
        if not self._registry.fresh(dnode.id, request.sent_ms):
            raise AuthenticationFailed(
                f"dnode {endpoint}: a heartbeat older than one already taken (a replay, or "
                "a second process at the same endpoint)"
            )
        versions = {v.vgroup: (v.first_version, v.last_version) for v in request.vgroups}
        self._registry.beat(dnode.id, versions, after, request.sent_ms)
        await self._trim(view)
        await self._hold(after, request.fence_version)
        view = await self._view(endpoint, after)  # as it is now, after the hold
        dnode = self._admitted(request, view)
        answer = pb.DnodeHeartbeatResponse(
            dnode_id=dnode.id, cluster_id=self._cluster_id,
            heartbeat_interval_ms=0,  # held already: beat again at once
            placed=[
                pb.PlacedVgroup(
                    database=db.name, vgroup=vgroup, precision=db.precision, wal_options=db.wal
                )
                for db, vgroup in view.placed
            ],
            catalog_change=view.last,
            changes=[pb.CatalogChange(seq=seq, body=body) for seq, body in view.changes],
            root_salt=self._root[0], root_hash=self._root[1],
        )  # fmt: skip
        answer.fence_version = self._coordinator.version  # read before the fences
        if answer.fence_version != request.fence_version:
            answer.fences = self._coordinator.fences({vgroup for _db, vgroup in view.placed})
        answer.proof = prove(self._secret, *answer_fields(answer, request.proof))
        return answer

    @unary
    async def CreateTables(
        self, request: pb.CreateTablesRequest, context: Context
    ) -> pb.CreateTablesResponse:
        _check_create_sizes(request, self._engine.limits.max_write_bytes)
        now_ms = int(time.time() * 1000)
        verify(self._secret, request.proof, now_ms, request.sent_ms,
               *create_tables_fields(request))  # fmt: skip
        if request.dnode_id not in self._engine.catalog.dnodes:
            raise NotFoundError(f"dnode {request.dnode_id} is not admitted (SHOW DNODES)")
        table = arrow_check.decode(request.arrow, self._engine.limits.max_write_bytes)
        session = Session(user=request.user.lower(), db=request.database.lower() or None)
        # on a worker: it takes the catalog's lock alone and waits for the dnodes
        seq = await asyncio.to_thread(self._engine.create_children, session, request.target, table)
        return pb.CreateTablesResponse(catalog_change=seq)

    async def _view(self, endpoint: str, after: int) -> HeartbeatView:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._engine.heartbeat_view, endpoint, after,
            MAX_CHANGES_PER_BEAT, MAX_ANSWER_BYTES,
        )  # fmt: skip

    async def _trim(self, view: HeartbeatView) -> None:
        """Drop the logged changes every admitted dnode applied, and any beyond the most
        the log keeps however far behind an offline dnode is."""
        floor = max(self._registry.applied_by_all(view.admitted) or 0, view.last - MAX_CHANGES_KEPT)
        if floor >= self._trimmed + TRIM_EVERY:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._engine.trim_changes, floor)
            self._trimmed = floor

    async def _hold(self, applied: int, fence_version: int) -> None:
        """Until a catalog change after `applied` is logged or the assignments differ
        from the dnode's (`fence_version`), at most HOLD_S."""
        if not self._watching:  # on the loop, so that changes wake its futures
            loop = asyncio.get_running_loop()

            def watcher() -> None:
                loop.call_soon_threadsafe(self._wake)

            self._registry.watch(watcher)
            self._coordinator.listeners.append(watcher)
            self._watching = True

        def news() -> bool:
            return (
                self._registry.last_change > applied or self._coordinator.version != fence_version
            )

        if news():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            if news():  # logged while registering
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, HOLD_S)
        finally:
            with contextlib.suppress(ValueError):  # woken: no longer there
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _admitted(self, request: pb.DnodeHeartbeatRequest, view: HeartbeatView) -> Dnode:
        endpoint = request.endpoint.lower()
        dnode = view.dnode
        if dnode is None:
            raise NotFoundError(
                f"dnode {excerpt(request.endpoint)} is not admitted: as root on the mnode, "
                f"run CREATE DNODE {excerpt(request.endpoint)}"
            )
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
        if dnode.instance and request.instance != dnode.instance:
            raise ConfigError(
                f"dnode {dnode.id} ({endpoint}) joined with another data directory (instance "
                f"{dnode.instance}); this one is {excerpt(request.instance)}, an empty or "
                "another disk: restore its data directory, or drop its databases, DROP "
                f"DNODE {dnode.id} and CREATE DNODE it anew"
            )
        if request.catalog_change > view.last:
            raise ConfigError(
                f"dnode {endpoint} applied catalog change {request.catalog_change}, but this "
                f"mnode's catalog ends at change {view.last}: was the mnode restored from an "
                "older backup? Restore the mnode's latest catalog.sqlite"
            )
        return dnode


def _check_sizes(request: pb.DnodeHeartbeatRequest) -> None:
    """ConfigError for a heartbeat larger than any dnode sends."""
    if len(request.vgroups) > MAX_HOSTED_VGROUPS:
        raise ConfigError(f"a heartbeat reports at most {MAX_HOSTED_VGROUPS} vgroups")
    if not request.instance:
        raise ConfigError("a heartbeat names the dnode's data directory (`instance`)")
    longest = max(len(request.endpoint), len(request.cluster_id), len(request.instance))
    if longest > MAX_ENDPOINT_CHARS:
        raise ConfigError(
            f"a heartbeat's endpoint, cluster id and instance have at most "
            f"{MAX_ENDPOINT_CHARS} characters"
        )
    if len(request.proof) > PROOF_BYTES:
        raise ConfigError(f"a heartbeat's proof has {PROOF_BYTES} bytes")


def _check_create_sizes(request: pb.CreateTablesRequest, max_bytes: int) -> None:
    """ConfigError for a request larger than any dnode sends."""
    if max(len(request.user), len(request.database), len(request.target)) > MAX_NAME_CHARS:
        raise ConfigError(f"CreateTables' names have at most {MAX_NAME_CHARS} characters")
    if len(request.arrow) > max_bytes:
        raise ConfigError(f"CreateTables' Arrow data has at most {max_bytes} bytes")
    if len(request.proof) > PROOF_BYTES:
        raise ConfigError(f"a request's proof has {PROOF_BYTES} bytes")


def create_tables_fields(request: pb.CreateTablesRequest) -> tuple[str | int | bytes, ...]:
    """What a CreateTables request's proof covers after its send time (both sides)."""
    return (
        "create-tables", request.dnode_id, request.user, request.database, request.target,
        hashlib.sha256(request.arrow).digest(),
    )  # fmt: skip


def heartbeat_fields(request: pb.DnodeHeartbeatRequest) -> tuple[str | int | bytes, ...]:
    """What a heartbeat's proof covers after its send time (both sides build it here)."""
    hosted = b"".join(
        f"{v.vgroup},{v.first_version},{v.last_version};".encode() for v in request.vgroups
    )
    return (
        "dnode-heartbeat", request.endpoint, request.dnode_id, request.cluster_id, hosted,
        request.catalog_change, request.instance, request.fence_version,
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
        answer.root_salt, answer.root_hash, answer.fence_version,
        hashlib.sha256(answer.fences.encode()).digest(),
    )  # fmt: skip
