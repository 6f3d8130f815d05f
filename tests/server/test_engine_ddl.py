"""DDL on a real engine: databases, super tables, child and normal tables, USE, DROP,
and the errors they raise (class, message, position)."""

from __future__ import annotations

import pytest

from sqltopic.errors import (
    AlreadyExistsError,
    NotFoundError,
    SchemaInUseError,
    SqlError,
    TopicNotFound,
)
from sqltopic.server.common.result import Session
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.routing import vgroup_for
from sqltopic.sql.entries import vnode_dir
from tests.server.support import POWER_DDL, table_names, vgroups_of

# --- databases ------------------------------------------------------------------------


def test_create_database_with_options(engine: Engine) -> None:
    engine.execute(
        "CREATE DATABASE db1 VGROUPS 3 PRECISION 'us' WAL_LEVEL 2 WAL_FSYNC_PERIOD 0 "
        "WAL_RETENTION_PERIOD 60 WAL_RETENTION_SIZE 1024 WAL_SEGMENT_SIZE 512 WAL_ROLL_PERIOD 30"
    )
    result = engine.execute("SHOW DATABASES")
    (row,) = [r for r in result.rows if r[0] == "db1"]
    shown = dict(zip(result.columns, row, strict=True))
    assert shown["vgroups"] == 3
    assert shown["precision"] == "us"
    assert shown["wal_level"] == 2
    assert shown["wal_fsync_period"] == 0
    assert shown["wal_retention_period"] == 60
    assert shown["wal_retention_size"] == 1024
    assert shown["wal_segment_size"] == 512
    assert shown["wal_roll_period"] == 30
    assert len(vgroups_of(engine, "db1")) == 3


def test_vgroup_ids_are_unique_across_databases(engine: Engine) -> None:
    engine.execute("CREATE DATABASE a VGROUPS 2; CREATE DATABASE b VGROUPS 3")
    a, b = vgroups_of(engine, "a"), vgroups_of(engine, "b")
    assert len(set(a) | set(b)) == 5
    for vgroup in (*a, *b):
        assert (vnode_dir(engine.state.data_dir, vgroup) / "wal").is_dir()


def test_create_existing_database(engine: Engine) -> None:
    engine.execute("CREATE DATABASE db1")
    with pytest.raises(AlreadyExistsError, match="db1"):
        engine.execute("CREATE DATABASE db1")
    engine.execute("CREATE DATABASE IF NOT EXISTS db1 VGROUPS 7")
    assert len(vgroups_of(engine, "db1")) == 2, "IF NOT EXISTS changes nothing"


@pytest.mark.parametrize(
    "options",
    ["VGROUPS 0", "VGROUPS 1025", "PRECISION 's'", "WAL_LEVEL 3", "WAL_RETENTION_SIZE -2"],
)
def test_bad_database_option_is_refused(engine: Engine, options: str) -> None:
    with pytest.raises(SqlError):
        engine.execute(f"CREATE DATABASE db1 {options}")
    assert engine.execute("SHOW DATABASES").rows == []


def test_alter_database_changes_wal_options(engine: Engine) -> None:
    engine.execute("CREATE DATABASE db1; ALTER DATABASE db1 WAL_RETENTION_PERIOD 7 WAL_LEVEL 2")
    result = engine.execute("SHOW DATABASES")
    shown = dict(zip(result.columns, result.rows[0], strict=True))
    assert (shown["wal_retention_period"], shown["wal_level"]) == (7, 2)
    with pytest.raises(SqlError, match="VGROUPS"):
        engine.execute("ALTER DATABASE db1 VGROUPS 3")


def test_use_missing_database(engine: Engine) -> None:
    with pytest.raises(NotFoundError, match="nodb") as info:
        engine.execute("USE nodb")
    assert (info.value.line, info.value.column) == (1, 1)
    assert engine.session.db is None


def test_use_is_per_session(power: Engine) -> None:
    other = Session()
    with pytest.raises(SqlError, match="no database selected"):
        power.execute("SHOW TABLES", other)
    power.execute("CREATE DATABASE second; USE second", other)
    assert power.session.db == "power"
    assert other.db == "second"


