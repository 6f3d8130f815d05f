"""`--http-port PORT`: the read-only web console over HTTP (HTTPS when the server has
`--tls-cert`), served from a thread of the server process by the standard library.

Routes: `/` and its two static files (the page, no build step); `POST /api/session`
logs in with the protocol's users and passwords (the same `Sessions`, the same
throttle) and answers the protocol's bearer token; `GET /api/session` and
`GET /api/overview` want `Authorization: Bearer <token>` (a token of a gRPC `Login`
works too); `DELETE /api/session` logs out. docs/operations.md §9.5 documents it.

Every client is hostile: the body of a login is at most `MAX_LOGIN_BODY` bytes of JSON
with two strings; at most `MAX_CONSOLE_CONNECTIONS` connections are served at once,
each for at most `CONSOLE_IO_TIMEOUT_S` of silence; one request per connection; a
console on a loopback address answers only requests that name a loopback host (a
DNS-rebinding page cannot reach it, and so cannot try root's default password); every
answer carries a Content-Security-Policy that allows only the page's own files.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import socket
import ssl
import tempfile
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

from sqltopic.errors import (
    AuthenticationFailed,
    ConfigError,
    Error,
    InvalidRequest,
    LoginThrottled,
)
from sqltopic.proto.status import code_of
from sqltopic.server.common.result import Session
from sqltopic.server.console.api import ConsoleApi
from sqltopic.server.mnode.auth import AUTH_HEADER, Sessions
from sqltopic.server.mnode.passwords import is_loopback

log = logging.getLogger("sqltopic.server")

# A login is two short strings: anything longer is not one.
MAX_LOGIN_BODY = 4096
# Connections served at once: a few browsers' worth; more wait in the kernel's backlog
# or are refused, and never cost a thread each.
MAX_CONSOLE_CONNECTIONS = 32
# Silence on a connection (a slow TLS handshake or request included) before it is
# closed: a page's request takes milliseconds.
CONSOLE_IO_TIMEOUT_S = 10.0
# The page and its files, read once at start.
STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
# Only the page's own files: no inline script, no other origin, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# gRPC status codes as HTTP statuses (grpc-gateway's table).
HTTP_OF_CODE = {
    "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409, "ABORTED": 409, "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499, "UNIMPLEMENTED": 501, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504,
}  # fmt: skip


class HttpError(Exception):
    """A refusal of the HTTP layer itself (no sqltopic error names it)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class ConsoleServer(ThreadingHTTPServer):
    """The listening console: a thread per connection, at most MAX_CONSOLE_CONNECTIONS."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], api: ConsoleApi, sessions: Sessions,
        tls: ssl.SSLContext | None, max_connections: int = MAX_CONSOLE_CONNECTIONS,
        io_timeout_s: float = CONSOLE_IO_TIMEOUT_S,
    ) -> None:  # fmt: skip
        self.api, self.sessions, self.tls = api, sessions, tls
        self.io_timeout_s = io_timeout_s
        self.loopback = is_loopback(address[0])
        self.files = {path: ((STATIC_DIR / name).read_bytes(), kind)
                      for path, (name, kind) in STATIC.items()}  # fmt: skip
        self._slots = threading.BoundedSemaphore(max_connections)
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, ConsoleHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: the client may retry
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.io_timeout_s)
        if self.tls is not None:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                log.debug("console: TLS handshake with %s failed: %s", client_address, exc)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that went away mid-answer: nothing to tell anyone
        log.debug("console: connection from %s failed", client_address, exc_info=True)


class ConsoleHandler(BaseHTTPRequestHandler):
    """One request (HTTP/1.0: the connection closes after the answer)."""

    server: ConsoleServer
    server_version = "sqltopic-console"
    timeout = None  # ConsoleServer.finish_request set the connection's (io_timeout_s)

    def version_string(self) -> str:
        return self.server_version  # not Python's version: nothing to fingerprint

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def do_DELETE(self) -> None:
        self._answer(self._delete)

    def do_PUT(self) -> None:
        self._answer(self._refuse)

    do_PATCH = do_HEAD = do_OPTIONS = do_PUT

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("console: %s %s", self.address_string(), format % args)

    def _get(self) -> tuple[int, Any]:
        path = self.path.split("?", 1)[0]
        if path in self.server.files:
            return 200, self.server.files[path]
        if path == "/api/session":
            return 200, self.server.api.me(self._session())
        if path == "/api/overview":
            return 200, self.server.api.overview(self._session())
        raise HttpError(404, "NOT_FOUND", f"no page {path[:100]!r}: the console is at /")

    def _post(self) -> tuple[int, Any]:
        if self.path != "/api/session":
            self._refuse()
        user, password = self._credentials()
        token, session = self.server.sessions.login(user, password, self.client_address[0])
        return 200, {"token": token, **self.server.api.me(session)}

    def _delete(self) -> tuple[int, Any]:
        if self.path != "/api/session":
            self._refuse()
        self.server.sessions.logout(self._authorization())
        return 200, {}

    def _refuse(self) -> NoReturn:
        raise HttpError(
            405, "METHOD_NOT_ALLOWED",
            f"{self.command} {self.path[:100]!r} is not served: the console is read-only "
            "(GET its pages and /api/overview; POST or DELETE /api/session to log in or out)",
        )  # fmt: skip

    def _answer(self, route: Any) -> None:
        self._retry_after = 0
        try:
            self._check_host()
            status, body = route()
        except HttpError as exc:
            status, body = exc.status, _error(exc.code, type(exc).__name__, str(exc))
        except LoginThrottled as exc:  # HTTP has a status of its own for it (RFC 6585)
            status, body = 429, _error(code_of(exc).name, type(exc).__name__, str(exc))
            self._retry_after = math.ceil(exc.retry_after_s)
        except Error as exc:
            code = code_of(exc).name
            status, body = HTTP_OF_CODE.get(code, 500), _error(code, type(exc).__name__, str(exc))
        except Exception as exc:
            log.error("console: unexpected error", exc_info=exc)
            status, body = 500, _error(
                "INTERNAL", "Error",
                f"internal server error ({type(exc).__name__}); the server log has the details",
            )  # fmt: skip
        self._send(status, body)

    def _send(self, status: int, body: Any) -> None:
        if isinstance(body, tuple):  # a static file
            data, kind = body
        else:
            data, kind = json.dumps(body).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Bearer realm="sqltopic"')
        if status == HTTPStatus.TOO_MANY_REQUESTS:
            self.send_header("Retry-After", str(self._retry_after))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _check_host(self) -> None:
        """A console on loopback answers only requests for a loopback host name."""
        if not self.server.loopback:
            return
        host = self.headers.get("Host", "")
        if _loopback_host(host):
            return
        raise HttpError(
            403, "PERMISSION_DENIED",
            f"Host {host[:100]!r} is not this machine: the console listens on a loopback "
            "address and answers only requests for 127.0.0.1, [::1] or localhost",
        )  # fmt: skip

    def _authorization(self) -> list[tuple[str, str]]:
        value = self.headers.get("Authorization")
        return [] if value is None else [(AUTH_HEADER, value)]

    def _session(self) -> Session:
        if "Authorization" not in self.headers:
            raise AuthenticationFailed(
                "no Authorization header: log in (POST /api/session) and send "
                "'Authorization: Bearer <token>'"
            )
        return self.server.sessions.session(self._authorization())

    def _credentials(self) -> tuple[str, str]:
        """The login's user and password, from a JSON body checked before parsing."""
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            raise HttpError(
                411, "LENGTH_REQUIRED",
                "a login needs a Content-Length header and a JSON body "
                '{"user": ..., "password": ...}',
            )  # fmt: skip
        if int(length) > MAX_LOGIN_BODY:
            raise HttpError(
                413, "TOO_LARGE",
                f"a login body is at most {MAX_LOGIN_BODY} bytes; this one has {length}: "
                'send {"user": ..., "password": ...} only',
            )  # fmt: skip
        data = self.rfile.read(int(length))
        try:
            body = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidRequest(f"the login body is not JSON ({exc}): send "
                                 '{"user": ..., "password": ...}') from None  # fmt: skip
        if not isinstance(body, dict) or set(body) != {"user", "password"}:
            raise InvalidRequest('a login body is {"user": ..., "password": ...} and no more')
        user, password = body["user"], body["password"]
        if not isinstance(user, str) or not isinstance(password, str) or not user:
            raise InvalidRequest('"user" (not empty) and "password" must be JSON strings')
        return user, password


