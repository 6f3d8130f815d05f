"""Database privileges over the wire, as TDengine's "Permissions" page has them: a
matrix of grants x statements (tag conditions included), each outcome checked (rows,
NoPermission, or NotFoundError where the user may not even see the object), and the
rules around it: creators own their databases, a revoke reaches a running session,
grants do not outlive what they name, subscription stays independent, and a tag a
condition reads cannot be dropped."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import Error, NoPermission, NotFoundError, SchemaInUseError, TopicNotFound
from tests.client.support import config, drain
from tests.live_server import ServerProcess

PASSWORD = "secret-pw-1"
SETUP = """
CREATE DATABASE power VGROUPS 2;
CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT)
    TAGS (location VARCHAR(64), groupid INT);
INSERT INTO power.d1 USING power.meters TAGS ('SanFrancisco', 1) VALUES (1000, 10.5, 219)
    power.d2 USING power.meters TAGS ('LosAngeles', 2) VALUES (2000, 11.5, 221);
CREATE TABLE power.notes (ts TIMESTAMP, msg VARCHAR(20));
INSERT INTO power.notes VALUES (1000, 'hello');
CREATE DATABASE other VGROUPS 1;
CREATE TABLE other.t (ts TIMESTAMP, v INT);
CREATE TOPIC root_topic AS SELECT ts, voltage FROM power.meters;
"""
# What each grant case runs as root for its fresh user (`{u}`).
GRANTS: dict[str, list[str]] = {
    "none": [],
    "read": ["GRANT READ ON power.* TO {u}"],
    "write": ["GRANT WRITE ON power.* TO {u}"],
    "all": ["GRANT ALL ON power.* TO {u}"],
    "read_g1": ["GRANT READ ON power.meters WITH groupid = 1 TO {u}"],
    "write_g1": ["GRANT WRITE ON power.meters WITH groupid = 1 TO {u}"],
    "read_notes": ["GRANT READ ON power.notes TO {u}"],
    "everything": ["GRANT ALL ON *.* TO {u}"],
    "read_narrowed": ["GRANT READ ON power.* TO {u}",
                      "GRANT READ ON power.meters WITH groupid = 2 TO {u}"],
}  # fmt: skip
OK = "ok"
DENIED = NoPermission
HIDDEN = NotFoundError
NO_TOPIC = TopicNotFound
_names = itertools.count()


@dataclass
class Case:
    sql: str
    expect: dict[str, Any]  # grant case -> OK, DENIED, HIDDEN or the rows expected
    default: Any = field(default=None)

    def outcome(self, grant: str) -> Any:
        return self.expect.get(grant, self.default)


def unique(sql: str) -> str:
    return sql.replace("#", str(next(_names)))


CASES = [
    Case("SELECT voltage FROM power.meters WHERE voltage < 230 ORDER BY voltage",
         {"read": [(219,), (221,)], "all": [(219,), (221,)], "everything": [(219,), (221,)],
          "read_g1": [(219,)], "read_narrowed": [(221,)], "write": DENIED, "write_g1": DENIED},
         HIDDEN),
    Case("SELECT voltage FROM power.d2 WHERE voltage < 230",
         {"read": [(221,)], "all": [(221,)], "everything": [(221,)], "read_narrowed": [(221,)],
          "write": DENIED}, HIDDEN),
    Case("SELECT msg FROM power.notes WHERE msg = 'hello'",
         {"read": [("hello",)], "all": [("hello",)], "everything": [("hello",)],
          "read_notes": [("hello",)], "read_narrowed": [("hello",)], "write": DENIED},
         HIDDEN),
    Case("SELECT count(*) FROM other.t", {"everything": [(0,)]}, HIDDEN),
    Case("INSERT INTO power.d1 (ts, voltage) VALUES (NOW, 230)",
         {"write": OK, "all": OK, "everything": OK, "write_g1": OK, "read": DENIED,
          "read_g1": DENIED}, HIDDEN),
    Case("INSERT INTO power.d2 (ts, voltage) VALUES (NOW, 230)",
         {"write": OK, "all": OK, "everything": OK, "read": DENIED, "read_narrowed": DENIED},
         HIDDEN),
    Case("INSERT INTO power.c# USING power.meters TAGS ('x', 1) (ts, voltage) VALUES (NOW, 230)",
         {"write": OK, "all": OK, "everything": OK, "write_g1": OK, "read": DENIED,
          "read_g1": DENIED, "read_narrowed": DENIED}, HIDDEN),
    Case("INSERT INTO power.c# USING power.meters TAGS ('x', 3) (ts, voltage) VALUES (NOW, 230)",
         {"write": OK, "all": OK, "everything": OK, "write_g1": DENIED, "read": DENIED,
          "read_g1": DENIED, "read_narrowed": DENIED}, HIDDEN),
    Case("INSERT INTO power.notes VALUES (NOW, 'x')",
         {"write": OK, "all": OK, "everything": OK, "read": DENIED, "read_notes": DENIED,
          "read_narrowed": DENIED}, HIDDEN),
    Case("CREATE STABLE power.s# (ts TIMESTAMP, v INT) TAGS (t INT)",
         {"none": HIDDEN, "write": OK, "all": OK, "everything": OK}, DENIED),
    Case("CREATE TABLE power.n# (ts TIMESTAMP, v INT)",
         {"none": HIDDEN, "write": OK, "all": OK, "everything": OK}, DENIED),
    Case("CREATE TABLE power.c# USING power.meters TAGS ('y', 1)",
         {"none": HIDDEN, "write": OK, "all": OK, "everything": OK, "write_g1": OK,
          "read_notes": HIDDEN}, DENIED),
    Case("ALTER STABLE power.meters ADD COLUMN c# INT",
         {"none": HIDDEN, "write": OK, "all": OK, "everything": OK}, DENIED),
    Case("ALTER TABLE power.d1 SET TAG location = 'moved'",
         {"none": HIDDEN, "write": OK, "all": OK, "everything": OK}, DENIED),
    Case("DESCRIBE power.meters", {"none": HIDDEN, "read_notes": HIDDEN}, OK),
    Case("DESCRIBE power.notes", {"none": HIDDEN, "read_g1": HIDDEN, "write_g1": HIDDEN}, OK),
    Case("CREATE TOPIC q# AS SELECT ts, voltage FROM power.meters",
         {"read": OK, "all": OK, "everything": OK, "read_g1": DENIED, "read_narrowed": DENIED,
          "write": DENIED, "write_g1": DENIED, "read_notes": HIDDEN}, HIDDEN),
    Case("CREATE TOPIC q# AS SELECT ts, voltage FROM power.d1",
         {"read": OK, "all": OK, "everything": OK, "read_g1": OK, "write": DENIED,
          "write_g1": DENIED}, HIDDEN),
    Case("CREATE TOPIC q# AS DATABASE power",
         {"none": HIDDEN, "read": OK, "all": OK, "everything": OK}, DENIED),
    Case("CREATE TOPIC q# AS STABLE power.meters WHERE groupid = 1",
         {"read": OK, "all": OK, "everything": OK, "read_g1": DENIED, "read_narrowed": DENIED,
          "write": DENIED, "write_g1": DENIED, "read_notes": HIDDEN}, HIDDEN),
    Case("ALTER DATABASE power WAL_LEVEL 1", {"none": HIDDEN}, DENIED),
    Case("DROP DATABASE other", {"everything": DENIED}, HIDDEN),
    Case("USE power", {"none": HIDDEN}, OK),
    # a topic over what the user may not read does not exist for it
    Case("DROP TOPIC root_topic",
         {"none": NO_TOPIC, "write": NO_TOPIC, "write_g1": NO_TOPIC, "read_notes": NO_TOPIC},
         DENIED),
    Case("DROP CONSUMER GROUP g ON root_topic",
         {"none": NO_TOPIC, "write": NO_TOPIC, "write_g1": NO_TOPIC, "read_notes": NO_TOPIC},
         DENIED),
    Case("GRANT READ ON power.* TO root_friend", {}, DENIED),
    Case("SHOW power.TABLES",
         {"none": HIDDEN, "read_g1": ["d1"], "write_g1": ["d1"], "read_notes": ["notes"],
          "read_narrowed": ["d2", "notes"]},
         ["d1", "d2", "notes"]),
    Case("SHOW DATABASES", {"none": [], "everything": ["other", "power"]}, ["power"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("privileges") / "data")
    try:
        proc.wait_ready()
        with connect(proc.address) as root:
            root.execute(SETUP)
            root.execute(f"CREATE USER root_friend PASS '{PASSWORD}'")
        yield proc
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def root(server: ServerProcess) -> Iterator[Connection]:
    with connect(server.address) as conn:
        yield conn


def user_with(root: Connection, grant: str) -> str:
    name = f"u{next(_names)}"
    root.execute(f"CREATE USER {name} PASS '{PASSWORD}'")
    for sql in GRANTS[grant]:
        root.execute(sql.format(u=name))
    return name


def outcome(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except Error as err:
        return type(err)


def shown(sql: str, result: Any) -> Any:
    """What a case compares: rows, or the names SHOW lists (but the tables the cases
    create as they run: c17, n3)."""
    if sql.startswith("SHOW"):
        return sorted(r[0] for r in result.rows if not re.fullmatch(r"[cns]\d+", r[0]))
    if sql.startswith("SELECT"):
        return result.rows
    return OK


@pytest.mark.parametrize("grant", list(GRANTS))
def test_the_privilege_matrix(server: ServerProcess, root: Connection, grant: str) -> None:
    name = user_with(root, grant)
    failures = []
    with connect(server.address, user=name, password=PASSWORD) as conn:
        for case in CASES:
            sql = unique(case.sql)
            got = outcome(lambda sql=sql: shown(sql, conn.execute(sql)))  # type: ignore[misc]
            want = case.outcome(grant)
            if got != want:
                failures.append(f"{sql}: expected {want}, got {got}")
    assert not failures, "\n".join(failures)


def test_a_refused_write_changes_nothing(server: ServerProcess, root: Connection) -> None:
    """An Arrow write through the super table that reaches a child outside the user's
    condition writes nothing at all, not even the rows it may write."""
    name = user_with(root, "write_g1")
    before = root.execute("SELECT count(*) FROM power.meters").rows
    rows = pa.table({
        "tbname": ["d1", "d2"], "ts": pa.array([5, 6], pa.timestamp("ms")),
        "voltage": pa.array([1, 2], pa.int32()),
    })  # fmt: skip
    with connect(server.address, user=name, password=PASSWORD) as conn:
        with pytest.raises(NotFoundError, match=r"power\.d2 does not exist"):
            conn.write("power.meters", rows)
        assert conn.write("power.meters", rows.slice(0, 1)) == 1
    assert root.execute("SELECT count(*) FROM power.meters").rows[0][0] == before[0][0] + 1


def test_a_creator_owns_its_database_and_others_do_not_see_it(server: ServerProcess) -> None:
    with connect(server.address) as root:
        owner = user_with(root, "none")
        other = user_with(root, "read")
    with connect(server.address, user=owner, password=PASSWORD) as conn:
        conn.execute(
            f"CREATE DATABASE own_{owner}; CREATE TABLE own_{owner}.t (ts TIMESTAMP, v INT)"
        )
        conn.execute(
            f"INSERT INTO own_{owner}.t VALUES (1, 1); ALTER DATABASE own_{owner} WAL_LEVEL 2"
        )
        assert conn.execute(f"SELECT v FROM own_{owner}.t").rows == [(1,)]
        assert (owner, "all", f"own_{owner}", "*", None, "owner") in conn.execute(
            "SHOW USER PRIVILEGES"
        ).rows
    with connect(server.address, user=other, password=PASSWORD) as conn:
        assert f"own_{owner}" not in [r[0] for r in conn.execute("SHOW DATABASES").rows]
        for sql in (f"SELECT * FROM own_{owner}.t", f"DROP DATABASE own_{owner}"):
            with pytest.raises(NotFoundError, match=f"database 'own_{owner}' does not exist"):
                conn.execute(sql)
        conn.execute(f"DROP DATABASE IF EXISTS own_{owner}")  # changes nothing
    with connect(server.address, user=owner, password=PASSWORD) as conn:
        conn.execute(f"DROP DATABASE own_{owner}")


def test_a_revoke_reaches_a_running_session(server: ServerProcess, root: Connection) -> None:
    name = user_with(root, "read")
    with connect(server.address, user=name, password=PASSWORD) as conn:
        query = "SELECT msg FROM power.notes WHERE msg = 'hello'"
        assert conn.execute(query).rows == [("hello",)]
        root.execute(f"REVOKE READ ON power.* FROM {name}")
        with pytest.raises(NotFoundError):
            conn.execute(query)
        root.execute(f"GRANT READ ON power.notes TO {name}")
        assert conn.execute(query).rows == [("hello",)]


def test_show_user_privileges(server: ServerProcess, root: Connection) -> None:
    name = user_with(root, "read_narrowed")
    root.execute(f"GRANT WRITE ON power.notes TO {name}; GRANT READ ON power.notes TO {name}")
    root.execute(f"GRANT SUBSCRIBE ON root_topic TO {name}")
    expected = [
        (name, "read", "power", "*", None, None),
        (name, "read", "power", "meters", "groupid = 2", None),
        (name, "all", "power", "notes", None, None),
        (name, "subscribe", "power", "root_topic", None, "topic"),
    ]
    with connect(server.address, user=name, password=PASSWORD) as conn:
        assert conn.execute("SHOW USER PRIVILEGES").rows == expected
    everyone = root.execute("SHOW USER PRIVILEGES").rows
    assert everyone[0] == ("root", "all", "*", "*", None, "superuser")
    assert all(row in everyone for row in expected)


def test_grants_do_not_outlive_what_they_name(server: ServerProcess, root: Connection) -> None:
    name = user_with(root, "none")
    root.execute("CREATE DATABASE ephemeral; CREATE TABLE ephemeral.t (ts TIMESTAMP, v INT)")
    root.execute(f"GRANT ALL ON ephemeral.* TO {name}")
    with connect(server.address, user=name, password=PASSWORD) as conn:
        assert conn.execute("SELECT count(*) FROM ephemeral.t").rows == [(0,)]
        root.execute("DROP DATABASE ephemeral; CREATE DATABASE ephemeral")
        with pytest.raises(NotFoundError):
            conn.execute("USE ephemeral")
    root.execute("DROP DATABASE ephemeral")


def test_bad_grants_are_refused(root: Connection) -> None:
    name = user_with(root, "none")
    for sql, error, says in [
        (f"GRANT READ ON power.d1 TO {name}", Error, "is a child table: grant on its super table"),
        (f"GRANT READ ON power.notes WITH v = 1 TO {name}", Error, "WITH applies to a super table"),
        (
            f"GRANT READ ON power.* WITH groupid = 1 TO {name}",
            Error,
            "WITH applies to a super table",
        ),
        (f"GRANT READ ON *.t TO {name}", Error, "name the database"),
        (f"GRANT READ ON power.meters WITH voltage > 1 TO {name}", Error, "voltage"),
        (f"GRANT READ ON nodb.* TO {name}", NotFoundError, "database 'nodb' does not exist"),
        (f"GRANT READ ON power.nope TO {name}", NotFoundError, "power.nope does not exist"),
        ("GRANT READ ON power.* TO nobody", NotFoundError, "user nobody does not exist"),
        ("GRANT READ ON power.* TO root", Error, "names root, the superuser"),
    ]:
        with pytest.raises(error, match=says):
            root.execute(sql)
    assert (
        root.execute("SHOW USER PRIVILEGES").rows.count((name, "read", "power", "*", None, None))
        == 0
    )


def test_a_tag_a_condition_reads_cannot_be_dropped(root: Connection) -> None:
    root.execute(
        "CREATE STABLE power.zones (ts TIMESTAMP, v INT) TAGS (zone INT, spare INT, kept INT)"
    )
    name = user_with(root, "none")
    root.execute(f"GRANT READ ON power.zones WITH zone = 1 TO {name}")
    with pytest.raises(SchemaInUseError, match=f"a privilege of user {name}"):
        root.execute("ALTER STABLE power.zones DROP TAG zone")
    root.execute("ALTER STABLE power.zones DROP TAG spare")
    root.execute(f"REVOKE READ ON power.zones FROM {name}")
    root.execute("ALTER STABLE power.zones DROP TAG zone")


def test_subscription_stays_independent_of_database_rights(
    server: ServerProcess, root: Connection
) -> None:
    name = user_with(root, "none")
    root.execute(f"GRANT SUBSCRIBE ON root_topic TO {name}")
    consumer_config = config(server.address, "independent", user=name, password=PASSWORD)
    with Consumer(consumer_config) as consumer:
        consumer.subscribe(["root_topic"])
        rows = sum(m.row_count for m in drain(consumer))
    assert rows == root.execute("SELECT count(*) FROM power.meters").rows[0][0]
    with connect(server.address, user=name, password=PASSWORD) as conn:
        with pytest.raises(NotFoundError):
            conn.execute("SELECT * FROM power.meters")
        assert [r[0] for r in conn.execute("SHOW TOPICS").rows] == ["root_topic"]


def test_databases_of_an_older_data_directory_belong_to_root(tmp_path: Any) -> None:
    """A catalog written before privileges has no owners: its databases are root's."""
    import json  # noqa: PLC0415
    import sqlite3  # noqa: PLC0415

    from sqltopic.server.common.result import Session  # noqa: PLC0415
    from sqltopic.server.core.engine import Engine  # noqa: PLC0415

    data = tmp_path / "data"
    with Engine(data, background=False) as engine:
        engine.execute("CREATE DATABASE legacy; CREATE TABLE legacy.t (ts TIMESTAMP, v INT)")
        engine.execute(f"CREATE USER alice PASS '{PASSWORD}'")
    con = sqlite3.connect(data / "catalog.sqlite")
    (body,) = con.execute("SELECT body FROM objects WHERE kind = 'database'").fetchone()
    old = {k: v for k, v in json.loads(body).items() if k != "owner"}
    con.execute("UPDATE objects SET body = ? WHERE kind = 'database'", (json.dumps(old),))
    con.commit()
    con.close()
    with Engine(data, background=False) as engine:
        assert engine.state.catalog.databases["legacy"].owner == "root"
        alice = Session(user="alice")
        with pytest.raises(NotFoundError):
            engine.execute("SELECT * FROM legacy.t", alice)
        engine.execute("GRANT READ ON legacy.* TO alice")
        assert engine.execute("SELECT count(*) FROM legacy.t", alice).rows == [(0,)]


