"""TLS material for the TLS tests, made at run time with trustme: a CA, a server
certificate for 127.0.0.1 and localhost, one for another host only, a client certificate
it signed, and a second, unrelated CA with a client certificate of its own, all as PEM
files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

SERVER_NAMES = ("127.0.0.1", "localhost")
CLIENT_NAME = "client@sqltopic.test"
OTHER_HOST = "db.sqltopic.test"  # a name no test connects by


@dataclass(frozen=True)
class Pki:
    """PEM files: `ca` signed the server's and the client's certificates; `other_ca`
    signed only `stranger_cert` (a client the server must not trust)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    stranger_cert: Path
    stranger_key: Path
    elsewhere_cert: Path  # a server certificate of `ca` for OTHER_HOST only
    elsewhere_key: Path

    def server_args(self, mutual: bool = False) -> tuple[str, ...]:
        """The server's TLS options (with `mutual`: clients need a certificate of `ca`)."""
        args = ("--tls-cert", str(self.server_cert), "--tls-key", str(self.server_key))
        return (*args, "--tls-client-ca", str(self.ca)) if mutual else args


def make_pki(directory: Path) -> Pki:
    """Every file of a `Pki`, written to `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert(*SERVER_NAMES)
    client = ca.issue_cert(CLIENT_NAME)
    stranger = other.issue_cert(CLIENT_NAME)
    elsewhere = ca.issue_cert(OTHER_HOST)

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    return Pki(
        ca=write("ca.pem", ca.cert_pem.bytes()),
        server_cert=write("server.pem", b"".join(p.bytes() for p in server.cert_chain_pems)),
        server_key=write("server-key.pem", server.private_key_pem.bytes()),
        client_cert=write("client.pem", b"".join(p.bytes() for p in client.cert_chain_pems)),
        client_key=write("client-key.pem", client.private_key_pem.bytes()),
        other_ca=write("other-ca.pem", other.cert_pem.bytes()),
        stranger_cert=write("stranger.pem", stranger.cert_chain_pems[0].bytes()),
        stranger_key=write("stranger-key.pem", stranger.private_key_pem.bytes()),
        elsewhere_cert=write("elsewhere.pem", elsewhere.cert_chain_pems[0].bytes()),
        elsewhere_key=write("elsewhere-key.pem", elsewhere.private_key_pem.bytes()),
    )
