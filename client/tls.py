"""TLS for clients: the PEM files of `connect(tls_ca=…, tls_cert=…, tls_key=…)`, of the
consumer's `ssl.*` keys and of the CLI's `--tls-*` options, read and checked once into a
`Transport`; the channels a transport opens; and what a failed TLS handshake becomes.

gRPC reports a failed handshake as an unavailable server, like a server that is not
running. `handshake_error` recognises the handshake's own words in that status and makes
a `TlsHandshakeError` (a ServerUnavailable) that says TLS is the likely cause and what to
check, in the caller's own names for the settings (`TlsNames`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Literal

import grpc
from grpc import aio

from sqltopic.errors import ConfigError, ServerUnavailable
from sqltopic.proto.pem import check_pair, read_pem

Problem = Literal[
    "plain_to_tls", "not_tls", "untrusted", "hostname", "no_client_cert", "refused", "other"
]
Options = list[tuple[str, int]]

# gRPC's words for a connection that never came up (as opposed to a call that failed).
CONNECT_FAILED = "failed to connect to all addresses"
# The peer hung up during set-up: a TLS server hearing plain text, or a mutual-TLS
# server refusing the client's certificate (TLS 1.3 reports that only after the
# client's side of the handshake is done, so the client sees a closed socket).
CLOSED = ("Socket closed", "Connection reset")
# The handshake's own words, from gRPC's TSI layer and BoringSSL.
HANDSHAKE = ("Tls handshake failed", "TSI_", "SSL_ERROR", "Handshake", "handshake")
# BoringSSL's reason when a TLS client reads a plain-text (HTTP/2) answer.
NOT_TLS = "WRONG_VERSION_NUMBER"
UNTRUSTED = re.compile(r"CERTIFICATE_VERIFY_FAILED:\s*([^:]+)")
HOSTNAME = "Hostname Verification Check failed"


@dataclass(frozen=True)
class TlsNames:
    """How the caller spells each setting, for messages: connect()'s keyword arguments,
    the consumer's config keys or the CLI's options."""

    on: str  # TLS with gRPC's default roots
    ca: str
    cert: str
    key: str


CONNECT_NAMES = TlsNames("tls=True", "tls_ca", "tls_cert", "tls_key")
CONSUMER_NAMES = TlsNames(
    "security.protocol=ssl", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location"
)
CLI_NAMES = TlsNames("--tls", "--tls-ca", "--tls-cert", "--tls-key")


@dataclass(frozen=True)
class TlsFiles:
    """Where a client's TLS material is: PEM file paths, not read yet. TLS is on when
    `enabled` or any path is given; no `ca`: gRPC's default roots."""

    enabled: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @property
    def secure(self) -> bool:
        return self.enabled or any(p is not None for p in (self.ca, self.cert, self.key))


NO_FILES = TlsFiles()


@dataclass(frozen=True)
class Transport:
    """How a client reaches a server: plain text, or (`secure`) TLS with these PEM
    contents: `ca` None trusts gRPC's default roots; `cert` and `key` are the client's
    certificate for mutual TLS."""

    secure: bool = False
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    names: TlsNames = CONNECT_NAMES

    def channel(self, address: str, options: Options) -> grpc.Channel:
        if not self.secure:
            return grpc.insecure_channel(address, options=options)
        return grpc.secure_channel(address, self._credentials(), options=options)

    def aio_channel(self, address: str, options: Options) -> aio.Channel:
        if not self.secure:
            return aio.insecure_channel(address, options=options)
        return aio.secure_channel(address, self._credentials(), options=options)

    def _credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)


PLAIN = Transport()
PathArg = str | os.PathLike[str] | None


def tls_files(enabled: bool, ca: PathArg, cert: PathArg, key: PathArg) -> TlsFiles:
    """connect()'s TLS arguments as a program gives them (str or Path), type-checked."""
    if not isinstance(enabled, bool):
        raise ConfigError(f"tls: {enabled!r} is not True or False")
    names = CONNECT_NAMES
    return TlsFiles(enabled, _path(names.ca, ca), _path(names.cert, cert), _path(names.key, key))


def _path(name: str, value: PathArg) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ConfigError(f"{name}: {value!r} is not the path of a PEM file")
    return str(os.fspath(value))