def test_tags_cannot_be_changed_to_widen_a_conditioned_grant(root: Connection) -> None:
    """WRITE on the database allows SET TAG, but not for a user whose rights on the super
    table depend on the tags: moving d2 into `groupid = 1` would open d2 to it."""
    name = user_with(root, "write")
    root.execute(f"GRANT READ ON power.meters WITH groupid = 1 TO {name}")
    with connect(root.address, user=name, password=PASSWORD) as conn:
        with pytest.raises(NoPermission, match=r"depend on its child tables. tags"):
            conn.execute("ALTER TABLE power.d2 SET TAG groupid = 1")
        with pytest.raises(NoPermission):
            conn.execute("SELECT * FROM power.d2")
    assert root.execute("SELECT groupid FROM power.meters WHERE tbname = 'd2' LIMIT 1").rows == [
        (2,)
    ]


def test_a_topic_is_hidden_from_who_may_neither_consume_nor_read_it(
    server: ServerProcess, root: Connection
) -> None:
    root.execute("CREATE DATABASE vault; CREATE TABLE vault.t (ts TIMESTAMP, v INT)")
    root.execute("CREATE TOPIC vault_topic AS SELECT ts, v FROM vault.t")
    name = user_with(root, "read")
    with connect(server.address, user=name, password=PASSWORD) as conn:
        for sql in ("DROP TOPIC vault_topic", "DROP CONSUMER GROUP g ON vault_topic"):
            with pytest.raises(NotFoundError, match="topic 'vault_topic' does not exist"):
                conn.execute(sql)
        assert "vault_topic" not in [r[0] for r in conn.execute("SHOW TOPICS").rows]
        assert "root_topic" in [r[0] for r in conn.execute("SHOW TOPICS").rows]
        with pytest.raises(NoPermission, match="DROP TOPIC needs root or the creator"):
            conn.execute("DROP TOPIC root_topic")  # it may read what root_topic reads
    hidden = config(server.address, "hidden", user=name, password=PASSWORD)
    with (
        Consumer(hidden) as consumer,
        pytest.raises(NotFoundError, match="topic 'vault_topic' does not exist"),
    ):
        consumer.subscribe(["vault_topic"])
    root.execute("DROP TOPIC vault_topic; DROP DATABASE vault")


