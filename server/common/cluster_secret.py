"""The cluster secret and the proofs made with it (docs/cluster.md, "Proofs").

Nodes never send the secret: a request carries HMAC-SHA256 keyed with it over the
request's fields and its send time, and the answer one over the answer's fields and the
request's proof, so a peer without the secret can neither pass as a dnode nor as the
mnode. A proof is accepted within `PROOF_WINDOW_MS` of the receiver's clock: a replayed
heartbeat is only good while its time lasts, and only ever says what it said. A request
that would do again what it did (Dnode.Append) carries a nonce the receiver keeps for
the window (`Nonces`).
"""

from __future__ import annotations

import hashlib
import hmac
import threading

from sqltopic.errors import AuthenticationFailed, ConfigError

CLUSTER_SECRET_ENV = "SQLTOPIC_CLUSTER_SECRET"
# Shorter secrets can be guessed offline from one captured proof.
MIN_SECRET_CHARS = 16
# Clocks of a cluster's machines agree within seconds (NTP); five minutes is Kerberos'
# tolerance, and bounds how long a captured heartbeat can be replayed.
PROOF_WINDOW_MS = 300_000
# A request's nonce (Dnode.Append): random, so two requests never share one.
NONCE_BYTES = 16
# Nonces a node keeps: five minutes of a thousand forwarded INSERTs a second, ~30 MB.
MAX_NONCES = 300_000
# Separates the fields in the proven text: it appears in no endpoint, id or number.
_SEP = "\x1f"


def check_secret(secret: str | None) -> str:
    """The secret, or ConfigError saying how to set a usable one."""
    if not secret:
        raise ConfigError(
            f"a cluster needs a secret: --cluster-secret or ${CLUSTER_SECRET_ENV}, the same "
            "on the mnode and every dnode"
        )
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"the cluster secret has {len(secret)} characters; use at least "
            f"{MIN_SECRET_CHARS} (e.g. `openssl rand -hex 16`)"
        )
    return secret


def prove(secret: str, *fields: str | int | bytes) -> bytes:
    """HMAC-SHA256 keyed with `secret` over `fields` (kind-tagged, separated)."""
    text = _SEP.join(f.hex() if isinstance(f, bytes) else str(f) for f in fields)
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).digest()


def verify(
    secret: str, proof: bytes, now_ms: int, sent_ms: int, *fields: str | int | bytes
) -> None:
    """AuthenticationFailed unless `proof` is `prove(secret, sent_ms, *fields)` and
    `sent_ms` lies within the window of `now_ms`."""
    if not hmac.compare_digest(proof, prove(secret, sent_ms, *fields)):
        raise AuthenticationFailed(
            "the cluster secret does not match: give the mnode and every dnode the same "
            f"--cluster-secret (or ${CLUSTER_SECRET_ENV})"
        )
    if abs(now_ms - sent_ms) > PROOF_WINDOW_MS:
        raise AuthenticationFailed(
            f"the heartbeat was sent {abs(now_ms - sent_ms) // 1000} s away from this "
            "node's clock; keep the cluster's clocks in sync (NTP)"
        )


class Nonces:
    """The nonces of the requests taken within the proof window: a request whose nonce
    is among them is a replay. Thread-safe."""

    def __init__(self, limit: int = MAX_NONCES) -> None:
        self._seen: dict[bytes, int] = {}  # nonce -> its request's sent_ms
        self._limit = limit
        self._lock = threading.Lock()

    def take(self, nonce: bytes, sent_ms: int, now_ms: int) -> None:
        """AuthenticationFailed for a nonce taken before, or not NONCE_BYTES long."""
        if len(nonce) != NONCE_BYTES:
            raise AuthenticationFailed(
                f"a request between nodes carries a {NONCE_BYTES}-byte nonce"
            )
        with self._lock:
            if nonce in self._seen:
                raise AuthenticationFailed(
                    "a request between nodes was sent again (a replay): its nonce was taken"
                )
            # one past its window can no longer be replayed (its proof is stale then);
            # taken about in time order, so the oldest are first
            while self._seen and (
                len(self._seen) >= self._limit
                or next(iter(self._seen.values())) < now_ms - PROOF_WINDOW_MS
            ):
                del self._seen[next(iter(self._seen))]
            self._seen[nonce] = sent_ms


def verify_answer(secret: str, proof: bytes, *fields: str | int | bytes) -> None:
    """AuthenticationFailed unless an answer's `proof` is `prove(secret, *fields)`."""
    if not hmac.compare_digest(proof, prove(secret, *fields)):
        raise AuthenticationFailed(
            "the mnode's answer does not prove the cluster secret: is --mnode the cluster's "
            "mnode, and is the secret the same on both?"
        )
