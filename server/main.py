"""`sqltopic server` (also `python -m sqltopic.server`), `sqltopic mnode` and
`sqltopic dnode`: options, logging, the ready line.

The ready line `sqltopic server listening on HOST:PORT, data DIR` (`mnode`, `dnode` for
the cluster's processes; then `, TLS` or `, mutual TLS` when it speaks TLS) goes to
stdout once the port is bound, so scripts and tests can wait for it; errors are one line
on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from sqltopic.errors import Error, require_extra
from sqltopic.proto.pem import read_pem
from sqltopic.server.common import limits, logs
from sqltopic.server.common.cluster_secret import CLUSTER_SECRET_ENV
from sqltopic.server.mnode.passwords import DEFAULT_ROOT_PASSWORD, ROOT_PASSWORD_ENV
from sqltopic.server.rpc.tls import (
    CERT_OPTION,
    CLIENT_CA_OPTION,
    KEY_OPTION,
    PLAINTEXT_OPTION,
    ServerTls,
    load_server_tls,
)

DEFAULT_DATA = "./sqltopic-data"
# Files the server creates are 0600 and directories 0700.
PRIVATE_UMASK = 0o077
# `sqltopic dnode`'s mnode when not told (an mnode on this machine's default port).
DEFAULT_MNODE = "127.0.0.1:6030"


# The highest TCP port.
MAX_PORT = 65_535


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's options, for `sqltopic server` and `python -m sqltopic.server`."""
    _add_common_arguments(parser)
    parser.add_argument(
        "--root-password",
        default=os.environ.get(ROOT_PASSWORD_ENV, DEFAULT_ROOT_PASSWORD),
        help=f"password of user root (default: ${ROOT_PASSWORD_ENV} or taosdata, which "
        "only a server listening on a loopback address accepts)",
    )
    parser.add_argument(
        "--rebalance-interval-ms", type=_interval_ms, default=2000,
        help="how often the mnode looks for consumers past their session timeout or max "
        "poll interval (TDengine: 2000; joins and leaves rebalance at once anyway)",
    )  # fmt: skip
    parser.add_argument(
        "--http-port", type=_port, metavar="PORT",
        help="serve the read-only web console at http://HTTP_HOST:PORT/ (https with "
        "--tls-cert; 0: any free port, named on stdout; default: not served)",
    )  # fmt: skip
    parser.add_argument(
        "--http-host", default="127.0.0.1",
        help="address the web console listens on (default 127.0.0.1: this machine only; "
        "another address needs TLS or --allow-plaintext, as the server's)",
    )  # fmt: skip
    _add_tls_arguments(parser)
    limits.add_arguments(parser)


def add_mnode_arguments(parser: argparse.ArgumentParser) -> None:
    """`sqltopic mnode`: the server's options and the cluster secret."""
    add_arguments(parser)
    _add_secret_argument(parser)
    parser.add_argument(
        "--dnode-tls-ca", metavar="PEM",
        help="speak TLS to the dnodes (the rows of INSERTs run here), trusting certificates "
        "this CA signed (PEM); the mnode's --tls-cert/--tls-key are its client certificate",
    )  # fmt: skip


def add_dnode_arguments(parser: argparse.ArgumentParser) -> None:
    """`sqltopic dnode`: where its mnode is, how it is reached, the cluster secret."""
    _add_common_arguments(parser)
    parser.add_argument(
        "--mnode", default=DEFAULT_MNODE, metavar="HOST:PORT",
        help=f"the cluster's mnode (default {DEFAULT_MNODE})",
    )  # fmt: skip
    parser.add_argument(
        "--advertise", metavar="HOST:PORT",
        help="the endpoint the mnode and clients reach this dnode at, as CREATE DNODE "
        "admits it (default: --host:--port)",
    )  # fmt: skip
    _add_secret_argument(parser)
    _add_tls_arguments(parser)
    parser.add_argument(
        "--mnode-tls-ca", metavar="PEM",
        help="speak TLS to the mnode, trusting certificates this CA signed (PEM); the "
        "dnode's --tls-cert/--tls-key are its client certificate when the mnode asks",
    )  # fmt: skip


def _add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=DEFAULT_DATA, help="data directory")
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics at http://METRICS_HOST:PORT/metrics (0: any free "
        "port, named on stdout; default: not served)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics endpoint listens on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--log-format",
        choices=logs.LOG_FORMATS,
        default="text",
        help="text (default: one readable line per record) or json (one JSON object per "
        "line: ts, level, logger, message and the event's fields)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=6030, help="port to listen on")


def _add_secret_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster-secret", default=os.environ.get(CLUSTER_SECRET_ENV), metavar="SECRET",
        help=f"the secret the mnode and every dnode share (default: ${CLUSTER_SECRET_ENV}); "
        "at least 16 characters",
    )  # fmt: skip


