"""The options every client command shares (`--server`, `--user`, `--password`) and the
login they lead to.

Defaults come from the environment where a shell user would put them: SQLTOPIC_SERVER
for the address, SQLTOPIC_PASSWORD for the password (so it stays out of `ps` and the
shell history).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from sqltopic.client.connection import DEFAULT_ADDRESS, Connection, connect
from sqltopic.errors import AuthenticationFailed, Error

SERVER_ENV = "SQLTOPIC_SERVER"
PASSWORD_ENV = "SQLTOPIC_PASSWORD"
DEFAULT_USER = "root"
DEFAULT_PASSWORD = "taosdata"


@dataclass(frozen=True)
class ServerOptions:
    server: str
    user: str
    password: str

    @classmethod
    def of(cls, args: argparse.Namespace) -> ServerOptions:
        return cls(args.server, args.user, args.password)


def options_parser() -> argparse.ArgumentParser:
    """A parent parser with the shared options, for `add_parser(parents=[...])`."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("server")
    group.add_argument(
        "--server",
        default=os.environ.get(SERVER_ENV, DEFAULT_ADDRESS),
        metavar="HOST:PORT",
        help=f"server address (default: ${SERVER_ENV} or {DEFAULT_ADDRESS})",
    )
    group.add_argument("--user", default=DEFAULT_USER, help="user name (default: root)")
    group.add_argument(
        "--password",
        default=os.environ.get(PASSWORD_ENV, DEFAULT_PASSWORD),
        help=f"password (default: ${PASSWORD_ENV} or taosdata)",
    )
    return parser


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number of seconds more than 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def open_connection(options: ServerOptions, database: str | None = None) -> Connection:
    """Log in (and `USE database`); a server that cannot be reached is said so, with
    its address. Login fails only for a wrong password or for the transport."""
    try:
        conn = connect(options.server, options.user, options.password)
    except AuthenticationFailed:
        raise
    except Error as exc:
        raise Error(
            f"cannot reach the server at {options.server}: {exc} "
            f"(is `sqltopic server` running there? see --server or ${SERVER_ENV})"
        ) from None
    if database is not None:
        try:
            conn.execute(f"USE {database}")
        except BaseException:
            conn.close()
            raise
    return conn