def test_drop_database_removes_everything(power: Engine) -> None:
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1); INSERT INTO d1 VALUES (1, 1, 1, 1)")
    vgroups = vgroups_of(power, "power")
    power.execute("DROP DATABASE power")
    assert power.execute("SHOW DATABASES").rows == []
    assert power.session.db is None
    for vgroup in vgroups:
        assert not vnode_dir(power.state.data_dir, vgroup).exists()
    power.execute("DROP DATABASE IF EXISTS power")
    with pytest.raises(NotFoundError):
        power.execute("DROP DATABASE power")
    power.execute(POWER_DDL)
    assert table_names(power) == []
    assert power.execute("SELECT count(*) FROM meters").rows == [(0,)]


def test_drop_database_with_topics_is_refused(power: Engine) -> None:
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)")
    power.execute("CREATE TOPIC t1 AS DATABASE power; CREATE TOPIC t2 AS SELECT ts FROM d1")
    with pytest.raises(SchemaInUseError, match="t1, t2"):
        power.execute("DROP DATABASE power")
    assert [r[0] for r in power.execute("SHOW DATABASES").rows] == ["power"]
    assert table_names(power) == ["d1"]
    power.execute("DROP TOPIC t1; DROP TOPIC t2; DROP DATABASE power")
    assert power.execute("SHOW DATABASES").rows == []


# --- super tables and tables ----------------------------------------------------------