def _add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (docs/security.md)")
    group.add_argument(
        CERT_OPTION, metavar="PEM",
        help="the server's certificate (PEM, chain after it): serve TLS; needs --tls-key",
    )  # fmt: skip
    group.add_argument(KEY_OPTION, metavar="PEM", help="the certificate's private key (PEM)")
    group.add_argument(
        CLIENT_CA_OPTION, metavar="PEM",
        help="mutual TLS: require a client certificate signed by this CA (PEM)",
    )  # fmt: skip
    group.add_argument(
        PLAINTEXT_OPTION, action="store_true",
        help="listen on a non-loopback address without TLS (refused otherwise)",
    )  # fmt: skip


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{port} is not a port: give 0..{MAX_PORT}")
    return port


def _metrics(args: argparse.Namespace) -> tuple[str, int] | None:
    return None if args.metrics_port is None else (args.metrics_host, args.metrics_port)


def _console(args: argparse.Namespace) -> tuple[str, int] | None:
    return None if args.http_port is None else (args.http_host, args.http_port)


def _interval_ms(text: str) -> int:
    """100..60000 ms: below, the timer would only burn CPU; above, dead consumers would
    keep their vgroups for minutes."""
    value = int(text)
    if not 100 <= value <= 60_000:
        raise argparse.ArgumentTypeError(f"{value} is out of range 100..60000")
    return value


def serve(args: argparse.Namespace, role: Literal["all-in-one", "mnode"] = "all-in-one") -> int:
    """Run the server (or an mnode) with parsed options until SIGTERM/SIGINT; the exit
    code."""
    data = _start(args)
    name = "server" if role == "all-in-one" else "mnode"
    try:
        require_extra("server", f"sqltopic {name}")  # before anything imports DuckDB
        tls = load_server_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
        # imported here: `sqltopic sql` and friends parse these options without loading
        # the engine (DuckDB) and the gRPC server, and a bad PEM file is reported at once
        from sqltopic.server.rpc.grpc_server import ServerConfig, run  # noqa: PLC0415

        config = ServerConfig(
            data, args.host, args.port, args.root_password, args.rebalance_interval_ms / 1000,
            limits=limits.Limits.of(args), tls=tls, allow_plaintext=args.allow_plaintext,
            role=role, cluster_secret=getattr(args, "cluster_secret", None),
            metrics=_metrics(args), console=_console(args),
            dnode_tls_ca=read_pem("--dnode-tls-ca", args.dnode_tls_ca, "CA certificate")
            if getattr(args, "dnode_tls_ca", None) else None,
        )  # fmt: skip
        run(config, _ready(name, data, tls))
    except (Error, OSError) as exc:
        print(f"sqltopic: {exc}", file=sys.stderr)
        return 1
    return 0


def serve_mnode(args: argparse.Namespace) -> int:
    return serve(args, "mnode")


def serve_dnode(args: argparse.Namespace) -> int:
    """Run a dnode with parsed options until SIGTERM/SIGINT; the exit code."""
    data = _start(args)
    try:
        require_extra("server", "sqltopic dnode")
        tls = load_server_tls(args.tls_cert, args.tls_key, args.tls_client_ca)
        from sqltopic.server.rpc.dnode_server import DnodeConfig, run  # noqa: PLC0415

        config = DnodeConfig(
            data, args.mnode, args.cluster_secret, args.host, args.port, args.advertise,
            tls=tls, allow_plaintext=args.allow_plaintext, metrics=_metrics(args),
            mnode_tls_ca=read_pem("--mnode-tls-ca", args.mnode_tls_ca, "CA certificate")
            if args.mnode_tls_ca else None,
        )  # fmt: skip
        run(config, _ready("dnode", data, tls))
    except (Error, OSError) as exc:
        print(f"sqltopic: {exc}", file=sys.stderr)
        return 1
    return 0


def _start(args: argparse.Namespace) -> Path:
    logs.configure(args.log_format)
    # what the server creates (the data directory, WAL segments, catalog.sqlite with
    # its password hashes, offsets) is for its own user only
    os.umask(PRIVATE_UMASK)
    return Path(args.data)


def _ready(name: str, data: Path, tls: ServerTls | None) -> Callable[[str], None]:
    def ready(address: str) -> None:
        print(f"sqltopic {name} listening on {address}, data {data}{_security(tls)}", flush=True)

    return ready


def _security(tls: ServerTls | None) -> str:
    """The ready line's tail: how clients must connect."""
    if tls is None:
        return ""
    return ", mutual TLS" if tls.mutual else ", TLS"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqltopic server", description=__doc__)
    add_arguments(parser)
    return serve(parser.parse_args(argv))
