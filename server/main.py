"""`sqltopic server` (also `python -m sqltopic.server`): options, logging, the ready line.

The ready line `sqltopic server listening on HOST:PORT, data DIR` goes to stdout once the
port is bound, so scripts and tests can wait for it; errors are one line on stderr and
exit code 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sqltopic.errors import Error
from sqltopic.server import limits
from sqltopic.server.passwords import DEFAULT_ROOT_PASSWORD, ROOT_PASSWORD_ENV

DEFAULT_DATA = "./sqltopic-data"
READY_LINE = "sqltopic server listening on"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's options, for `sqltopic server` and `python -m sqltopic.server`."""
    parser.add_argument("--data", default=DEFAULT_DATA, help="data directory")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=6030, help="port to listen on")
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
    limits.add_arguments(parser)


def _interval_ms(text: str) -> int:
    """100..60000 ms: below, the timer would only burn CPU; above, dead consumers would
    keep their vgroups for minutes."""
    value = int(text)
    if not 100 <= value <= 60_000:
        raise argparse.ArgumentTypeError(f"{value} is out of range 100..60000")
    return value


def serve(args: argparse.Namespace) -> int:
    """Run the server with parsed options until SIGTERM/SIGINT; the exit code."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # imported here: `sqltopic sql` and friends parse these options without loading the
    # engine (DuckDB) and the gRPC server
    from sqltopic.server.grpc_server import ServerConfig, run  # noqa: PLC0415

    data = Path(args.data)
    config = ServerConfig(
        data, args.host, args.port, args.root_password, args.rebalance_interval_ms / 1000,
        limits=limits.Limits.of(args),
    )  # fmt: skip

    def ready(address: str) -> None:
        print(f"{READY_LINE} {address}, data {data}", flush=True)

    try:
        run(config, ready)
    except (Error, OSError) as exc:
        print(f"sqltopic: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqltopic server", description=__doc__)
    add_arguments(parser)
    return serve(parser.parse_args(argv))
