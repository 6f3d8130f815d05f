"""Users and the SUBSCRIBE right on a real server: logins of created users, subscribe
refused and then granted, a revoke reaching a running consumer (heartbeat flag, polls
refused), ALTER/DROP USER ending sessions, users kept across a restart, and the rule
that the default root password is only for a loopback address."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import AuthenticationFailed, NoPermission, TopicNotFound
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.mnode.passwords import ROOT_PASSWORD_ENV
from tests.client.support import METERS, config, drain, first_error
from tests.live_server import POWER, START_DEADLINE_S, ServerProcess, free_port
from tests.server.wire import CALL_TIMEOUT_S, Wire, status

PASSWORD = "alice-pw-1"
TOPIC = "CREATE TOPIC t1 AS STABLE power.meters"


@pytest.fixture
def granted(conn: Connection) -> Connection:
    """Root's connection, with power.meters (8 rows), topic t1 and user alice, who may
    read database power (SUBSCRIBE rights are separate: granted in each test)."""
    conn.execute(POWER)
    conn.execute(f"{METERS}; {TOPIC}; CREATE USER alice PASS '{PASSWORD}'")
    conn.execute("GRANT READ ON power.* TO alice")
    return conn


@pytest.fixture
def alice(server: ServerProcess, granted: Connection) -> Iterator[Connection]:
    with connect(server.address, user="alice", password=PASSWORD) as connection:
        yield connection


def alice_consumer(server: ServerProcess, group: str = "ga") -> Consumer:
    return Consumer(config(server.address, group, user="alice", password=PASSWORD))


class UserWire(Wire):
    """The test wire client, logged in as `user` instead of root."""

    def __init__(self, address: str, user: str, password: str) -> None:
        super().__init__(address)
        login = pb_grpc.SessionStub(self.channel).Login(
            pb.LoginRequest(user=user, password=password), timeout=CALL_TIMEOUT_S
        )
        self.md = (("authorization", f"Bearer {login.token}"),)

    def heartbeat(self, consumer: int, epoch: int) -> pb.HeartbeatResponse:
        request = pb.HeartbeatRequest(consumer_id=consumer, epoch=epoch)
        return self.mnode.Heartbeat(request, metadata=self.md, timeout=CALL_TIMEOUT_S)


def test_a_user_runs_sql_but_not_user_statements(alice: Connection) -> None:
    assert [r[:2] for r in alice.execute("SHOW USERS").rows] == [("root", True), ("alice", False)]
    assert len(alice.execute("SELECT * FROM power.meters").rows) == 8
    with pytest.raises(NoPermission, match="CREATE USER needs the superuser: user alice"):
        alice.execute("CREATE USER bob PASS 'bob-pw-12'")
    with pytest.raises(NoPermission, match="GRANT needs the superuser"):
        alice.execute("GRANT SUBSCRIBE ON t1 TO alice")


def test_subscribe_needs_the_right_and_a_grant_gives_it(
    server: ServerProcess, granted: Connection
) -> None:
    with alice_consumer(server) as consumer:
        with pytest.raises(NoPermission, match="user alice may not consume topic t1"):
            consumer.subscribe(["t1"])
        granted.execute("GRANT SUBSCRIBE ON t1 TO alice")
        consumer.subscribe(["t1"])
        assert sum(m.row_count for m in drain(consumer)) == 8
    # the creator may consume its own topic without a grant
    with connect(server.address, user="alice", password=PASSWORD) as alice:
        alice.execute("CREATE TOPIC own AS DATABASE power")
    with alice_consumer(server, "gb") as consumer:
        consumer.subscribe(["own"])
        assert consumer.subscription() == ["own"]


def test_a_revoke_reaches_a_running_consumer(server: ServerProcess, granted: Connection) -> None:
    granted.execute("GRANT SUBSCRIBE ON t1 TO alice")
    wire = UserWire(server.address, "alice", PASSWORD)
    try:
        joined = wire.subscribe("gw", ["t1"])
        consumer, epoch = joined.consumer_id, joined.epoch
        assignment = wire.assignment(consumer)
        vgroup = assignment.assignments[0].vgroup
        wire.poll(consumer, "gw", "t1", vgroup, assignment.epoch, position=1)
        assert list(wire.heartbeat(consumer, epoch).topics) == []
        granted.execute("REVOKE SUBSCRIBE ON t1 FROM alice")
        flags = wire.heartbeat(consumer, epoch).topics
        assert [(s.topic, s.no_privilege, s.dropped) for s in flags] == [("t1", True, False)]
        with pytest.raises(grpc.RpcError) as refused:
            wire.poll(consumer, "gw", "t1", vgroup, assignment.epoch, position=1)
        code, trailers = status(refused.value)
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert trailers["sqltopic-error"] == "NoPermission"
    finally:
        wire.close()


def test_a_revoked_consumer_gets_no_permission_from_poll(
    server: ServerProcess, granted: Connection
) -> None:
    granted.execute("GRANT SUBSCRIBE ON t1 TO alice")
    with alice_consumer(server) as consumer:
        consumer.subscribe(["t1"])
        assert sum(m.row_count for m in drain(consumer)) == 8
        granted.execute("REVOKE SUBSCRIBE ON t1 FROM alice")
        error = first_error(consumer)
        assert isinstance(error, NoPermission), error
        assert "topic t1" in str(error)


@pytest.mark.parametrize("change", ["ALTER USER alice PASS 'alice-pw-2'", "DROP USER alice"])
def test_alter_and_drop_user_end_the_users_sessions(
    server: ServerProcess, granted: Connection, alice: Connection, change: str
) -> None:
    alice.execute("SHOW TOPICS")
    granted.execute(change)
    with pytest.raises(AuthenticationFailed, match="session of user alice ended"):
        alice.execute("SHOW TOPICS")
    with pytest.raises(AuthenticationFailed, match="wrong user or password"):
        connect(server.address, user="alice", password=PASSWORD)
    if change.startswith("ALTER"):
        with connect(server.address, user="alice", password="alice-pw-2") as again:
            assert again.execute("SHOW TOPICS").rows[0][0] == "t1"
    granted.execute("SHOW USERS")  # root's session is untouched


def test_a_restart_keeps_users_and_grants(server: ServerProcess, granted: Connection) -> None:
    granted.execute("GRANT SUBSCRIBE ON t1 TO alice; CREATE USER bob PASS 'bob-pw-12'")
    granted.close()
    server.stop()
    again = ServerProcess(server.data, port=server.port)
    try:
        again.wait_ready()
        with connect(again.address) as root:
            assert [r[0] for r in root.execute("SHOW USERS").rows] == ["root", "alice", "bob"]
        with alice_consumer(again) as consumer:
            consumer.subscribe(["t1"])
            assert sum(m.row_count for m in drain(consumer)) == 8
        bob = config(again.address, "gc", user="bob", password="bob-pw-12")
        # bob may not even read power: t1 does not exist for him (docs/security.md)
        with Consumer(bob) as consumer, pytest.raises(TopicNotFound, match="'t1' does not"):
            consumer.subscribe(["t1"])
    finally:
        again.kill()


def _server_args(data: Path, port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sqltopic.server", "--data", str(data), "--port", str(port),
            *extra]  # fmt: skip


def test_the_default_root_password_on_a_public_address_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != ROOT_PASSWORD_ENV}
    args = _server_args(tmp_path / "data", free_port(), "--host", "0.0.0.0")
    done = subprocess.run(
        args, check=False, capture_output=True, text=True, env=env, timeout=START_DEADLINE_S
    )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "refusing to listen on 0.0.0.0 with the default root password" in lines[0]
    assert f"--root-password or ${ROOT_PASSWORD_ENV}" in lines[0]
    assert not (tmp_path / "data").exists()  # refused before touching the data directory


def test_a_root_password_from_the_environment_opens_a_public_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ROOT_PASSWORD_ENV, "root-pw-public")
    proc = ServerProcess(tmp_path / "data", extra=("--host", "0.0.0.0", "--allow-plaintext"))
    try:
        assert "listening on 0.0.0.0:" in proc.wait_ready()
        with connect(proc.address, password="root-pw-public") as root:
            assert root.execute("SHOW USERS").rows[0][0] == "root"
        with pytest.raises(AuthenticationFailed):
            connect(proc.address)  # taosdata
    finally:
        proc.kill()


def test_a_user_cannot_poll_or_commit_as_another_users_consumer(
    server: ServerProcess, granted: Connection
) -> None:
    granted.execute("CREATE USER bob PASS 'bob-pw-123'; GRANT SUBSCRIBE ON t1 TO alice")
    alice = UserWire(server.address, "alice", PASSWORD)
    bob = UserWire(server.address, "bob", "bob-pw-123")
    try:
        sub = alice.subscribe("ga", ["t1"])
        epoch = alice.assignment(sub.consumer_id).epoch
        vgroup = alice.assignment(sub.consumer_id).assignments[0].vgroup
        with pytest.raises(grpc.RpcError) as info:
            bob.poll(sub.consumer_id, "ga", "t1", vgroup, epoch)
        code, trailers = status(info.value)
        assert (code, trailers["sqltopic-error"]) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "NoPermission",
        )
        alice.poll(sub.consumer_id, "ga", "t1", vgroup, epoch)  # its own user may
        with pytest.raises(grpc.RpcError) as info:  # nor commit as it ...
            bob.commit(sub.consumer_id, "ga", epoch, ("t1", vgroup, 1))
        assert status(info.value)[1]["sqltopic-error"] == "NoPermission"
        with pytest.raises(grpc.RpcError) as info:  # ... nor commit for a group on t1
            bob.commit(0, "gb", 0, ("t1", vgroup, 1))
        assert str(info.value.details()) == "topic 't1' does not exist"  # hidden from him
        assert alice.committed("ga", "t1", vgroup) is None  # nothing was stored
        assert alice.committed("gb", "t1", vgroup) is None
        alice.commit(sub.consumer_id, "ga", epoch, ("t1", vgroup, 1))
        assert alice.committed("ga", "t1", vgroup) == 1
    finally:
        alice.close()
        bob.close()
