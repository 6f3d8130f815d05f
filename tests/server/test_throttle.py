"""The login throttle (server/mnode/throttle.py) on a fake clock: free failures, a doubling
wait up to its cap, per user and per address, success clearing only its user, quiet
keys forgotten, and the tables bounded."""

from __future__ import annotations

import pytest

from sqltopic.errors import AuthenticationFailed, LoginThrottled
from sqltopic.server.mnode import throttle as t
from sqltopic.server.mnode.auth import Sessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failing(throttle: t.LoginThrottle, user: str, peer: str, times: int) -> None:
    for _ in range(times):
        throttle.check(user, peer)
        throttle.failed(user, peer)


def test_the_first_failures_are_free_then_the_wait_doubles_to_its_cap() -> None:
    clock = Clock()
    throttle = t.LoginThrottle(clock)
    failing(throttle, "alice", "10.0.0.1", t.FREE_FAILURES)
    waits = []
    for _ in range(12):
        with pytest.raises(LoginThrottled) as refused:
            throttle.check("alice", "10.0.0.2")
        waits.append(refused.value.retry_after_s)
        clock.now += refused.value.retry_after_s
        throttle.check("alice", "10.0.0.2")  # the wait is over
        throttle.failed("alice", "10.0.0.2")
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert waits[-1] == t.MAX_WAIT_S


def test_an_address_is_throttled_whatever_user_it_tries() -> None:
    clock = Clock()
    throttle = t.LoginThrottle(clock)
    for i in range(t.FREE_FAILURES):
        throttle.check(f"user{i}", "10.0.0.9")
        throttle.failed(f"user{i}", "10.0.0.9")
    with pytest.raises(LoginThrottled, match=r"for address 10\.0\.0\.9"):
        throttle.check("root", "10.0.0.9")
    throttle.check("root", "10.0.0.10")  # another address is not


def test_a_success_clears_its_user_but_not_its_address() -> None:
    clock = Clock()
    throttle = t.LoginThrottle(clock)
    failing(throttle, "bob", "10.0.0.3", t.FREE_FAILURES)
    with pytest.raises(LoginThrottled, match="for user bob"):
        throttle.check("bob", "10.0.0.4")
    throttle.succeeded("bob")
    throttle.check("bob", "10.0.0.4")
    with pytest.raises(LoginThrottled, match=r"for address 10\.0\.0\.3"):
        throttle.check("carol", "10.0.0.3")


def test_quiet_keys_are_forgotten_and_tables_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    throttle = t.LoginThrottle(clock)
    failing(throttle, "dave", "10.0.0.5", t.FREE_FAILURES)
    with pytest.raises(LoginThrottled):
        throttle.check("dave", "10.0.0.5")
    clock.now += t.FORGET_S + 1
    throttle.check("dave", "10.0.0.5")
    monkeypatch.setattr(t, "MAX_TRACKED", 10)
    for i in range(50):
        throttle.failed(f"u{i}", f"p{i}")
    assert len(throttle._users.entries) == 10


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:5432", "127.0.0.1"),
        ("ipv6:[::1]:5432", "::1"),
        ("ipv6:[fe80::1%eth0]:80", "fe80::1%eth0"),
        ("unix:/tmp/sock", "unix:/tmp/sock"),
    ],
)
def test_peer_addresses_lose_their_port(peer: str, address: str) -> None:
    assert t.peer_address(peer) == address


def test_sessions_throttle_root_like_any_user() -> None:
    clock = Clock()
    sessions = Sessions("root-pw-1", throttle=t.LoginThrottle(clock))
    for _ in range(t.FREE_FAILURES):
        with pytest.raises(AuthenticationFailed, match="wrong user or password"):
            sessions.login("root", "guess", "10.1.1.1")
    with pytest.raises(LoginThrottled, match="for user root"):
        sessions.login("root", "root-pw-1", "10.1.1.2")
    clock.now += t.FIRST_WAIT_S
    assert sessions.login("ROOT", "root-pw-1", "10.1.1.2")[1].user == "root"