def _loopback_host(host: str) -> bool:
    """Whether a Host header names this machine literally: `localhost`, or a loopback
    address, with or without a port. Never resolved: a rebinding attacker's own name
    resolves to 127.0.0.1 by design."""
    if host.startswith("["):  # an IPv6 address, [::1] or [::1]:PORT
        name = host[1 : host.find("]")] if "]" in host else ""
    else:
        name = host.split(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _error(code: str, kind: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "type": kind, "message": message}}


def tls_context(cert_chain: bytes, private_key: bytes, client_ca: bytes | None) -> ssl.SSLContext:
    """The server side of the console's TLS: the gRPC port's certificate and key (PEM),
    and its client CA for mutual TLS. The standard library loads a chain only from a
    file: it is written to a private temporary directory and removed at once."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="sqltopic-console-") as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_bytes(cert_chain)
        key.write_bytes(private_key)
        context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=client_ca.decode())
    return context


def start_console(
    host: str, port: int, api: ConsoleApi, sessions: Sessions, tls: ssl.SSLContext | None,
    max_connections: int = MAX_CONSOLE_CONNECTIONS, io_timeout_s: float = CONSOLE_IO_TIMEOUT_S,
) -> tuple[ConsoleServer, str]:  # fmt: skip
    """Listen and serve from a thread; the server and its URL. ConfigError when the
    address cannot be bound."""
    try:
        server = ConsoleServer((host, port), api, sessions, tls, max_connections, io_timeout_s)
    except OSError as exc:
        raise ConfigError(
            f"--http-port: cannot listen on {host}:{port}: {exc.strerror or exc}; choose "
            "another port"
        ) from None
    threading.Thread(target=server.serve_forever, name="sqltopic-console", daemon=True).start()
    bound = server.server_address[1]
    scheme = "https" if tls is not None else "http"
    shown = f"[{host}]" if ":" in host else host
    return server, f"{scheme}://{shown}:{bound}/"
