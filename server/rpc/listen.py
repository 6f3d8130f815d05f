"""What every sqltopic process does to serve gRPC: bind its port (plain text or TLS),
and stop on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import grpc
from grpc import aio

from sqltopic.proto.arrow_ipc import MESSAGE_OPTIONS
from sqltopic.server.rpc.tls import ServerTls

# no SO_REUSEPORT (gRPC sets it by default): a second server on a port in use must fail
# to start, not share its connections
SERVER_OPTIONS = [*MESSAGE_OPTIONS, ("grpc.so_reuseport", 0)]
# A node's channels to its peers: a node back from a restart is dialled again within half
# a second (gRPC's default backoff grows to two minutes).
NODE_CHANNEL_OPTIONS = [*MESSAGE_OPTIONS, ("grpc.max_reconnect_backoff_ms", 500)]


def node_channel(ca: bytes | None, tls: ServerTls | None) -> Callable[[str], grpc.Channel]:
    """How a node's worker threads dial a peer node (`node_credentials`)."""
    credentials = node_credentials(ca, tls)
    if credentials is None:
        return lambda target: grpc.insecure_channel(target, options=NODE_CHANNEL_OPTIONS)
    return lambda target: grpc.secure_channel(target, credentials, options=NODE_CHANNEL_OPTIONS)


def node_aio_channel(ca: bytes | None, tls: ServerTls | None) -> Callable[[str], aio.Channel]:
    """How a node's event loop dials a peer node (`node_credentials`)."""
    credentials = node_credentials(ca, tls)
    if credentials is None:
        return lambda target: aio.insecure_channel(target, options=NODE_CHANNEL_OPTIONS)
    return lambda target: aio.secure_channel(target, credentials, options=NODE_CHANNEL_OPTIONS)


def node_credentials(ca: bytes | None, tls: ServerTls | None) -> grpc.ChannelCredentials | None:
    """A node's credentials to a peer: TLS trusting `ca` (PEM), with the node's own
    certificate as the client's for a peer that asks for one; None (plain text) without
    a CA."""
    if ca is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=tls.private_key if tls is not None else None,
        certificate_chain=tls.cert_chain if tls is not None else None,
    )


def bind(server: aio.Server, host: str, port: int, tls: ServerTls | None) -> int:
    """Listen on host:port (0: a port the kernel picks); the port bound, or OSError."""
    address = f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:  # health and reflection share the port, so they speak TLS too
            bound = server.add_secure_port(address, credentials(tls))
    except RuntimeError:  # gRPC's "Failed to bind": in use, or not an address of ours
        bound = 0
    if bound == 0:
        raise OSError(
            f"cannot listen on {address}: the port is in use (by another server?) or the "
            "host is not an address of this machine; choose another --port or --host"
        )
    return bound


def credentials(tls: ServerTls) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(tls.private_key, tls.cert_chain)],
        root_certificates=tls.client_ca,
        require_client_auth=tls.mutual,
    )


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop
