"""`sqltopic server`: one grpc.aio server in front of one engine.

It hosts the `Session`, `Sql`, `Mnode` and `Vnode` services, the standard health service
(SERVING, and NOT_SERVING once a graceful shutdown starts) and server reflection, and
runs the mnode's rebalance timer. SIGTERM or SIGINT stop it gracefully: health goes
NOT_SERVING, waiting polls answer at once, in-flight calls get `SHUTDOWN_GRACE_S` to
finish, then the engine closes (WALs synced, catalog and offsets committed).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from grpc import aio

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.common import collector
from sqltopic.server.common.cluster_secret import check_secret
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.resources import raise_open_files_limit
from sqltopic.server.console.console import open_console
from sqltopic.server.console.web import tls_context
from sqltopic.server.core.engine import CoordinatorFactory, Engine
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.coordinator_store import CoordinatorStore
from sqltopic.server.mnode.dnode_registry import DnodeRegistry
from sqltopic.server.mnode.passwords import DEFAULT_ROOT_PASSWORD, check_root_password
from sqltopic.server.rpc.cluster_service import ClusterService
from sqltopic.server.rpc.dnode_calls import DnodeCalls
from sqltopic.server.rpc.health import SERVICE_NAME as HEALTH_SERVICE
from sqltopic.server.rpc.health import add_health
from sqltopic.server.rpc.listen import SERVER_OPTIONS, bind, node_channel, stop_on_signals
from sqltopic.server.rpc.metrics import Sources, start_metrics
from sqltopic.server.rpc.mnode_service import REBALANCE_INTERVAL_S, MnodeService, rebalance_timer
from sqltopic.server.rpc.reflection import enable_reflection
from sqltopic.server.rpc.rpc import add_service
from sqltopic.server.rpc.slots import Slots
from sqltopic.server.rpc.sql_service import SessionService, SqlService
from sqltopic.server.rpc.tls import ServerTls, check_plaintext
from sqltopic.server.rpc.vnode_service import Executors, VnodeService
from sqltopic.wal.options import wall_clock_us

log = logging.getLogger("sqltopic.server")

# Long enough for a running statement or write to finish, short enough that a stop
# request (systemd, Ctrl-C) does not hang.
SHUTDOWN_GRACE_S = 10.0
# The services this server hosts, by full name (for health and reflection).
SERVICES = tuple(
    pb.DESCRIPTOR.services_by_name[name].full_name for name in ("Session", "Sql", "Mnode", "Vnode")
)
# An mnode's service for its dnodes, besides.
CLUSTER_SERVICE = pb.DESCRIPTOR.services_by_name["Cluster"].full_name
# Threads for engine work (SQL, writes, poll reads, commits): enough for every core and
# for calls that wait on fsync, few enough that DuckDB's per-thread connections stay few.
WORKERS = 16
# Threads for offset commits, apart: a commit mostly waits (its group's fsync), and a
# thousand auto-committing consumers would otherwise hold every worker while writes
# and polls queue behind them.
COMMIT_WORKERS = 8


@dataclass(frozen=True)
class ServerConfig:
    data: Path
    host: str = "127.0.0.1"
    port: int = 6030
    root_password: str = DEFAULT_ROOT_PASSWORD
    rebalance_interval_s: float = REBALANCE_INTERVAL_S
    limits: Limits = field(default_factory=Limits)
    tls: ServerTls | None = None  # None: plain text
    allow_plaintext: bool = False  # plain text off loopback
    role: Literal["all-in-one", "mnode"] = "all-in-one"
    cluster_secret: str | None = None  # an mnode's (checked by run)
    dnode_tls_ca: bytes | None = None  # an mnode speaks TLS to its dnodes, trusting it
    # --metrics-host/--metrics-port: /metrics for Prometheus (None: not served)
    metrics: tuple[str, int] | None = None
    # --http-host/--http-port: the web console (None: not served)
    console: tuple[str, int] | None = None


def run(config: ServerConfig, ready: Callable[[str], None]) -> None:
    """Open the engine, serve until SIGTERM/SIGINT, then close it. Raises WalLockedError
    when another server holds the data directory, ConfigError when the root password is
    empty, or is the default and the address is not a loopback one, or when the server
    would speak plain text off loopback without `allow_plaintext`. `ready` gets the
    bound address."""
    check_root_password(config.host, config.root_password)
    check_plaintext(config.host, config.tls, config.allow_plaintext)
    if config.console is not None:  # the console's logins cross the network too
        check_plaintext(config.console[0], config.tls, config.allow_plaintext)
    secret = check_secret(config.cluster_secret) if config.role == "mnode" else None
    raise_open_files_limit()  # every vnode keeps a few files open
    registry = DnodeRegistry(wall_clock_us) if secret is not None else None
    # an mnode dials its dnodes with TLS given --dnode-tls-ca, in plain text otherwise
    calls = (
        DnodeCalls(secret, node_channel(config.dnode_tls_ca, config.tls))
        if secret is not None else None
    )  # fmt: skip
    try:
        engine = Engine(
            config.data, limits=config.limits, coordination=_coordination(config.data),
            role=config.role, registry=registry,
            forward=calls.forward if calls is not None else None, reads=calls,
        )  # fmt: skip
        try:
            asyncio.run(_serve(engine, config, ready, registry, secret))
        finally:
            engine.close()
    finally:
        if calls is not None:
            calls.close()


def _console_tls(tls: ServerTls | None) -> ssl.SSLContext | None:
    """The console speaks TLS with the server's certificate when the server does."""
    if tls is None:
        return None
    return tls_context(tls.cert_chain, tls.private_key, tls.client_ca)


