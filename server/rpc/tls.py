"""TLS for `sqltopic server`: its PEM files (`--tls-cert`, `--tls-key`, `--tls-client-ca`)
read and checked into `ServerTls` (which grpc_server.py turns into credentials), and the
rule that a server off loopback speaks TLS unless `--allow-plaintext` says otherwise. It
imports no gRPC: the client commands parse the server's options too.

Every problem with a file is a ConfigError naming the option and the file, raised before
the data directory is touched: gRPC itself would only fail each handshake later, with a
message on the server's log that no client sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqltopic.errors import ConfigError
from sqltopic.proto.pem import check_pair, read_pem
from sqltopic.server.mnode.passwords import is_loopback

CERT_OPTION = "--tls-cert"
KEY_OPTION = "--tls-key"
CLIENT_CA_OPTION = "--tls-client-ca"
PLAINTEXT_OPTION = "--allow-plaintext"


@dataclass(frozen=True)
class ServerTls:
    """The server's TLS material, as PEM bytes; `client_ca` set: mutual TLS, every client
    must present a certificate that CA signed."""

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None


def load_server_tls(cert: str | None, key: str | None, client_ca: str | None) -> ServerTls | None:
    """The options' files read and checked (None: no TLS); ConfigError names the option
    and the file of the first problem."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError(
                f"{CLIENT_CA_OPTION} {client_ca}: mutual TLS needs the server's own certificate "
                f"too; give {CERT_OPTION} and {KEY_OPTION}"
            )
        return None
    if key is None:
        raise ConfigError(
            f"{CERT_OPTION} {cert}: given without {KEY_OPTION}; give the certificate's "
            f"private key (PEM) with {KEY_OPTION}"
        )
    if cert is None:
        raise ConfigError(
            f"{KEY_OPTION} {key}: given without {CERT_OPTION}; give the server's certificate "
            f"(PEM) with {CERT_OPTION}"
        )
    chain = read_pem(f"{CERT_OPTION} {cert}", cert, "certificate")
    private = read_pem(f"{KEY_OPTION} {key}", key, "private key")
    check_pair(f"{CERT_OPTION} {cert}", cert, f"{KEY_OPTION} {key}", key)
    if client_ca is None:
        return ServerTls(chain, private)
    roots = read_pem(f"{CLIENT_CA_OPTION} {client_ca}", client_ca, "CA certificate")
    return ServerTls(chain, private, roots)


def check_plaintext(host: str, tls: ServerTls | None, allow_plaintext: bool) -> None:
    """ConfigError when the server would speak plain text on a non-loopback address
    without `--allow-plaintext`: anyone on the path could read passwords and data."""
    if tls is None and not allow_plaintext and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without TLS (passwords and data would cross the "
            f"network in plain text): give {CERT_OPTION} and {KEY_OPTION} (docs/security.md), "
            f"listen on 127.0.0.1, or give {PLAINTEXT_OPTION} to accept plain text"
        )