def test_create_stable_and_children(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('California.SanFrancisco', 2);
        CREATE TABLE IF NOT EXISTS d2 USING power.meters (groupid) TAGS (3);
        CREATE TABLE ntb (ts TIMESTAMP, c1 INT, c2 NCHAR(4));
    """)
    rows = power.execute("SHOW TABLES").rows
    assert [(r[0], r[4], r[6]) for r in rows] == [
        ("d1", "meters", "CHILD_TABLE"),
        ("d2", "meters", "CHILD_TABLE"),
        ("ntb", None, "NORMAL_TABLE"),
    ]
    result = power.execute("SELECT tbname, location, groupid FROM meters")
    assert result.rows == []  # no rows yet: tags show with rows only
    power.execute("INSERT INTO d1 VALUES (1, 1, 1, 1) d2 VALUES (1, 1, 1, 1)")
    tags = power.execute("SELECT DISTINCT tbname, location, groupid FROM meters ORDER BY tbname")
    assert tags.rows == [("d1", "California.SanFrancisco", 2), ("d2", None, 3)]


def test_tables_live_in_their_hash_vgroup(power: Engine) -> None:
    names = [f"t{i}" for i in range(24)]
    power.execute(
        ";".join(f"CREATE TABLE {n} USING meters TAGS ('x', {i})" for i, n in enumerate(names))
    )
    db = power.state.catalog.database("power")
    shown = {r[0]: r[5] for r in power.execute("SHOW TABLES").rows}
    assert shown == {n: vgroup_for(db, n) for n in names}
    assert len(set(shown.values())) == 4


def test_names_are_case_insensitive(power: Engine) -> None:
    power.execute("CREATE TABLE MyTable USING METERS TAGS ('x', 1)")
    power.execute(
        "INSERT INTO mytable VALUES (1, 1, 1, 1); INSERT INTO MYTABLE VALUES (2, 1, 1, 1)"
    )
    assert table_names(power) == ["mytable"]
    assert power.execute("SELECT count(*) FROM MyTable").rows == [(2,)]
    with pytest.raises(AlreadyExistsError):
        power.execute("CREATE TABLE MYTABLE USING meters TAGS ('y', 2)")


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("CREATE TABLE d1 USING meters TAGS ('y', 2)", AlreadyExistsError),
        ("CREATE TABLE d1 (ts TIMESTAMP, a INT)", AlreadyExistsError),
        ("CREATE TABLE meters (ts TIMESTAMP, a INT)", AlreadyExistsError),
        ("CREATE STABLE d1 (ts TIMESTAMP, a INT) TAGS (t INT)", AlreadyExistsError),
        ("CREATE STABLE meters (ts TIMESTAMP, a INT) TAGS (t INT)", AlreadyExistsError),
        ("CREATE TABLE x USING nosuch TAGS (1)", NotFoundError),
        ("CREATE TABLE x USING meters (nosuch) TAGS (1)", NotFoundError),
        ("CREATE TABLE x USING meters TAGS (1)", SqlError),
        ("CREATE TABLE x USING meters TAGS ('y', 'not a number')", SqlError),
        ("CREATE TABLE x USING meters TAGS ('" + "y" * 65 + "', 1)", SqlError),
        ("CREATE TABLE x (a INT, ts TIMESTAMP)", SqlError),
        ("CREATE TABLE x (ts TIMESTAMP, a INT, A DOUBLE)", SqlError),
        ("CREATE TABLE x (ts TIMESTAMP, tbname INT)", SqlError),
        ("CREATE STABLE x (ts TIMESTAMP, a INT) TAGS (a INT)", SqlError),
        ("CREATE STABLE x (ts TIMESTAMP, a VARCHAR) TAGS (t INT)", SqlError),
    ],
)
def test_bad_create_is_refused_and_changes_nothing(
    power: Engine, sql: str, error: type[SqlError]
) -> None:
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)")
    before = (power.execute("SHOW TABLES").rows, power.execute("SHOW STABLES").rows)
    with pytest.raises(error):
        power.execute(sql)
    assert (power.execute("SHOW TABLES").rows, power.execute("SHOW STABLES").rows) == before


def test_if_not_exists_keeps_the_existing_table(power: Engine) -> None:
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)")
    power.execute("CREATE TABLE IF NOT EXISTS d1 USING meters TAGS ('y', 2)")
    power.execute("CREATE STABLE IF NOT EXISTS meters (ts TIMESTAMP, a INT) TAGS (t INT)")
    power.execute("INSERT INTO d1 VALUES (1, 1, 1, 1)")
    assert power.execute("SELECT location, groupid FROM d1").rows == [("x", 1)]
    assert [r[0] for r in power.execute("DESCRIBE meters").rows] == [
        "ts", "current", "voltage", "phase", "location", "groupid",
    ]  # fmt: skip


def test_child_table_must_share_its_stables_database(power: Engine) -> None:
    power.execute("CREATE DATABASE other")
    with pytest.raises(SqlError, match="database"):
        power.execute("CREATE TABLE other.x USING power.meters TAGS ('x', 1)")
    assert table_names(power, "other") == []


def test_drop_table_and_stable(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1); CREATE TABLE d2 USING meters TAGS ('y', 2);
        CREATE TABLE ntb (ts TIMESTAMP, a INT);
        INSERT INTO d1 VALUES (1, 1, 1, 1) d2 VALUES (2, 2, 2, 2) ntb VALUES (3, 3);
    """)
    power.execute("DROP TABLE d1")
    assert table_names(power) == ["d2", "ntb"]
    assert power.execute("SELECT tbname FROM meters").rows == [("d2",)]
    power.execute("DROP TABLE IF EXISTS d1")
    with pytest.raises(NotFoundError, match="d1"):
        power.execute("DROP TABLE d1")
    power.execute("DROP STABLE meters")
    assert table_names(power) == ["ntb"]
    assert power.execute("SHOW STABLES").rows == []
    with pytest.raises(NotFoundError):
        power.execute("DROP STABLE meters")
    power.execute("DROP STABLE IF EXISTS meters")
    assert power.execute("SELECT * FROM ntb").rows[0][1] == 3


def test_recreated_table_does_not_show_the_dropped_tables_rows(power: Engine) -> None:
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1); INSERT INTO d1 VALUES (1, 1, 1, 1)")
    power.execute("DROP TABLE d1; CREATE TABLE d1 USING meters TAGS ('y', 2)")
    assert power.execute("SELECT * FROM d1").rows == []
    power.execute("INSERT INTO d1 VALUES (2, 2, 2, 2)")
    assert power.execute("SELECT voltage, location FROM meters").rows == [(2, "y")]


def test_drop_of_a_table_a_topic_reads_is_refused(power: Engine) -> None:
    power.execute(
        "CREATE TABLE d1 USING meters TAGS ('x', 1); CREATE TABLE d2 USING meters TAGS ('y', 1)"
    )
    power.execute(
        "CREATE TOPIC on_child AS SELECT ts FROM d1; CREATE TOPIC on_stable AS STABLE meters"
    )
    with pytest.raises(SchemaInUseError, match="on_child"):
        power.execute("DROP TABLE d1")
    with pytest.raises(SchemaInUseError, match="on_child, on_stable"):
        power.execute("DROP STABLE meters")
    assert table_names(power) == ["d1", "d2"]
    power.execute("DROP TABLE d2")  # a child no topic names alone
    power.execute("DROP TOPIC on_child; DROP TOPIC on_stable; DROP STABLE meters")
    assert table_names(power) == []


