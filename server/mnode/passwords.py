"""Passwords: the rules a user's password must meet, salted scrypt hashes, and the
rule that the default root password is only for a server bound to a loopback address.

A hash is stored as `scrypt$N$r$p$<hex digest>`: the cost parameters travel with it,
so they can be raised later without invalidating the hashes already stored.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import socket

from sqltopic.errors import ConfigError, InvalidValueError

# TDengine 3.3's range for CREATE/ALTER USER ... PASS (its "strong password" character
# classes are optional there, and not required here).
MIN_PASSWORD = 8
MAX_PASSWORD = 255
# scrypt cost N=2^13, r=8, p=1: 8 MiB, and a login took 13 ms (17 ms at worst) on a
# 2-core machine; 2^14 took 30 ms (40 ms at worst). Slows guessing by brute force while
# a login stays well under 50 ms.
SCRYPT_N = 2**13
SCRYPT_R = 8
SCRYPT_P = 1
# Room above the 128*N*r bytes scrypt needs (OpenSSL's default cap is 32 MiB).
SCRYPT_MAXMEM = 64 * 1024 * 1024
DIGEST_BYTES = 32
SALT_BYTES = 16  # per user, random: equal passwords give different hashes
SCHEME = "scrypt"
# TDengine's default root password: accepted only when the server listens on loopback.
DEFAULT_ROOT_PASSWORD = "taosdata"
# Where the root password comes from when --root-password is not given.
ROOT_PASSWORD_ENV = "SQLTOPIC_ROOT_PASSWORD"
# A salt for the dummy check of an unknown user's login, which takes as long as a real one.
_DUMMY_SALT = bytes(SALT_BYTES)


def check_password(user: str, password: str) -> None:
    """InvalidValueError unless the password's length is in MIN..MAX_PASSWORD."""
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise InvalidValueError(
            f"password of user {user}: {len(password)} characters; use "
            f"{MIN_PASSWORD} to {MAX_PASSWORD} characters"
        )


def new_salt() -> str:
    return secrets.token_hex(SALT_BYTES)


def hash_password(password: str, salt: str) -> str:
    """The stored form of `password` with `salt` (hex), at the current cost."""
    digest = _scrypt(password, bytes.fromhex(salt), SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"{SCHEME}${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${digest.hex()}"


def verify_password(password: str, salt: str, stored: str) -> bool:
    """Whether `password` hashes to `stored` (compared in constant time)."""
    scheme, n, r, p, digest = stored.split("$")
    if scheme != SCHEME:
        return False
    mine = _scrypt(password, bytes.fromhex(salt), int(n), int(r), int(p))
    return hmac.compare_digest(mine, bytes.fromhex(digest))


def dummy_check(password: str) -> None:
    """Spend what a real check costs, so that a login's time does not tell whether the
    user exists."""
    _scrypt(password, _DUMMY_SALT, SCRYPT_N, SCRYPT_R, SCRYPT_P)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAXMEM, dklen=DIGEST_BYTES
    )


def check_root_password(host: str, password: str) -> None:
    """ConfigError when the root password is empty, or is the default while the server
    would listen on a non-loopback address (anyone who can reach it could log in)."""
    if not password:
        raise ConfigError(
            f"the root password is empty: set one with --root-password or ${ROOT_PASSWORD_ENV}"
        )
    if password == DEFAULT_ROOT_PASSWORD and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} with the default root password "
            f"'{DEFAULT_ROOT_PASSWORD}': set another with --root-password or "
            f"${ROOT_PASSWORD_ENV}, or listen on 127.0.0.1"
        )


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (unresolvable: no)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass  # a name, not an address
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses
    )