def test_a_child_table_is_in_the_database_of_its_super_table(root: Connection) -> None:
    """INSERT ... USING a super table of another database is refused (it once stored
    tags of the wrong types, and every read of the table then failed)."""
    name = user_with(root, "write_g1")
    with connect(root.address, user=name, password=PASSWORD) as conn:
        conn.execute(f"CREATE DATABASE db_{name}")
        conn.execute(f"CREATE STABLE db_{name}.sm (ts TIMESTAMP, v INT) TAGS (g VARCHAR(8))")
        for sql in (
            f"INSERT INTO power.x_{name} USING db_{name}.sm TAGS ('1') VALUES (NOW, 1)",
            f"INSERT INTO db_{name}.y USING power.meters TAGS ('a', 1) VALUES (NOW, 1, 2)",
        ):
            with pytest.raises(Error, match="a child table is in the database of its super"):
                conn.execute(sql)
    assert f"x_{name}" not in [r[0] for r in root.execute("SHOW power.TABLES").rows]
    assert root.execute(f"SHOW db_{name}.TABLES").rows == []
    root.execute(f"DROP DATABASE db_{name}")


def test_a_hidden_table_and_a_missing_one_answer_alike(root: Connection) -> None:
    name = user_with(root, "read_g1")
    with connect(root.address, user=name, password=PASSWORD) as conn:
        answers = []
        for table in ("d2", "no_such_table"):
            with pytest.raises(NotFoundError) as info:
                conn.execute(f"INSERT INTO power.{table} VALUES (NOW, 1.0, 1)")
            answers.append(str(info.value).replace(table, "T"))
        assert answers[0] == answers[1]
