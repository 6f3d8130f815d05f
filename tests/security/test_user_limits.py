"""What one user can hold is bounded: sessions (--max-sessions-per-user: a login beyond
ends the user's least recently used session) and the vgroups of the databases it
creates (--max-vgroups-per-user; root is not bounded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import AuthenticationFailed, LimitExceeded
from tests.live_server import ServerProcess

PASSWORD = "alice-pw-1"


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "data", extra=("--max-sessions-per-user", "3", "--max-vgroups-per-user", "4")
    )
    try:
        proc.wait_ready()
        with connect(proc.address) as root:
            root.execute(f"CREATE USER alice PASS '{PASSWORD}'")
        yield proc
    finally:
        proc.kill()


def alice(proc: ServerProcess) -> Connection:
    return connect(proc.address, user="alice", password=PASSWORD)


def test_a_login_beyond_the_limit_ends_the_least_recently_used_session(
    limited: ServerProcess,
) -> None:
    first, second, third = alice(limited), alice(limited), alice(limited)
    first.execute("SHOW DATABASES")  # first is now used more recently than second
    fourth = alice(limited)
    with pytest.raises(AuthenticationFailed, match="least recently used session"):
        second.execute("SHOW DATABASES")
    for conn in (first, third, fourth):
        assert conn.execute("SHOW DATABASES").columns[0] == "name"
    with connect(limited.address) as root:  # other users are not counted
        assert root.execute("SHOW USERS").rows[0][0] == "root"


def test_the_vgroups_a_user_creates_are_bounded(limited: ServerProcess) -> None:
    with alice(limited) as conn:
        conn.execute("CREATE DATABASE a VGROUPS 3")
        with pytest.raises(LimitExceeded, match=r"3 vgroups; 2 more would pass .*\(4\)"):
            conn.execute("CREATE DATABASE b VGROUPS 2")
        assert [r[0] for r in conn.execute("SHOW DATABASES").rows] == ["a"]
        conn.execute("CREATE DATABASE b VGROUPS 1")
        conn.execute("DROP DATABASE a")
        conn.execute("CREATE DATABASE c VGROUPS 3")
    with connect(limited.address) as root:
        root.execute("CREATE DATABASE big VGROUPS 8")  # root is not bounded
