"""Sessions of the gRPC server: the root user's password check, and bearer tokens that
each own a `Session` (the current database). Tokens live in memory only: a restart ends
every session, as docs/protocol.md promises."""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Iterable

from sqltopic.errors import AuthenticationFailed
from sqltopic.server.result import Session

ROOT_USER = "root"
DEFAULT_ROOT_PASSWORD = "taosdata"  # TDengine's default, so its examples work unchanged
AUTH_HEADER = "authorization"
BEARER = "Bearer "
# 32 random bytes: unguessable, and short enough for a header.
TOKEN_BYTES = 32


class Sessions:
    """The open sessions, by token. Thread-safe."""

    def __init__(self, root_password: str) -> None:
        self._root_password = root_password
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()

    def login(self, user: str, password: str) -> tuple[str, Session]:
        """A new token and its session; AuthenticationFailed on a wrong user or password."""
        if user != ROOT_USER or not hmac.compare_digest(
            password.encode(), self._root_password.encode()
        ):
            raise AuthenticationFailed("wrong user or password")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        session = Session(user=user)
        with self._lock:
            self._by_token[token] = session
        return token, session

    def session(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Session:
        """The session the call's `authorization: Bearer <token>` names."""
        return self._lookup(token_of(metadata))

    def logout(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        token = token_of(metadata)
        self._lookup(token)
        with self._lock:
            self._by_token.pop(token, None)

    def _lookup(self, token: str) -> Session:
        with self._lock:
            session = self._by_token.get(token)
        if session is None:
            raise AuthenticationFailed("unknown or expired token: log in again")
        return session


def token_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The bearer token in a call's metadata; AuthenticationFailed when there is none."""
    for key, value in metadata or ():
        if key.lower() != AUTH_HEADER:
            continue
        text = value.decode() if isinstance(value, bytes) else value
        if text.startswith(BEARER) and text[len(BEARER) :].strip():
            return text[len(BEARER) :].strip()
        raise AuthenticationFailed("malformed authorization header: expected 'Bearer <token>'")
    raise AuthenticationFailed("missing authorization metadata: log in and send the token")
