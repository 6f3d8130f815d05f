"""Sessions of the gRPC server: password checks at login, and bearer tokens that each
own a `Session` (the current database and the user).

`root` logs in with the password the server was started with (kept only as a salted
hash in memory, and checked as slowly as any other); other users with the password
CREATE/ALTER USER set (a salted hash in the catalog, server/mnode/passwords.py). Failed
logins are throttled per user and per peer address (server/mnode/throttle.py).
Tokens live in memory only: a restart ends every session, as docs/protocol.md promises.
A token remembers the salt of its user's password at login: ALTER USER draws a new
salt and DROP USER removes the record, so either ends the user's sessions at their
next call, with nothing to notify.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqltopic.errors import AuthenticationFailed, ServerUnavailable
from sqltopic.server.common.result import Session
from sqltopic.server.mnode.passwords import (
    dummy_check,
    hash_password,
    new_salt,
    verify_password,
)
from sqltopic.server.mnode.throttle import LoginThrottle
from sqltopic.sql.model import User

__all__ = ["ROOT_USER", "Sessions", "UserLookup", "token_of"]

ROOT_USER = "root"
AUTH_HEADER = "authorization"
# The auth scheme; matched case-insensitively (RFC 7235 §2.1), so `bearer` works too.
BEARER = "bearer"
# 32 random bytes: unguessable, and short enough for a header.
TOKEN_BYTES = 32
# Sessions one user may hold open (see Limits.max_sessions_per_user).
DEFAULT_MAX_SESSIONS = 1024

# The catalog's record of a user other than root, None when there is none.
UserLookup = Callable[[str], User | None]


def _no_users(name: str) -> User | None:
    return None


@dataclass(frozen=True)
class _Login:
    session: Session
    salt: str  # of the user's password at login ("" for root)


class Sessions:
    """The open sessions, by token. Thread-safe."""

    def __init__(
        self, root_password: str | None, users: UserLookup = _no_users,
        throttle: LoginThrottle | None = None, max_per_user: int = DEFAULT_MAX_SESSIONS,
    ) -> None:  # fmt: skip
        # a dnode's sessions learn root's from the mnode (`set_root`); until then root
        # cannot log in there
        self._root_salt = new_salt() if root_password is not None else ""
        self._root_hash = (
            hash_password(root_password, self._root_salt) if root_password is not None else ""
        )
        self._users = users
        self._throttle = throttle or LoginThrottle()
        self._max_per_user = max_per_user
        self._by_token: dict[str, _Login] = {}
        # each user's tokens, least recently used first: a login beyond the limit ends
        # the session its user used least recently
        self._by_user: dict[str, OrderedDict[str, None]] = {}
        self._lock = threading.Lock()
        self.login_failures = 0  # wrong user or password, since the start (/metrics)

    def login(self, user: str, password: str, peer: str = "") -> tuple[str, Session]:
        """A new token and its session; AuthenticationFailed on a wrong user or password,
        LoginThrottled while `user` or `peer` (an address) waits after failed logins."""
        name = user.lower()  # user names are identifiers: case-insensitive
        self._throttle.check(name, peer)
        try:
            salt = self._check(name, password)
        except AuthenticationFailed:
            self._throttle.failed(name, peer)
            self.login_failures += 1
            raise
        self._throttle.succeeded(name)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        session = Session(user=name)
        with self._lock:
            self._by_token[token] = _Login(session, salt)
            tokens = self._by_user.setdefault(name, OrderedDict())
            tokens[token] = None
            while len(tokens) > self._max_per_user:
                oldest, _ = tokens.popitem(last=False)
                self._by_token.pop(oldest, None)
        return token, session

    def _check(self, name: str, password: str) -> str:
        """The salt the login is bound to; AuthenticationFailed on a wrong password.
        The message never says which of user and password was wrong."""
        if name == ROOT_USER:
            if not self._root_hash:
                raise ServerUnavailable(
                    "this dnode has not heard from its mnode yet, which holds root's "
                    "password: retry in a moment"
                )
            if verify_password(password, self._root_salt, self._root_hash):
                return ""
            raise AuthenticationFailed("wrong user or password")
        record = self._users(name)
        if record is None:
            dummy_check(password)
        elif verify_password(password, record.salt, record.password_hash):
            return record.salt
        raise AuthenticationFailed("wrong user or password")

    def root_record(self) -> tuple[str, str]:
        """The salt and hash of root's password (an mnode sends them to its dnodes)."""
        return self._root_salt, self._root_hash

    def set_root(self, salt: str, hashed: str) -> None:
        """A dnode: root's password as its mnode holds it. A change (the mnode restarted
        with another --root-password) ends root's sessions here, as there."""
        if (salt, hashed) == (self._root_salt, self._root_hash):
            return
        self._root_salt, self._root_hash = salt, hashed
        with self._lock:
            for token in list(self._by_user.get(ROOT_USER, ())):
                self._end(token)

    def session(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Session:
        """The session the call's `authorization: Bearer <token>` names."""
        return self._lookup(token_of(metadata))

    def named(self, token: str) -> Session:
        """The session of a bearer token carried in a request's body (a beat of
        Mnode.Heartbeats), checked as a call's `authorization` header is."""
        return self._lookup(token)

    def caller(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> tuple[str, Session]:
        """The call's token and the session it names."""
        token = token_of(metadata)
        return token, self._lookup(token)

    def logout(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> None:
        token = token_of(metadata)
        self._lookup(token)
        with self._lock:
            self._end(token)

    def open(self, user: str) -> int:
        """Sessions `user` has open."""
        with self._lock:
            return len(self._by_user.get(user, ()))

    def _end(self, token: str) -> None:
        login = self._by_token.pop(token, None)
        if login is not None:
            tokens = self._by_user.get(login.session.user)
            if tokens is not None:
                tokens.pop(token, None)
                if not tokens:
                    del self._by_user[login.session.user]

    def _lookup(self, token: str) -> Session:
        with self._lock:
            login = self._by_token.get(token)
            if login is not None:
                self._by_user[login.session.user].move_to_end(token)
        if login is None:
            raise AuthenticationFailed(
                "unknown or expired token (logged out, a server restart, or ended as its "
                "user's least recently used session beyond --max-sessions-per-user): log "
                "in again"
            )
        user = login.session.user
        if user != ROOT_USER:
            record = self._users(user)
            if record is None or record.salt != login.salt:
                with self._lock:
                    self._end(token)
                raise AuthenticationFailed(
                    f"the session of user {user} ended: its password was changed or the "
                    "user was dropped; log in again"
                )
        return login.session


def token_of(metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
    """The bearer token in a call's metadata; AuthenticationFailed when there is none."""
    for key, value in metadata or ():
        if key.lower() != AUTH_HEADER:
            continue
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        scheme, _, token = text.strip().partition(" ")
        if scheme.lower() == BEARER and token.strip():
            return token.strip()
        raise AuthenticationFailed("malformed authorization header: expected 'Bearer <token>'")
    raise AuthenticationFailed("missing authorization metadata: log in and send the token")
