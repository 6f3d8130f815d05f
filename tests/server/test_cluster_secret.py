"""The cluster secret's rules and proofs (server/common/cluster_secret.py), and a dnode's
identity file (server/dnode/identity.py)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from sqltopic.errors import AuthenticationFailed, ConfigError, DataFileDamaged
from sqltopic.server.common.cluster_secret import (
    NONCE_BYTES,
    PROOF_WINDOW_MS,
    Nonces,
    check_secret,
    prove,
    verify,
    verify_answer,
)
from sqltopic.server.dnode.identity import (
    IDENTITY_FILE,
    DnodeIdentity,
    instance_of,
    load_identity,
    save_identity,
)

SECRET = "0123456789abcdef"
NOW = 1_800_000_000_000


@pytest.mark.parametrize(
    ("secret", "words"),
    [(None, "a cluster needs a secret"), ("", "a cluster needs a secret"),
     ("x" * 15, "has 15 characters; use at least 16")],
)  # fmt: skip
def test_unusable_secrets_are_refused(secret: str | None, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        check_secret(secret)


def test_a_secret_of_16_characters_is_enough() -> None:
    assert check_secret(SECRET) == SECRET


def test_a_proof_is_hmac_sha256_over_the_fields() -> None:
    want = hmac.new(SECRET.encode(), f"{NOW}\x1fa\x1f7\x1f{b'xy'.hex()}".encode(), hashlib.sha256)
    assert prove(SECRET, NOW, "a", 7, b"xy") == want.digest()


@pytest.mark.parametrize(
    ("secret", "sent", "fields", "words"),
    [
        ("another-secret-000", NOW, ("a", 7), "does not match"),
        (SECRET, NOW, ("a", 8), "does not match"),  # a field changed after proving
        (SECRET, NOW + 1, ("a", 7), "does not match"),  # the time changed
    ],
)
def test_a_proof_over_other_things_fails(
    secret: str, sent: int, fields: tuple[str | int, ...], words: str
) -> None:
    proof = prove(secret, NOW, "a", 7)
    with pytest.raises(AuthenticationFailed, match=words):
        verify(SECRET, proof, NOW, sent, *fields)


@pytest.mark.parametrize("skew", [-PROOF_WINDOW_MS - 1, PROOF_WINDOW_MS + 1])
def test_a_proof_outside_the_window_fails(skew: int) -> None:
    proof = prove(SECRET, NOW + skew, "a")
    with pytest.raises(AuthenticationFailed, match="clocks in sync"):
        verify(SECRET, proof, NOW, NOW + skew, "a")
    verify(SECRET, prove(SECRET, NOW + skew // 2, "a"), NOW, NOW + skew // 2, "a")


def test_an_answer_proves_the_secret_too() -> None:
    verify_answer(SECRET, prove(SECRET, "answer", 1), "answer", 1)
    with pytest.raises(AuthenticationFailed, match="is --mnode the cluster's mnode"):
        verify_answer(SECRET, prove("another-secret-000", "answer", 1), "answer", 1)


def test_an_identity_is_kept_and_read_back(tmp_path: Path) -> None:
    assert load_identity(tmp_path) is None
    identity = DnodeIdentity("c1", 3, "h1:6031")
    save_identity(tmp_path, identity)
    assert load_identity(tmp_path) == identity
    assert not (tmp_path / (IDENTITY_FILE + ".tmp")).exists()


@pytest.mark.parametrize("text", ["", "{", "[]", '{"cluster_id": "c"}', '{"dnode_id": "x"}'])
def test_a_damaged_identity_is_reported(tmp_path: Path, text: str) -> None:
    (tmp_path / IDENTITY_FILE).write_text(text)
    with pytest.raises(DataFileDamaged, match="identity file is damaged"):
        load_identity(tmp_path)


def test_a_data_directory_keeps_its_instance_id(tmp_path: Path) -> None:
    first = instance_of(tmp_path)
    assert len(first) == 32
    assert instance_of(tmp_path) == first
    other = tmp_path / "other"
    other.mkdir()
    assert instance_of(other) != first


def test_a_nonce_is_taken_once_within_the_window() -> None:
    nonces = Nonces(limit=3)
    now = 1_000_000_000
    nonces.take(b"a" * NONCE_BYTES, now, now)
    with pytest.raises(AuthenticationFailed, match="replay"):
        nonces.take(b"a" * NONCE_BYTES, now, now + 1)
    with pytest.raises(AuthenticationFailed, match="16-byte nonce"):
        nonces.take(b"short", now, now)
    # past the window it is forgotten (its proof would be refused as stale anyway)
    later = now + PROOF_WINDOW_MS + 1
    nonces.take(b"b" * NONCE_BYTES, later, later)
    nonces.take(b"a" * NONCE_BYTES, later, later)
    # at the limit the oldest goes first
    for c in (b"c", b"d"):
        nonces.take(c * NONCE_BYTES, later, later)
    nonces.take(b"b" * NONCE_BYTES, later, later)
