"""The console's HTTP server and API in this process, over a real engine and real
sockets: the bound on connections, the silence timeout, TLS and mutual TLS with the
server's certificates, and the API's rows (times in UTC, lists cut at MAX_CONSOLE_ROWS)."""

from __future__ import annotations

import socket
import ssl
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.server.console import api as api_module
from sqltopic.server.console.api import ConsoleApi
from sqltopic.server.console.lag_history import LagHistory
from sqltopic.server.console.web import ConsoleServer, start_console, tls_context
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.rpc.tls import load_server_tls
from tests.console.support import call, login, wait_for
from tests.security.certs import Pki, make_pki

# A TLS handshake the server refuses fails the client's connect (urllib's URLError) or,
# with TLS 1.3, its first read: the server's alert, or, when the server closed before the
# client read it, an EOF or a reset.
REFUSED_HANDSHAKE = (urllib.error.URLError, ssl.SSLError, ConnectionError)
CLOSED = "EOF occurred in violation of protocol|Connection reset"
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine(tmp_path / "data") as made:
        made.execute("CREATE DATABASE power VGROUPS 2; CREATE DATABASE other VGROUPS 1")
        yield made


def _serve(
    engine: Engine, tls: ssl.SSLContext | None = None, *, max_connections: int = 32,
    io_timeout_s: float = 10.0,
) -> tuple[ConsoleServer, str]:  # fmt: skip
    api = ConsoleApi(engine, LagHistory(), lambda: NOW_MS)
    sessions = Sessions("taosdata", engine.users())
    return start_console("127.0.0.1", 0, api, sessions, tls, max_connections, io_timeout_s)


def _stop(server: ConsoleServer) -> None:
    server.shutdown()
    server.server_close()


def test_the_overview_of_an_engine_without_groups(engine: Engine) -> None:
    server, url = _serve(engine)
    try:
        data = call(url + "api/overview", token=login(url)).json
    finally:
        _stop(server)
    assert data["now"] == "2026-01-01T00:00:00.000Z"
    assert [d["name"] for d in data["databases"]] == ["other", "power"]
    assert all(d["create_time"].endswith("Z") for d in data["databases"])
    assert len(data["vgroups"]) == 3
    assert (data["consumers"], data["subscriptions"], data["rebalances"]) == ([], [], [])
    assert data["lag"]["series"] == []


def test_lists_are_cut_at_the_bound(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_module, "MAX_CONSOLE_ROWS", 2)
    server, url = _serve(engine)
    try:
        data = call(url + "api/overview", token=login(url)).json
    finally:
        _stop(server)
    assert len(data["vgroups"]) == 2
    assert data["truncated"] == ["vgroups"]


def test_connections_beyond_the_bound_are_closed_unserved(engine: Engine) -> None:
    server, url = _serve(engine, max_connections=2, io_timeout_s=60.0)
    address = ("127.0.0.1", server.server_address[1])
    idle = [socket.create_connection(address, timeout=30) for _ in range(2)]
    try:

        def refused() -> bool:
            """A third connection is accepted by the kernel and closed unanswered."""
            with socket.create_connection(address, timeout=30) as extra:
                extra.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                try:
                    return extra.recv(100) == b""
                except ConnectionResetError:
                    return True

        assert wait_for("the third connection refused", refused)
        for sock in idle:
            sock.close()
        assert wait_for("served again once they closed", lambda: _served(url))
    finally:
        for sock in idle:
            sock.close()
        _stop(server)


def _served(url: str) -> bool:
    """Whether a request is answered (the closed connections' slots may not be free yet:
    their threads notice the close first)."""
    try:
        return call(url).status == 200
    except ConnectionError:
        return False


def test_a_silent_connection_is_closed(engine: Engine) -> None:
    server, _ = _serve(engine, io_timeout_s=0.2)
    try:
        address = ("127.0.0.1", server.server_address[1])
        with socket.create_connection(address, timeout=30) as silent:
            assert silent.recv(100) == b""  # closed by the server, nothing answered
    finally:
        _stop(server)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _context(pki: Pki, mutual: bool) -> ssl.SSLContext:
    tls = load_server_tls(
        str(pki.server_cert), str(pki.server_key), str(pki.ca) if mutual else None
    )
    assert tls is not None
    return tls_context(tls.cert_chain, tls.private_key, tls.client_ca)


def test_tls_with_the_servers_certificate(engine: Engine, pki: Pki) -> None:
    server, url = _serve(engine, _context(pki, mutual=False))
    try:
        assert url.startswith("https://127.0.0.1:")
        trusting = ssl.create_default_context(cafile=str(pki.ca))
        assert call(url, context=trusting).status == 200
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            call(url, context=ssl.create_default_context())
        plain = url.replace("https://", "http://")
        with pytest.raises(ConnectionError):  # plain text to a TLS port: no HTTP answer
            call(plain)
    finally:
        _stop(server)


def test_mutual_tls_wants_a_client_certificate(engine: Engine, pki: Pki) -> None:
    server, url = _serve(engine, _context(pki, mutual=True))
    try:
        client = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises(REFUSED_HANDSHAKE, match=f"CERTIFICATE_REQUIRED|{CLOSED}"):
            call(url, context=client)
        client.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        assert call(url, context=client).status == 200
        stranger = ssl.create_default_context(cafile=str(pki.ca))
        stranger.load_cert_chain(str(pki.stranger_cert), str(pki.stranger_key))
        with pytest.raises(REFUSED_HANDSHAKE, match=f"UNKNOWN_CA|{CLOSED}"):
            call(url, context=stranger)
    finally:
        _stop(server)
