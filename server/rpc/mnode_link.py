"""A dnode's link to its mnode: the heartbeat it sends every second (`Cluster.
DnodeHeartbeat`), with the proof of the cluster secret, and what the answers teach it
(its dnode id and cluster, kept in its data directory).

A dnode that cannot reach the mnode, or that the mnode refuses (not admitted yet, a
wrong secret, another cluster's data directory), keeps trying every interval and logs
each new reason once: it becomes ready as soon as the cause is fixed, with no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc import aio

from sqltopic.errors import AuthenticationFailed, ConfigError, Error
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import prove, verify_answer
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.identity import (
    DnodeIdentity,
    instance_of,
    load_identity,
    save_identity,
)
from sqltopic.server.dnode.vnode_host import Placed, VnodeHost
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.rpc.cluster_service import (
    DNODE_HEARTBEAT_INTERVAL_MS,
    answer_fields,
    heartbeat_fields,
)

log = logging.getLogger("sqltopic.dnode")

# The mnode holds a heartbeat up to a second (cluster_service.HOLD_S); one that takes far
# longer than that is lost (the next one is due anyway).
HEARTBEAT_TIMEOUT_S = 5.0


@dataclass
class LinkState:
    """What the dnode knows of its mnode now (for its own logs and tests)."""

    identity: DnodeIdentity | None = None
    problem: str | None = None  # why the last heartbeat failed; None: it was answered
    caught_up: bool = False  # the catalog changes the mnode had at the last answer applied


class MnodeLink:
    def __init__(
        self, mnode: str, secret: str, endpoint: str, data: Path, host: VnodeHost,
        engine: Engine, channel: Callable[[str], aio.Channel] = aio.insecure_channel,
        on_root: Callable[[str, str], None] = lambda salt, hashed: None,
        fences: Coordinator | None = None,
    ) -> None:  # fmt: skip
        """`on_root`: root's password salt and hash, from every answer (the logins);
        `fences`: the dnode's copy of the consumer assignments (a follower coordinator),
        kept as the answers give them."""
        self._mnode = mnode
        self._on_root = on_root
        self._fences = fences
        self._fence_version = 0
        self._secret = secret
        self._endpoint = endpoint
        self._data = data
        self._host = host
        self._engine = engine
        self._instance = instance_of(data)
        self._channel = channel
        self.state = LinkState(identity=load_identity(data))
        identity = self.state.identity
        if identity is not None and identity.endpoint != endpoint:
            raise ConfigError(
                f"data directory {data} is dnode {identity.dnode_id} at {identity.endpoint}; "
                f"start it with --advertise {identity.endpoint} (a dnode keeps its endpoint)"
            )

    async def run(self, stopping: asyncio.Event) -> None:
        """Beat until `stopping` is set."""
        async with self._channel(self._mnode) as channel:
            stub = pb_grpc.ClusterStub(channel)
            while not stopping.is_set():
                try:
                    answer = await self._beat(stub)
                except Exception as exc:  # a disk full, a damaged file: keep beating
                    problem = f"{type(exc).__name__}: {exc}"
                    if problem != self.state.problem:  # its traceback once, not each second
                        log.exception("the heartbeat failed")
                    self._trouble(problem)
                    answer = None
                # the mnode paces a heartbeat it answered (it held it); after a failure,
                # here or in applying the answer, wait a heartbeat period before the next
                wait_ms = DNODE_HEARTBEAT_INTERVAL_MS
                if answer is not None and self.state.problem is None:
                    wait_ms = answer.heartbeat_interval_ms
                if wait_ms > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stopping.wait(), wait_ms / 1000)

    async def _beat(self, stub: pb_grpc.ClusterAsyncStub) -> pb.DnodeHeartbeatResponse | None:
        identity = self.state.identity
        request = pb.DnodeHeartbeatRequest(
            endpoint=self._endpoint, dnode_id=identity.dnode_id if identity else 0,
            cluster_id=identity.cluster_id if identity else "",
            sent_ms=int(time.time() * 1000), catalog_change=self._engine.applied_change,
            instance=self._instance, fence_version=self._fence_version,
            vgroups=[
                pb.HostedVgroup(vgroup=v, first_version=first, last_version=last)
                for v, first, last in self._host.versions()
            ],
        )  # fmt: skip
        request.proof = prove(self._secret, request.sent_ms, *heartbeat_fields(request))
        try:
            answer: pb.DnodeHeartbeatResponse = await stub.DnodeHeartbeat(
                request, timeout=HEARTBEAT_TIMEOUT_S
            )
            verify_answer(self._secret, answer.proof, *answer_fields(answer, request.proof))
        except aio.AioRpcError as exc:
            self._trouble(_described(exc))
            return None
        except AuthenticationFailed as exc:
            self._trouble(str(exc))
            return None
        self._joined(answer)
        self._on_root(answer.root_salt, answer.root_hash)
        if self._fences is not None and answer.fences:
            try:
                self._fences.follow(answer.fences)
                self._fence_version = answer.fence_version
            except (ValueError, KeyError, TypeError) as exc:
                self._trouble(f"cannot read the consumer assignments: {type(exc).__name__}")
        try:
            placed = [
                Placed.of(p.database, p.vgroup, p.precision, dict(p.wal_options))
                for p in answer.placed
            ]
            await asyncio.to_thread(self._host.follow, placed, self._engine.lock)
        except (Error, OSError) as exc:
            self._trouble(f"cannot host the vgroups placed here: {exc}")
            return answer
        changes = [(c.seq, c.body) for c in answer.changes]
        try:
            await asyncio.to_thread(self._engine.apply_changes, changes)
        except (Error, OSError, ValueError, KeyError, sqlite3.Error) as exc:
            applied = self._engine.applied_change
            self._trouble(f"cannot apply catalog change {applied + 1}: {exc}")
        self.state.caught_up = self._engine.applied_change >= answer.catalog_change
        if self.state.caught_up and not self._engine.serving:
            self._engine.serve()
            log.info(
                "caught up with the mnode's catalog (change %d): serving", answer.catalog_change
            )
        return answer

    def _joined(self, answer: pb.DnodeHeartbeatResponse) -> None:
        identity = DnodeIdentity(answer.cluster_id, answer.dnode_id, self._endpoint)
        if identity != self.state.identity:
            save_identity(self._data, identity)
            log.info("dnode %d of cluster %s", identity.dnode_id, identity.cluster_id)
            self.state.identity = identity
        if self.state.problem is not None:
            log.info("the mnode at %s answers again", self._mnode)
        self.state.problem = None

    def _trouble(self, problem: str) -> None:
        if problem != self.state.problem:
            log.warning("mnode %s: %s (retrying every second)", self._mnode, problem)
        self.state.problem = problem


def _described(exc: aio.AioRpcError) -> str:
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return (
            f"not reachable ({exc.code().name}: not running, a wrong --mnode, or TLS on one "
            "side only: an mnode with TLS needs --mnode-tls-ca)"
        )
    return f"{exc.code().name}: {exc.details()}"
