"""`sqltopic dnode`: a vnode host of a cluster. It takes its data directory, serves
gRPC (Session and Sql for its vgroups' writes, health and reflection), and beats to its
mnode every second (server/rpc/mnode_link.py) until SIGTERM or SIGINT.

A dnode hosts vgroups only once root admitted its endpoint on the mnode (CREATE DNODE)
and its heartbeats prove the cluster secret; it serves them once it caught up with the
mnode's catalog. Its engine (server/core/engine.py, role dnode) runs over its copy of
the catalog and the vnodes placed here; users log in with the passwords the mnode holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grpc import aio

from sqltopic.errors import ConfigError, InvalidValueError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.common import collector
from sqltopic.server.common.cluster_secret import check_secret
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.resources import raise_open_files_limit
from sqltopic.server.core.dnodes import check_endpoint
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.vnode_host import VnodeHost
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.rpc.dnode_service import DnodeService
from sqltopic.server.rpc.grpc_server import COMMIT_WORKERS, WORKERS
from sqltopic.server.rpc.health import SERVICE_NAME as HEALTH_SERVICE
from sqltopic.server.rpc.health import add_health
from sqltopic.server.rpc.listen import (
    SERVER_OPTIONS,
    bind,
    node_aio_channel,
    node_channel,
    stop_on_signals,
)
from sqltopic.server.rpc.metrics import Sources, start_metrics
from sqltopic.server.rpc.mnode_calls import MnodeCalls
from sqltopic.server.rpc.mnode_link import MnodeLink
from sqltopic.server.rpc.reflection import enable_reflection
from sqltopic.server.rpc.rpc import add_service
from sqltopic.server.rpc.slots import Slots
from sqltopic.server.rpc.sql_service import SessionService, SqlService
from sqltopic.server.rpc.tls import ServerTls, check_plaintext
from sqltopic.server.rpc.vnode_service import Executors, VnodeService
from sqltopic.wal import Scheduler
from sqltopic.wal.fsutil import DirectoryLock

log = logging.getLogger("sqltopic.dnode")

# Hosts that mean every address of the machine: not an endpoint to advertise.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})
# A data directory is its owner's alone (server/core/engine.py's rule).
DATA_DIR_MODE = 0o700
# Long enough for a heartbeat or a write in flight to end, short enough that a stop
# does not hang.
SHUTDOWN_GRACE_S = 5.0
# The services a dnode hosts, by full name (for health and reflection).
SERVICES = tuple(
    pb.DESCRIPTOR.services_by_name[name].full_name for name in ("Session", "Sql", "Vnode", "Dnode")
)


@dataclass(frozen=True)
class DnodeConfig:
    data: Path
    mnode: str  # host:port of the cluster's mnode
    cluster_secret: str | None
    host: str = "127.0.0.1"
    port: int = 6030
    advertise: str | None = None  # host:port the mnode and clients reach it at
    tls: ServerTls | None = None
    allow_plaintext: bool = False
    mnode_tls_ca: bytes | None = None  # speak TLS to the mnode, trusting this CA (PEM)
    limits: Limits = field(default_factory=Limits)
    # --metrics-host/--metrics-port: /metrics for Prometheus (None: not served)
    metrics: tuple[str, int] | None = None


def run(config: DnodeConfig, ready: Callable[[str], None]) -> None:
    """Serve until SIGTERM/SIGINT. ConfigError for a missing or short secret or plain
    text off loopback, WalLockedError when another process holds the directory."""
    secret = check_secret(config.cluster_secret)
    check_plaintext(config.host, config.tls, config.allow_plaintext)
    _check_advertise(config)
    config.data.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
    lock = DirectoryLock(config.data, "data directory")
    try:
        raise_open_files_limit()  # every vnode keeps a few files open
        scheduler = Scheduler()  # the WALs' background work (fsync period, retention)
        try:
            host = VnodeHost(config.data, scheduler=scheduler)
            calls = MnodeCalls(
                config.mnode, secret, config.data, node_channel(config.mnode_tls_ca, config.tls)
            )
            try:
                engine = Engine(
                    config.data, background=False, limits=config.limits, role="dnode",
                    hosted=host.live, make_tables=calls.create_tables,
                )  # fmt: skip
                try:
                    asyncio.run(_serve(config, secret, ready, host, engine))
                finally:
                    engine.close()
            finally:
                calls.close()
                host.close()
        finally:
            scheduler.close()
    finally:
        lock.release()


def _check_advertise(config: DnodeConfig) -> None:
    """ConfigError for an --advertise no one could dial, or none where one is needed."""
    if config.advertise is not None:
        try:
            check_endpoint(config.advertise)
        except InvalidValueError as exc:
            raise ConfigError(f"--advertise: {exc.message}") from None
    elif config.host in WILDCARD_HOSTS:
        raise ConfigError(
            f"--host {config.host} listens on every address, which no one can dial: give "
            "--advertise HOST:PORT, the endpoint the mnode and clients reach this dnode at"
        )


async def _serve(
    config: DnodeConfig, secret: str, ready: Callable[[str], None], host: VnodeHost,
    engine: Engine,
) -> None:  # fmt: skip
    server = aio.server(options=SERVER_OPTIONS)
    stopping = asyncio.Event()
    sessions = Sessions(None, engine.users(), max_per_user=config.limits.max_sessions_per_user)
    executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="sqltopic-worker")
    asyncio.get_running_loop().set_default_executor(executor)
    committer = ThreadPoolExecutor(COMMIT_WORKERS, thread_name_prefix="sqltopic-commit")
    fences = Coordinator(lambda topic: engine.topic_vgroups(topic)[1], follower=True)
    slots = Slots(config.limits)
    add_service(server, SessionService(sessions), "Session")
    add_service(server, SqlService(engine, sessions, slots, stopping), "Sql")
    vnodes = VnodeService(engine, sessions, fences, Executors(executor, committer), stopping, slots)
    add_service(server, vnodes, "Vnode")
    add_service(server, DnodeService(engine, secret), "Dnode")
    health = add_health(server, SERVICES)
    enable_reflection(server, (*SERVICES, HEALTH_SERVICE), stopping)
    port = bind(server, config.host, config.port, config.tls)
    endpoint = config.advertise or f"{config.host}:{port}"
    engine.listening(endpoint.lower())
    link = MnodeLink(
        config.mnode, secret, endpoint.lower(), config.data, host, engine,
        node_aio_channel(config.mnode_tls_ca, config.tls),
        on_root=sessions.set_root, fences=fences,
    )  # fmt: skip
    metrics = start_metrics(config.metrics, Sources(engine, sessions, vnodes, groups=False))
    await server.start()
    stop = stop_on_signals()
    beating = asyncio.create_task(link.run(stopping))
    collector.settle()  # what starting made is never scanned again
    ready(f"{config.host}:{port}")
    await stop.wait()
    log.info("shutting down")
    stopping.set()
    await health.shut_down()
    await server.stop(SHUTDOWN_GRACE_S)
    if metrics is not None:
        metrics.stop()
    await vnodes.flush()
    await beating
