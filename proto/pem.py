"""PEM files for TLS, read and checked before gRPC sees them: the server's `--tls-*`
options (server/rpc/tls.py) and the clients' TLS settings (client/tls.py) share these checks.

gRPC reads PEM only, and would report a missing, wrong or encrypted file only as a
failed handshake later, on the other side; here each problem is a ConfigError naming
the setting and the file (`label`, e.g. `--tls-key server.key` or `ssl.ca.location
ca.pem`).
"""

from __future__ import annotations

import re
import ssl
from typing import Literal

from sqltopic.errors import ConfigError

PemKind = Literal["CA certificate", "certificate", "private key"]

# What a PEM file of each kind must hold: a DER file (or the wrong file) is refused.
CERT_MARKER = b"-----BEGIN CERTIFICATE-----"
KEY_MARKER = b"PRIVATE KEY-----"
# An encrypted key needs a passphrase, which gRPC has no way to ask for.
ENCRYPTED_MARKERS = (b"ENCRYPTED PRIVATE KEY", b"Proc-Type: 4,ENCRYPTED")
# Certificates and keys take a few KiB; a bigger file is not one (a log, a data file).
MAX_PEM_BYTES = 1024 * 1024
# The tail of an ssl.SSLError's text: where in CPython's _ssl.c it was raised.
_SOURCE_PLACE = re.compile(r" \(_ssl\.c:\d+\)$")


def read_pem(label: str, path: str, kind: PemKind) -> bytes:
    """The PEM file `path` (given as `label`), checked to hold a `kind`."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read the {kind} file: {exc.strerror}") from None
    if len(data) > MAX_PEM_BYTES:
        raise ConfigError(f"{label}: over {MAX_PEM_BYTES:,} bytes; not a PEM {kind}")
    if kind == "private key":
        _check_key(label, data)
    else:
        _check_certificates(label, data, kind)
    return data


def check_pair(cert_label: str, cert: str, key_label: str, key: str) -> None:
    """ConfigError unless the key file `key` is the private key of the certificate in
    `cert`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(
            f"{key_label}: not the private key of the certificate in {cert_label} "
            f"({reason(exc)}); give the key the certificate was issued for"
        ) from None


def reason(exc: Exception) -> str:
    """OpenSSL's words, without the place in CPython's source they came from."""
    return _SOURCE_PLACE.sub("", str(exc))


def _check_key(label: str, data: bytes) -> None:
    if KEY_MARKER not in data:
        raise ConfigError(
            f"{label}: not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' line)"
        )
    if any(marker in data for marker in ENCRYPTED_MARKERS):
        raise ConfigError(
            f"{label}: the private key is encrypted, and gRPC cannot ask for its "
            "passphrase; decrypt it (openssl pkey -in KEY -out PLAIN_KEY) and protect the "
            "file with its permissions"
        )


def _check_certificates(label: str, data: bytes, kind: PemKind) -> None:
    if CERT_MARKER not in data:
        raise ConfigError(f"{label}: not a PEM {kind} (no '{CERT_MARKER.decode()}' line)")
    try:
        ssl.create_default_context(cadata=data.decode("latin-1"))
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"{label}: not a valid PEM {kind}: {reason(exc)}") from None


def _no_passphrase() -> bytes:
    raise ValueError("the private key is encrypted")