def load_transport(files: TlsFiles, names: TlsNames = CONNECT_NAMES) -> Transport:
    """`files` read and checked; ConfigError names the setting (in `names`) and the file
    of the first problem."""
    if (files.cert is None) != (files.key is None):
        given, missing = (names.cert, names.key) if files.key is None else (names.key, names.cert)
        path = files.cert if files.key is None else files.key
        raise ConfigError(
            f"{given}: {path} is given without {missing}; mutual TLS needs both the client's "
            "certificate and its private key (PEM files)"
        )
    if not files.secure:
        return replace(PLAIN, names=names)
    ca = read_pem(f"{names.ca} {files.ca}", files.ca, "CA certificate") if files.ca else None
    cert = key = None
    if files.cert is not None and files.key is not None:
        cert_label, key_label = f"{names.cert} {files.cert}", f"{names.key} {files.key}"
        cert = read_pem(cert_label, files.cert, "certificate")
        key = read_pem(key_label, files.key, "private key")
        check_pair(cert_label, files.cert, key_label, files.key)
    return Transport(True, ca, cert, key, names)


# --- failed handshakes -----------------------------------------------------------------


class TlsHandshakeError(ServerUnavailable):
    """The connection failed during set-up in a way that points at TLS: a plain-text
    client and a TLS server or the reverse, a server certificate the client does not
    trust, a client certificate the server refused. The message says what to check."""

    def __init__(self, problem: Problem, transport: Transport, detail: str) -> None:
        self.problem = problem
        self.transport = transport
        self.detail = detail
        super().__init__(f"{_advice(problem, transport, detail)} (gRPC: {detail})")

    def named(self, names: TlsNames) -> TlsHandshakeError:
        """The same error, with the settings spelled as `names` spells them."""
        return TlsHandshakeError(self.problem, replace(self.transport, names=names), self.detail)


def handshake_error(transport: Transport, detail: str) -> TlsHandshakeError | None:
    """The TLS error that an UNAVAILABLE status with `detail` stands for, if any."""
    problem = _problem(transport, detail)
    return None if problem is None else TlsHandshakeError(problem, transport, detail)


def _problem(transport: Transport, detail: str) -> Problem | None:
    closed = CONNECT_FAILED in detail and any(word in detail for word in CLOSED)
    if not transport.secure:
        return "plain_to_tls" if closed else None
    if NOT_TLS in detail:
        return "not_tls"
    if UNTRUSTED.search(detail):
        return "untrusted"
    if HOSTNAME in detail:
        return "hostname"
    if closed:
        return "no_client_cert" if transport.cert is None else "refused"
    if any(word in detail for word in HANDSHAKE):
        return "other"
    return None


# What each problem most likely means and what to check; {ca} etc. are the caller's
# names for the settings, {why} OpenSSL's reason for distrusting a certificate.
ADVICE: dict[Problem, str] = {
    "plain_to_tls": (
        "the server closed the connection during set-up: it most likely requires TLS, and "
        "this client speaks plain text; connect with TLS ({ca} naming the CA that signed the "
        "server's certificate, or {on} for the default roots)"
    ),
    "not_tls": (
        "TLS handshake failed: the server answered in plain text, so it does not speak TLS; "
        "connect without TLS (no {on}, {ca}, {cert}, {key}), or start the server with "
        "--tls-cert and --tls-key"
    ),
    "untrusted": (
        "TLS handshake failed: this client does not trust the server's certificate{why}; "
        "give {ca} the CA that signed the server's --tls-cert, and check the certificate's "
        "validity dates"
    ),
    "hostname": (
        "TLS handshake failed: the server's certificate does not name the host this client "
        "connects to; connect by a name or IP address listed in the certificate's "
        "subjectAltName, or issue the certificate for this one"
    ),
    "no_client_cert": (
        "the server closed the connection during the TLS handshake: it most likely requires "
        "a client certificate (mutual TLS); give {cert} and {key}, signed by the CA of the "
        "server's --tls-client-ca"
    ),
    "refused": (
        "the server closed the connection during the TLS handshake: it most likely refused "
        "this client's certificate ({cert}); give one signed by the CA of the server's "
        "--tls-client-ca"
    ),
    "other": (
        "TLS handshake failed; check the CA ({ca}), the client certificate ({cert}) and key "
        "({key}) against the server's --tls-cert and --tls-client-ca"
    ),
}


def _advice(problem: Problem, transport: Transport, detail: str) -> str:
    found = UNTRUSTED.search(detail)
    why = f" ({found.group(1).strip()})" if found else ""
    n = transport.names
    return ADVICE[problem].format(on=n.on, ca=n.ca, cert=n.cert, key=n.key, why=why)
