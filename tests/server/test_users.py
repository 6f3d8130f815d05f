"""Users and the SUBSCRIBE right at the engine: the statements, their errors, what the
catalog keeps (hashes, never passwords), who may consume a topic, logins and their end
(server/core/users.py, server/mnode/auth.py, server/mnode/passwords.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqltopic.errors import (
    AlreadyExistsError,
    AuthenticationFailed,
    ConfigError,
    InvalidValueError,
    NoPermission,
    NotFoundError,
    TopicNotFound,
)
from sqltopic.server.common.result import Session
from sqltopic.server.core import users
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.passwords import (
    MAX_PASSWORD,
    MIN_PASSWORD,
    SCRYPT_N,
    check_root_password,
    hash_password,
    is_loopback,
    verify_password,
)
from sqltopic.sql.names import MAX_BYTES
from tests.conftest import FakeClock
from tests.server.support import POWER_DDL, EngineFactory

PASSWORD = "alice-pw-1"
TOPIC = "CREATE TOPIC t1 AS STABLE meters"
ALICE = Session(db="power", user="alice")


@pytest.fixture
def topics(power: Engine) -> Engine:
    """`power` with topic t1 (by root) and user alice."""
    power.execute(f"{TOPIC}; CREATE USER alice PASS '{PASSWORD}'")
    return power


def may(engine: Engine, user: str, topic: str = "t1") -> bool:
    return users.may_subscribe(engine.state, user, topic)


# --- the statements ---------------------------------------------------------------------


def test_create_user_shows_and_stores_a_salted_hash(engine: Engine, clock: FakeClock) -> None:
    engine.execute(f"CREATE USER Alice PASS '{PASSWORD}'; CREATE USER bob PASS '{PASSWORD}'")
    rows = engine.execute("SHOW USERS").rows
    assert [r[:2] for r in rows] == [("root", True), ("alice", False), ("bob", False)]
    assert rows[1][2].timestamp() * 1_000_000 == clock.now_us
    alice, bob = engine.state.catalog.users["alice"], engine.state.catalog.users["bob"]
    assert alice.password_hash.startswith(f"scrypt${SCRYPT_N}$8$1$")
    # one password, two salts: two hashes
    assert alice.salt != bob.salt
    assert alice.password_hash != bob.password_hash
    assert verify_password(PASSWORD, alice.salt, alice.password_hash)
    assert not verify_password(PASSWORD + "x", alice.salt, alice.password_hash)


def test_users_and_grants_survive_a_reopen_and_no_password_is_on_disk(
    make_engine: EngineFactory, data_dir: Path
) -> None:
    engine = make_engine()
    engine.execute(f"{POWER_DDL}; {TOPIC}; CREATE USER alice PASS '{PASSWORD}'")
    engine.execute("GRANT SUBSCRIBE ON t1 TO alice")
    before = engine.state.catalog.users["alice"]
    engine = make_engine.reopen(engine)
    assert engine.state.catalog.users["alice"] == before
    assert may(engine, "alice")
    make_engine.close(engine)
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_a_catalog_without_users_loads(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.execute("CREATE DATABASE power VGROUPS 1")
    engine = make_engine.reopen(engine)
    assert engine.execute("SHOW USERS").rows == [("root", True, None)]


def test_alter_user_changes_password_and_salt(topics: Engine) -> None:
    before = topics.state.catalog.users["alice"]
    topics.execute("ALTER USER alice PASS 'another-pw'")
    after = topics.state.catalog.users["alice"]
    assert after.salt != before.salt
    assert after.create_us == before.create_us
    assert verify_password("another-pw", after.salt, after.password_hash)
    assert not verify_password(PASSWORD, after.salt, after.password_hash)


def test_drop_user(topics: Engine) -> None:
    topics.execute("DROP USER alice")
    assert [r[0] for r in topics.execute("SHOW USERS").rows] == ["root"]
    assert "alice" not in topics.state.catalog.users


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        (f"CREATE USER alice PASS '{PASSWORD}'", AlreadyExistsError, "user alice already exists"),
        (f"CREATE USER root PASS '{PASSWORD}'", AlreadyExistsError, "built-in superuser"),
        (f"CREATE USER {'u' * 24} PASS '{PASSWORD}'", InvalidValueError, "has at most 23"),
        ("CREATE USER bob PASS ''", InvalidValueError, "0 characters; use 8 to 255"),
        ("CREATE USER bob PASS 'seven77'", InvalidValueError, "7 characters; use 8 to 255"),
        (f"CREATE USER bob PASS '{'p' * 256}'", InvalidValueError, "256 characters"),
        (f"ALTER USER bob PASS '{PASSWORD}'", NotFoundError, "user bob does not exist"),
        ("ALTER USER alice PASS 'short'", InvalidValueError, "password of user alice"),
        (f"ALTER USER root PASS '{PASSWORD}'", NoPermission, "--root-password"),
        ("DROP USER bob", NotFoundError, "user bob does not exist"),
        ("DROP USER root", NoPermission, "root cannot be dropped"),
        ("GRANT SUBSCRIBE ON nope TO alice", TopicNotFound, "topic 'nope' does not exist"),
        ("REVOKE SUBSCRIBE ON nope FROM alice", TopicNotFound, "topic 'nope' does not exist"),
        ("GRANT SUBSCRIBE ON t1 TO bob", NotFoundError, "user bob does not exist"),
        ("GRANT SUBSCRIBE ON t1 TO root", InvalidValueError, "names root, the superuser"),
        ("REVOKE SUBSCRIBE ON t1 FROM root", InvalidValueError, "names root, the superuser"),
    ],
)
def test_errors(topics: Engine, sql: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        topics.execute(sql)
    assert [r[0] for r in topics.execute("SHOW USERS").rows] == ["root", "alice"]


def test_password_length_limits_are_inclusive(engine: Engine) -> None:
    engine.execute(f"CREATE USER a PASS '{'p' * MIN_PASSWORD}'")
    engine.execute(f"CREATE USER b PASS '{'p' * MAX_PASSWORD}'")
    engine.execute(f"CREATE USER {'c' * MAX_BYTES['user']} PASS '{PASSWORD}'")
    assert len(engine.execute("SHOW USERS").rows) == 4


@pytest.mark.parametrize(
    ("sql", "statement"),
    [
        (f"CREATE USER bob PASS '{PASSWORD}'", "CREATE USER"),
        (f"ALTER USER alice PASS '{PASSWORD}'", "ALTER USER"),
        ("DROP USER alice", "DROP USER"),
        ("GRANT SUBSCRIBE ON t1 TO alice", "GRANT"),
        ("REVOKE SUBSCRIBE ON t1 FROM alice", "REVOKE"),
    ],
)
def test_only_root_runs_user_statements(topics: Engine, sql: str, statement: str) -> None:
    with pytest.raises(NoPermission, match=f"{statement} needs the superuser: user alice"):
        topics.execute(sql, ALICE)


def test_other_users_need_database_privileges(topics: Engine) -> None:
    """A database its user holds no right on does not exist for it; a grant opens it
    (the privilege matrix: tests/security/test_privileges.py)."""
    with pytest.raises(NotFoundError, match="database 'power' does not exist"):
        topics.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)", ALICE)
    topics.execute("GRANT ALL ON power.* TO alice")
    topics.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)", ALICE)
    topics.execute("INSERT INTO d1 VALUES (1538548685000, 10.3, 219, 0.31)", ALICE)
    assert topics.execute("SELECT voltage FROM meters", ALICE).rows == [(219,)]
    assert [r[0] for r in topics.execute("SHOW USERS", ALICE).rows] == ["root", "alice"]


# --- the right to consume ---------------------------------------------------------------


def test_root_owner_and_granted_users_may_consume(topics: Engine) -> None:
    topics.execute(f"CREATE USER bob PASS '{PASSWORD}'; GRANT READ ON power.* TO bob")
    topics.execute("CREATE TOPIC mine AS STABLE meters", Session(db="power", user="bob"))
    assert topics.execute("SHOW TOPICS").rows[0][6] == "bob"
    assert may(topics, "root")
    assert may(topics, "root", "mine")
    assert may(topics, "bob", "mine")  # the creator
    assert not may(topics, "alice")
    assert not may(topics, "bob")
    assert not may(topics, "alice", "mine")
    assert not may(topics, "nobody")
    assert not may(topics, "alice", "missing")
    topics.execute("GRANT SUBSCRIBE ON t1 TO alice; GRANT SUBSCRIBE ON t1 TO alice")
    assert may(topics, "alice")
    assert not may(topics, "bob")
    topics.execute("REVOKE SUBSCRIBE ON t1 FROM alice; REVOKE SUBSCRIBE ON t1 FROM alice")
    assert not may(topics, "alice")


def test_check_subscribe_names_the_topic_and_the_fix(topics: Engine) -> None:
    users.check_subscribe(topics.state, "root", "t1")
    # alice may not read power: t1 does not exist for her, unless she subscribed to it
    with pytest.raises(TopicNotFound, match="topic 't1' does not exist"):
        users.check_subscribe(topics.state, "alice", "t1")
    fix = r"user alice may not consume topic t1: .*GRANT SUBSCRIBE ON t1 TO alice"
    with pytest.raises(NoPermission, match=fix):
        users.check_subscribe(topics.state, "alice", "t1", hide=False)
    topics.execute("GRANT READ ON power.* TO alice")
    with pytest.raises(NoPermission, match=fix):
        users.check_subscribe(topics.state, "alice", "t1")
    with pytest.raises(TopicNotFound):
        users.check_subscribe(topics.state, "alice", "missing")


def test_a_grant_does_not_carry_over_to_a_topic_created_again(
    topics: Engine, clock: FakeClock
) -> None:
    topics.execute("GRANT SUBSCRIBE ON t1 TO alice")
    clock.advance(1)
    topics.execute(f"DROP TOPIC t1; {TOPIC}")
    assert not may(topics, "alice")
    topics.execute("GRANT SUBSCRIBE ON t1 TO alice")
    assert may(topics, "alice")
    assert list(topics.state.catalog.users["alice"].subscribe) == ["t1"]


def test_a_user_created_again_does_not_own_the_old_users_topics(
    topics: Engine, clock: FakeClock
) -> None:
    topics.execute("GRANT READ ON power.* TO alice")
    topics.execute("CREATE TOPIC mine AS STABLE meters", ALICE)
    assert may(topics, "alice", "mine")
    clock.advance(1)
    topics.execute(f"DROP USER alice; CREATE USER alice PASS '{PASSWORD}'")
    assert not may(topics, "alice", "mine")


# --- logins -----------------------------------------------------------------------------


def test_logins(topics: Engine) -> None:
    sessions = Sessions("root-pw-1", users.lookup(topics.state))
    _, root = sessions.login("root", "root-pw-1")
    assert root.user == "root"
    _, alice = sessions.login("ALICE", PASSWORD)  # names are case-insensitive
    assert alice.user == "alice"
    for user, password in [("root", "taosdata"), ("alice", "wrong-pw-1"), ("bob", PASSWORD)]:
        with pytest.raises(AuthenticationFailed, match="wrong user or password"):
            sessions.login(user, password)


@pytest.mark.parametrize("change", ["ALTER USER alice PASS 'another-pw'", "DROP USER alice"])
def test_alter_and_drop_user_end_the_users_sessions(topics: Engine, change: str) -> None:
    sessions = Sessions("root-pw-1", users.lookup(topics.state))
    token, _ = sessions.login("alice", PASSWORD)
    root_token, _ = sessions.login("root", "root-pw-1")
    alice = [("authorization", f"Bearer {token}")]
    assert sessions.session(alice).user == "alice"
    topics.execute(change)
    with pytest.raises(AuthenticationFailed, match="session of user alice ended"):
        sessions.session(alice)
    with pytest.raises(AuthenticationFailed, match="unknown or expired token"):
        sessions.session(alice)  # gone for good
    assert sessions.session([("authorization", f"Bearer {root_token}")]).user == "root"
    with pytest.raises(AuthenticationFailed):
        sessions.login("alice", PASSWORD)
    if change.startswith("ALTER"):
        assert sessions.login("alice", "another-pw")[1].user == "alice"


# --- passwords and the root password rule -----------------------------------------------


def test_hashes_carry_their_cost() -> None:
    stored = hash_password("pw-123456", "00" * 16)
    scheme, n, r, p, digest = stored.split("$")
    assert (scheme, int(n), int(r), int(p), len(digest)) == ("scrypt", SCRYPT_N, 8, 1, 64)
    assert verify_password("pw-123456", "00" * 16, stored)
    assert not verify_password("pw-123456", "01" * 16, stored)
    assert not verify_password("pw-123456", "00" * 16, stored.replace("scrypt", "md5"))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "localhost", "::1", "[::1]"])
def test_the_default_root_password_is_fine_on_loopback(host: str) -> None:
    assert is_loopback(host)
    check_root_password(host, "taosdata")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "", "no-such-host.invalid"])
def test_the_default_root_password_is_refused_elsewhere(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="default root password 'taosdata': set another"):
        check_root_password(host, "taosdata")
    check_root_password(host, "Another-pw-1")


def test_an_empty_root_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="the root password is empty"):
        check_root_password("127.0.0.1", "")
