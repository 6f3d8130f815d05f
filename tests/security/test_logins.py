"""Failed logins over the wire: after a few, the next attempt of that user (root too)
or from that address is refused at once with LoginThrottled, even with the right
password, until the wait is over; then the right password works again."""

from __future__ import annotations

import time

import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import AuthenticationFailed, LoginThrottled
from sqltopic.server.mnode.throttle import FREE_FAILURES
from tests.live_server import ServerProcess

# A wait of the throttle is well under this (the first few are a second or two).
DEADLINE_S = 30.0


def login_eventually(address: str, user: str, password: str) -> tuple[Connection, int]:
    """A login that succeeds once the throttle's wait is over; the refusals before."""
    refusals = 0
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return connect(address, user=user, password=password), refusals
        except LoginThrottled:
            refusals += 1
            assert time.monotonic() < deadline, "still throttled"
            time.sleep(0.05)


@pytest.mark.parametrize("user", ["root", "alice"])
def test_failed_logins_are_throttled_the_same_for_every_user(
    server: ServerProcess, conn: Connection, user: str
) -> None:
    password = "taosdata" if user == "root" else "alice-pw-1"
    if user != "root":
        conn.execute(f"CREATE USER {user} PASS '{password}'")
    for _ in range(FREE_FAILURES):
        with pytest.raises(AuthenticationFailed, match="wrong user or password"):
            connect(server.address, user=user, password="a-wrong-guess")
    with pytest.raises(LoginThrottled, match=f"too many failed logins for user {user}"):
        connect(server.address, user=user, password=password)
    session, refusals = login_eventually(server.address, user, password)
    with session:
        assert session.execute("SHOW DATABASES").columns[0] == "name"
    assert refusals >= 0
    # the success cleared the user's count: a single mistake is free again
    with pytest.raises(AuthenticationFailed, match="wrong user or password"):
        connect(server.address, user=user, password="one-more-typo")


def test_guessing_other_names_from_one_address_is_throttled(
    server: ServerProcess, conn: Connection
) -> None:
    for i in range(FREE_FAILURES):
        with pytest.raises(AuthenticationFailed):
            connect(server.address, user=f"nobody{i}", password="x-guess-12")
    with pytest.raises(LoginThrottled, match=r"for address 127\.0\.0\.1"):
        connect(server.address, user="root", password="taosdata")
    session, _ = login_eventually(server.address, "root", "taosdata")
    session.close()
    assert conn.execute("SELECT 1").rows == [(1,)]  # open sessions are not affected