def _coordination(data: Path) -> CoordinatorFactory:
    """The mnode's coordinator, its groups kept in the data directory (mnode.sqlite)."""
    return lambda vgroups_of: Coordinator(vgroups_of, store=CoordinatorStore(data))


async def _serve(
    engine: Engine, config: ServerConfig, ready: Callable[[str], None],
    registry: DnodeRegistry | None, secret: str | None,
) -> None:  # fmt: skip
    server = aio.server(options=SERVER_OPTIONS)
    sessions = Sessions(
        config.root_password, engine.users(),
        max_per_user=config.limits.max_sessions_per_user,
    )  # fmt: skip
    coordinator = engine.coordinator
    if coordinator is None:
        raise TypeError("the server's engine is built with its coordinator")
    coordinator.restore()  # groups as they were: their consumers carry on
    stopping = asyncio.Event()
    executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="sqltopic-worker")
    asyncio.get_running_loop().set_default_executor(executor)
    add_service(server, SessionService(sessions), "Session")
    slots = Slots(config.limits)  # streams and waiting polls, per session and user
    add_service(server, SqlService(engine, sessions, slots, stopping), "Sql")
    add_service(server, MnodeService(engine, sessions, coordinator), "Mnode")
    committer = ThreadPoolExecutor(COMMIT_WORKERS, thread_name_prefix="sqltopic-commit")
    vnodes = VnodeService(
        engine, sessions, coordinator, Executors(executor, committer), stopping, slots
    )
    add_service(server, vnodes, "Vnode")
    services = SERVICES
    cluster: ClusterService | None = None
    if registry is not None and secret is not None:
        cluster = ClusterService(engine, registry, secret, sessions.root_record(), coordinator)
        add_service(server, cluster, "Cluster")
        services = (*SERVICES, CLUSTER_SERVICE)
    health = add_health(server, services)
    enable_reflection(server, (*services, HEALTH_SERVICE), stopping)
    port = bind(server, config.host, config.port, config.tls)
    metrics = start_metrics(config.metrics, Sources(engine, sessions, vnodes, groups=True))
    console = open_console(config.console, engine, sessions, _console_tls(config.tls))
    await server.start()
    stop = stop_on_signals()
    timer = asyncio.create_task(rebalance_timer(coordinator, stopping, config.rebalance_interval_s))
    engine.listening(f"{config.host}:{port}")
    collector.settle()  # what starting made is never scanned again
    ready(f"{config.host}:{port}")
    await stop.wait()
    log.info("shutting down")
    stopping.set()
    await health.shut_down()  # open Watch streams end now, not at the grace's end
    await server.stop(SHUTDOWN_GRACE_S)
    if metrics is not None:
        metrics.stop()
    if console is not None:
        console.stop()
    await vnodes.flush()
    if cluster is not None:
        cluster.close()
    await timer
    coordinator.persist(progress=True)
