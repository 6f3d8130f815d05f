"""Calls that stay open, counted: streams (Poll, Execute, Write) and polls held waiting
for writes (Fetch), per session and per user, each bounded by a named limit
(`--max-streams-per-session`, `--max-streams-per-user`).

Each such call holds a slot from its start to its end, whatever ends it (an answer, an
error, the client going away); one over either limit is refused at once with
LimitExceeded, before it does any work. All on the event loop: no lock needed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from sqltopic.errors import LimitExceeded
from sqltopic.server.common.limits import Limits


class Slots:
    """Open calls by session (its token) and by user."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._sessions: Counter[str] = Counter()
        self._users: Counter[str] = Counter()

    @contextmanager
    def hold(self, token: str, user: str, call: str) -> Iterator[None]:
        """A slot for the call's lifetime; LimitExceeded when none is free."""
        limits = self._limits
        if self._sessions[token] >= limits.max_streams_per_session:
            raise LimitExceeded(
                f"{call}: this session already has {self._sessions[token]} streams and "
                f"waiting polls open (the server's --max-streams-per-session is "
                f"{limits.max_streams_per_session}): finish some, or log in again for "
                "another session"
            )
        if self._users[user] >= limits.max_streams_per_user:
            raise LimitExceeded(
                f"{call}: user {user} already has {self._users[user]} streams and waiting "
                f"polls open (the server's --max-streams-per-user is "
                f"{limits.max_streams_per_user}): finish some first"
            )
        self._sessions[token] += 1
        self._users[user] += 1
        try:
            yield
        finally:
            self._release(self._sessions, token)
            self._release(self._users, user)

    def open(self, user: str | None = None) -> int:
        """Calls open now (of `user`, or of everyone)."""
        return sum(self._users.values()) if user is None else self._users[user]

    @staticmethod
    def _release(counts: Counter[str], key: str) -> None:
        counts[key] -= 1
        if counts[key] <= 0:
            del counts[key]  # the tables hold only what is open
