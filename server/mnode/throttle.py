"""Failed logins slow down: per user name and per peer address, each failure beyond a
few makes the next attempt wait longer, doubling up to a cap.

An attempt that comes before its wait is over is refused at once, without checking
the password (so guessing costs the guesser time, not the server work). The rule is
the same for root and every other user. A success clears its user's count, not its
peer's: an attacker with an account of its own cannot reset its address. Counts are
forgotten after a quiet while, and the tables are bounded, so that many names or
addresses cannot grow the server's memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from sqltopic.errors import LoginThrottled

# Failures allowed before any wait: typing mistakes of a person cost nothing.
FREE_FAILURES = 5
# The first wait, doubled at each further failure, up to the cap.
FIRST_WAIT_S = 0.5
# The longest wait: at most one guess a minute per user name and per address, while a
# person who mistyped is back within a minute.
MAX_WAIT_S = 60.0
# A key with no failure for this long starts again from nothing.
FORGET_S = 15 * 60.0
# Names and addresses tracked at most each (the oldest are dropped first).
MAX_TRACKED = 100_000


@dataclass
class _Failures:
    count: int
    last: float  # when the last failure happened

    def wait_s(self) -> float:
        beyond = self.count - FREE_FAILURES
        return 0.0 if beyond < 0 else min(FIRST_WAIT_S * 2**beyond, MAX_WAIT_S)


class _Table:
    """Failure counts by key, oldest first."""

    def __init__(self) -> None:
        self.entries: OrderedDict[str, _Failures] = OrderedDict()

    def remaining(self, key: str, now: float) -> float:
        found = self.entries.get(key)
        if found is None:
            return 0.0
        if now - found.last > FORGET_S:
            del self.entries[key]
            return 0.0
        return max(found.last + found.wait_s() - now, 0.0)

    def fail(self, key: str, now: float) -> None:
        found = self.entries.pop(key, None)
        count = 1 if found is None or now - found.last > FORGET_S else found.count + 1
        self.entries[key] = _Failures(count, now)
        while len(self.entries) > MAX_TRACKED:
            self.entries.popitem(last=False)


class LoginThrottle:
    """Who may try to log in now. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._users = _Table()
        self._peers = _Table()
        self._lock = threading.Lock()

    def check(self, user: str, peer: str) -> None:
        """LoginThrottled when `user` or `peer` must still wait after failed logins."""
        with self._lock:
            now = self._clock()
            for table, key, what in ((self._users, user, "user"), (self._peers, peer, "address")):
                wait = table.remaining(key, now)
                if wait > 0:
                    raise LoginThrottled(
                        f"too many failed logins for {what} {key}: try again in {wait:.1f} s",
                        retry_after_s=wait,
                    )

    def failed(self, user: str, peer: str) -> None:
        with self._lock:
            now = self._clock()
            self._users.fail(user, now)
            self._peers.fail(peer, now)

    def succeeded(self, user: str) -> None:
        with self._lock:
            self._users.entries.pop(user, None)


def peer_address(peer: str) -> str:
    """The address of a gRPC peer string without its port (`ipv4:1.2.3.4:5678` ->
    `1.2.3.4`, `ipv6:[::1]:5678` -> `::1`); other forms (unix sockets) as they are."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] if rest.startswith("[") else rest
        return host.strip("[]")
    return peer
