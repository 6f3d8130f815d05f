"""The cluster secret and the proofs made with it (docs/cluster.md, "Proofs").

Nodes never send the secret: a request carries HMAC-SHA256 keyed with it over the
request's fields and its send time, and the answer one over the answer's fields and the
request's proof, so a peer without the secret can neither pass as a dnode nor as the
mnode. A proof is accepted within `PROOF_WINDOW_MS` of the receiver's clock: a replayed
heartbeat is only good while its time lasts, and only ever says what it said.
"""

from __future__ import annotations

import hashlib
import hmac

from sqltopic.errors import AuthenticationFailed, ConfigError

CLUSTER_SECRET_ENV = "SQLTOPIC_CLUSTER_SECRET"
# Shorter secrets can be guessed offline from one captured proof.
MIN_SECRET_CHARS = 16
# Clocks of a cluster's machines agree within seconds (NTP); five minutes is Kerberos'
# tolerance, and bounds how long a captured heartbeat can be replayed.
PROOF_WINDOW_MS = 300_000
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


def verify_answer(secret: str, proof: bytes, *fields: str | int | bytes) -> None:
    """AuthenticationFailed unless an answer's `proof` is `prove(secret, *fields)`."""
    if not hmac.compare_digest(proof, prove(secret, *fields)):
        raise AuthenticationFailed(
            "the mnode's answer does not prove the cluster secret: is --mnode the cluster's "
            "mnode, and is the secret the same on both?"
        )