# --- topics ---------------------------------------------------------------------------


def test_create_and_drop_topics(power: Engine) -> None:
    power.execute("CREATE TOPIC t1 AS SELECT ts, voltage FROM meters WHERE voltage > 220")
    with pytest.raises(AlreadyExistsError, match="t1"):
        power.execute("CREATE TOPIC t1 AS DATABASE power")
    power.execute("CREATE TOPIC IF NOT EXISTS t1 AS DATABASE power")
    assert power.execute("SHOW TOPICS").rows[0][4] == "query"
    power.execute("DROP TOPIC t1")
    with pytest.raises(TopicNotFound):
        power.execute("DROP TOPIC t1")
    power.execute("DROP TOPIC IF EXISTS t1")
    assert power.execute("SHOW TOPICS").rows == []


def test_drop_consumer_group_of_an_unknown_topic(power: Engine) -> None:
    with pytest.raises(TopicNotFound):
        power.execute("DROP CONSUMER GROUP g ON nosuch")
    power.execute("DROP CONSUMER GROUP IF EXISTS g ON nosuch")
    power.execute("CREATE TOPIC t1 AS DATABASE power; DROP CONSUMER GROUP g ON t1")


# --- errors carry the statement's position --------------------------------------------


@pytest.mark.parametrize(
    ("sql", "line", "column", "names"),
    [
        ("SELECT * FROM nosuch", 1, 1, "nosuch"),
        ("SELECT * FROM nodb.meters", 1, 1, "nodb"),
        ("USE power;\n  SELECT * FROM nosuch", 2, 3, "nosuch"),
        ("USE power; INSERT INTO nosuch VALUES (1, 1, 1, 1)", 1, 12, "nosuch"),
        ("INSERT INTO d1 (ts, nosuch) VALUES (1, 2)", 1, 1, "nosuch"),
        ("INSERT INTO nodb.d1 VALUES (1, 1, 1, 1)", 1, 1, "nodb"),
        ("DESCRIBE nosuch", 1, 1, "nosuch"),
        ("\n\nDESCRIBE nodb.x", 3, 1, "nodb"),
        ("ALTER STABLE meters DROP COLUMN nosuch", 1, 1, "nosuch"),
        ("ALTER STABLE nosuch ADD COLUMN c INT", 1, 1, "nosuch"),
        ("ALTER TABLE nosuch SET TAG groupid = 1", 1, 1, "nosuch"),
        ("ALTER TABLE d1 SET TAG nosuch = 1", 1, 1, "nosuch"),
        ("DROP TABLE nosuch", 1, 1, "nosuch"),
        ("CREATE TABLE x USING nosuch TAGS (1)", 1, 1, "nosuch"),
        ("CREATE TOPIC tx AS SELECT nosuch FROM meters", 1, 27, "nosuch"),
        ("CREATE TOPIC tx AS SELECT ts FROM nosuch", 1, 35, "nosuch"),
        ("CREATE TOPIC tx AS DATABASE nodb", 1, 29, "nodb"),
    ],
)
def test_unknown_names_raise_not_found_at_the_statement(
    power: Engine, sql: str, line: int, column: int, names: str
) -> None:
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)")
    with pytest.raises(NotFoundError) as info:
        power.execute(sql)
    err = info.value
    assert names in err.message
    assert (err.line, err.column) == (line, column)
    assert err.sql is not None
    assert names in err.sql


def test_statements_before_an_error_have_run(power: Engine) -> None:
    with pytest.raises(NotFoundError):
        power.execute(
            "CREATE TABLE d1 USING meters TAGS ('x', 1); DROP TABLE nosuch; "
            "CREATE TABLE d2 USING meters TAGS ('y', 1)"
        )
    assert table_names(power) == ["d1"]


def test_no_database_selected(engine: Engine) -> None:
    for sql in ("SHOW TABLES", "CREATE TABLE t (ts TIMESTAMP, a INT)", "SELECT * FROM t"):
        with pytest.raises(SqlError, match="no database selected"):
            engine.execute(sql)
