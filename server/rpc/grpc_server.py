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
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc import aio

from sqltopic.proto.arrow_ipc import MESSAGE_OPTIONS
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.resources import raise_open_files_limit
from sqltopic.server.core import users
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.coordinator_store import CoordinatorStore
from sqltopic.server.mnode.passwords import DEFAULT_ROOT_PASSWORD, check_root_password
from sqltopic.server.rpc.health import SERVICE_NAME as HEALTH_SERVICE
from sqltopic.server.rpc.health import add_health
from sqltopic.server.rpc.mnode_service import REBALANCE_INTERVAL_S, MnodeService, rebalance_timer
from sqltopic.server.rpc.reflection import enable_reflection
from sqltopic.server.rpc.rpc import add_service
from sqltopic.server.rpc.slots import Slots
from sqltopic.server.rpc.sql_service import SessionService, SqlService
from sqltopic.server.rpc.tls import ServerTls, check_plaintext
from sqltopic.server.rpc.vnode_service import Executors, VnodeService

log = logging.getLogger("sqltopic.server")

# Long enough for a running statement or write to finish, short enough that a stop
# request (systemd, Ctrl-C) does not hang.
SHUTDOWN_GRACE_S = 10.0
# The services this server hosts, by full name (for health and reflection).
SERVICES = tuple(
    pb.DESCRIPTOR.services_by_name[name].full_name for name in ("Session", "Sql", "Mnode", "Vnode")
)
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


def run(config: ServerConfig, ready: Callable[[str], None]) -> None:
    """Open the engine, serve until SIGTERM/SIGINT, then close it. Raises WalLockedError
    when another server holds the data directory, ConfigError when the root password is
    empty, or is the default and the address is not a loopback one, or when the server
    would speak plain text off loopback without `allow_plaintext`. `ready` gets the
    bound address."""
    check_root_password(config.host, config.root_password)
    check_plaintext(config.host, config.tls, config.allow_plaintext)
    raise_open_files_limit()  # every vnode keeps a few files open
    engine = Engine(config.data, limits=config.limits)
    try:
        asyncio.run(_serve(engine, config, ready))
    finally:
        engine.close()


async def _serve(engine: Engine, config: ServerConfig, ready: Callable[[str], None]) -> None:
    store = CoordinatorStore(config.data)
    try:
        await _serve_with(engine, config, ready, store)
    finally:
        store.close()


async def _serve_with(
    engine: Engine, config: ServerConfig, ready: Callable[[str], None], store: CoordinatorStore
) -> None:
    # no SO_REUSEPORT (gRPC sets it by default): a second server on a port in use must
    # fail to start, not share its connections
    server = aio.server(options=[*MESSAGE_OPTIONS, ("grpc.so_reuseport", 0)])
    sessions = Sessions(
        config.root_password, users.lookup(engine.state),
        max_per_user=config.limits.max_sessions_per_user,
    )  # fmt: skip
    coordinator = Coordinator(lambda topic: engine.topic_vgroups(topic)[1], store=store)
    coordinator.restore()  # groups as they were: their consumers carry on
    engine.state.coordinator = coordinator  # SHOW CONSUMERS, DROP TOPIC see it
    stopping = asyncio.Event()
    executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="sqltopic-worker")
    asyncio.get_running_loop().set_default_executor(executor)
    add_service(server, SessionService(sessions), "Session")
    slots = Slots(config.limits)  # streams and waiting polls, per session and user
    add_service(server, SqlService(engine, sessions, slots), "Sql")
    add_service(server, MnodeService(engine, sessions, coordinator), "Mnode")
    committer = ThreadPoolExecutor(COMMIT_WORKERS, thread_name_prefix="sqltopic-commit")
    vnodes = VnodeService(
        engine, sessions, coordinator, Executors(executor, committer), stopping, slots
    )
    add_service(server, vnodes, "Vnode")
    health = add_health(server, SERVICES)
    enable_reflection(server, (*SERVICES, HEALTH_SERVICE), stopping)
    address = f"{config.host}:{config.port}"
    try:
        if config.tls is None:
            port = server.add_insecure_port(address)
        else:  # health and reflection share the port, so they speak TLS too
            port = server.add_secure_port(address, _credentials(config.tls))
    except RuntimeError:  # gRPC's "Failed to bind": in use, or not an address of ours
        port = 0
    if port == 0:
        raise OSError(
            f"cannot listen on {address}: the port is in use (by another server?) or the "
            "host is not an address of this machine; choose another --port or --host"
        )
    await server.start()
    stop = _stop_on_signals()
    timer = asyncio.create_task(rebalance_timer(coordinator, stopping, config.rebalance_interval_s))
    ready(f"{config.host}:{port}")
    await stop.wait()
    log.info("shutting down")
    stopping.set()
    await health.shut_down()  # open Watch streams end now, not at the grace's end
    await server.stop(SHUTDOWN_GRACE_S)
    await vnodes.flush()
    await timer
    coordinator.persist(progress=True)


def _credentials(tls: ServerTls) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(tls.private_key, tls.cert_chain)],
        root_certificates=tls.client_ca,
        require_client_auth=tls.mutual,
    )


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
