"""The options every client command shares (`--server`, `--user`, `--password`, and TLS:
`--tls`, `--tls-ca`, `--tls-cert`, `--tls-key`) and the login they lead to.

Defaults come from the environment where a shell user would put them: SQLTOPIC_SERVER
for the address, SQLTOPIC_PASSWORD for the password (so it stays out of `ps` and the
shell history), SQLTOPIC_TLS_CA, SQLTOPIC_TLS_CERT and SQLTOPIC_TLS_KEY for the PEM
files (set once for a server that speaks TLS; empty is unset). The files are read and
checked when the command starts, so a bad one is named by its option before anything
connects.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from sqltopic.client.connection import DEFAULT_ADDRESS, Connection, connect_with
from sqltopic.client.tls import (
    CLI_NAMES,
    NO_FILES,
    PLAIN,
    TlsFiles,
    TlsHandshakeError,
    Transport,
    load_transport,
)
from sqltopic.errors import AuthenticationFailed, Error

SERVER_ENV = "SQLTOPIC_SERVER"
PASSWORD_ENV = "SQLTOPIC_PASSWORD"
TLS_CA_ENV = "SQLTOPIC_TLS_CA"
TLS_CERT_ENV = "SQLTOPIC_TLS_CERT"
TLS_KEY_ENV = "SQLTOPIC_TLS_KEY"
DEFAULT_USER = "root"
DEFAULT_PASSWORD = "taosdata"


@dataclass(frozen=True)
class ServerOptions:
    server: str
    user: str
    password: str
    tls: TlsFiles = NO_FILES
    transport: Transport = PLAIN  # `tls` read and checked

    @classmethod
    def of(cls, args: argparse.Namespace) -> ServerOptions:
        """The options; ConfigError names a --tls-* file that cannot be used."""
        files = TlsFiles(args.tls, args.tls_ca, args.tls_cert, args.tls_key)
        transport = load_transport(files, CLI_NAMES)
        return cls(args.server, args.user, args.password, files, transport)

    def consumer_config(self) -> dict[str, str]:
        """The consumer config keys of these options (server, login, TLS)."""
        config = {"server": self.server, "user": self.user, "password": self.password}
        if self.tls.secure:
            config["security.protocol"] = "ssl"
        paths = {
            "ssl.ca.location": self.tls.ca,
            "ssl.certificate.location": self.tls.cert,
            "ssl.key.location": self.tls.key,
        }
        return config | {key: path for key, path in paths.items() if path is not None}


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
    _add_tls_options(parser)
    return parser


def _add_tls_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (docs/security.md)")
    group.add_argument(
        "--tls",
        action="store_true",
        help="connect with TLS, trusting gRPC's default roots (implied by --tls-ca/-cert/-key)",
    )
    group.add_argument(
        "--tls-ca",
        default=os.environ.get(TLS_CA_ENV) or None,
        metavar="PEM",
        help=f"CA that signed the server's certificate: connect with TLS (default: ${TLS_CA_ENV})",
    )
    group.add_argument(
        "--tls-cert",
        default=os.environ.get(TLS_CERT_ENV) or None,
        metavar="PEM",
        help=f"client certificate, for mutual TLS; needs --tls-key (default: ${TLS_CERT_ENV})",
    )
    group.add_argument(
        "--tls-key",
        default=os.environ.get(TLS_KEY_ENV) or None,
        metavar="PEM",
        help=f"the client certificate's private key (default: ${TLS_KEY_ENV})",
    )


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
        conn = connect_with(options.transport, options.server, options.user, options.password)
    except AuthenticationFailed:
        raise
    except TlsHandshakeError as exc:
        raise tls_failure(options, exc) from None
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


def tls_failure(options: ServerOptions, exc: TlsHandshakeError) -> Error:
    """A failed handshake, in the CLI's option names, with the address."""
    return Error(f"cannot connect to the server at {options.server}: {exc.named(CLI_NAMES)}")
