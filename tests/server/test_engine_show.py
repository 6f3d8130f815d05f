"""SHOW and DESCRIBE: TDengine's column names, and rows that follow the catalog."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sqltopic.errors import SqlError
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.routing import vgroup_for
from tests.conftest import FakeClock


def _created(clock: FakeClock) -> datetime:
    return datetime.fromtimestamp(clock.now_us / 1_000_000, tz=UTC)


@pytest.fixture
def catalog(engine: Engine, clock: FakeClock) -> Engine:
    engine.execute("""
        CREATE DATABASE power VGROUPS 4 WAL_RETENTION_PERIOD 120;
        CREATE DATABASE other VGROUPS 1 PRECISION 'ns';
        USE power;
        CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
            TAGS (location VARCHAR(64), groupid INT);
        CREATE STABLE kinds (ts TIMESTAMP, b BOOL, u BIGINT UNSIGNED, s BINARY(16), n NCHAR(8))
            TAGS (t TINYINT UNSIGNED);
        CREATE TABLE d1 USING meters TAGS ('SF', 1);
        CREATE TABLE d2 USING meters TAGS ('LA', 2);
        CREATE TABLE ntb (ts TIMESTAMP, c1 INT, c2 VARCHAR(10));
        CREATE TABLE other.o1 (ts TIMESTAMP, x DOUBLE);
        CREATE TOPIC tq AS SELECT ts, voltage FROM meters WHERE voltage > 220;
        CREATE TOPIC ts1 WITH META AS STABLE meters WHERE groupid = 2;
        CREATE TOPIC tdb ONLY META AS DATABASE power;
    """)
    return engine


def test_show_databases(catalog: Engine, clock: FakeClock) -> None:
    result = catalog.execute("SHOW DATABASES")
    assert result.columns == [
        "name", "create_time", "vgroups", "ntables", "precision", "wal_level",
        "wal_fsync_period", "wal_retention_period", "wal_retention_size", "wal_segment_size",
        "wal_roll_period",
    ]  # fmt: skip
    rows = {r[0]: r for r in result.rows}
    assert list(rows) == ["other", "power"]
    power = dict(zip(result.columns, rows["power"], strict=True))
    assert power["create_time"] == _created(clock)
    assert (power["vgroups"], power["ntables"], power["precision"]) == (4, 3, "ms")
    assert (power["wal_level"], power["wal_retention_period"]) == (1, 120)
    other = dict(zip(result.columns, rows["other"], strict=True))
    assert (other["vgroups"], other["ntables"], other["precision"]) == (1, 1, "ns")
    assert (other["wal_retention_period"], other["wal_retention_size"]) == (3600, 0)


def test_show_stables(catalog: Engine, clock: FakeClock) -> None:
    result = catalog.execute("SHOW STABLES")
    assert result.columns == ["stable_name", "db_name", "create_time", "columns", "tags"]
    assert result.rows == [
        ("kinds", "power", _created(clock), 5, 1),
        ("meters", "power", _created(clock), 4, 2),
    ]
    assert catalog.execute("SHOW other.STABLES").rows == []


def test_show_tables(catalog: Engine, clock: FakeClock) -> None:
    result = catalog.execute("SHOW TABLES")
    assert result.columns == [
        "table_name", "db_name", "create_time", "columns", "stable_name", "vgroup_id", "type",
    ]  # fmt: skip
    db = catalog.state.catalog.database("power")
    assert result.rows == [
        ("d1", "power", _created(clock), 4, "meters", vgroup_for(db, "d1"), "CHILD_TABLE"),
        ("d2", "power", _created(clock), 4, "meters", vgroup_for(db, "d2"), "CHILD_TABLE"),
        ("ntb", "power", _created(clock), 3, None, vgroup_for(db, "ntb"), "NORMAL_TABLE"),
    ]
    other = catalog.execute("SHOW other.TABLES").rows
    assert [(r[0], r[1], r[6]) for r in other] == [("o1", "other", "NORMAL_TABLE")]


def test_show_topics(catalog: Engine, clock: FakeClock) -> None:
    result = catalog.execute("SHOW TOPICS")
    assert result.columns == [
        "topic_name",
        "db_name",
        "create_time",
        "sql",
        "type",
        "meta",
        "owner",
    ]
    assert [(r[0], r[1], r[2], r[4], r[5], r[6]) for r in result.rows] == [
        ("tdb", "power", _created(clock), "database", "only", "root"),
        ("tq", "power", _created(clock), "query", "none", "root"),
        ("ts1", "power", _created(clock), "stable", "with", "root"),
    ]
    sql = {r[0]: r[3] for r in result.rows}
    assert sql["tq"] == "CREATE TOPIC tq AS SELECT ts, voltage FROM meters WHERE voltage > 220"


def test_show_users_consumers_subscriptions(catalog: Engine) -> None:
    users = catalog.execute("SHOW USERS")
    assert users.columns == ["name", "super", "create_time"]
    assert [r[:2] for r in users.rows] == [("root", True)]
    consumers = catalog.execute("SHOW CONSUMERS")
    assert consumers.columns == [
        "consumer_id", "consumer_group", "client_id", "user", "fqdn", "status", "topic",
        "up_time", "subscribe_time", "rebalance_time", "parameters", "mode",
    ]  # fmt: skip
    assert consumers.rows == []
    subscriptions = catalog.execute("SHOW SUBSCRIPTIONS")
    assert subscriptions.columns == [
        "topic_name", "consumer_group", "vgroup_id", "consumer_id", "user", "fqdn", "offset",
        "rows", "lag", "mode", "in_flight", "acked", "redelivered", "dead_lettered",
        "lag_rows", "lag_ms", "last_poll", "last_commit",
    ]  # fmt: skip
    assert subscriptions.rows == []


def test_describe(catalog: Engine) -> None:
    stable = catalog.execute("DESCRIBE meters")
    assert stable.columns == ["field", "type", "length", "note"]
    assert stable.rows == [
        ("ts", "TIMESTAMP", 8, ""),
        ("current", "FLOAT", 4, ""),
        ("voltage", "INT", 4, ""),
        ("phase", "FLOAT", 4, ""),
        ("location", "VARCHAR", 64, "TAG"),
        ("groupid", "INT", 4, "TAG"),
    ]
    assert catalog.execute("DESCRIBE d1").rows == stable.rows
    assert catalog.execute("DESCRIBE power.ntb").rows == [
        ("ts", "TIMESTAMP", 8, ""),
        ("c1", "INT", 4, ""),
        ("c2", "VARCHAR", 10, ""),
    ]
    assert catalog.execute("DESCRIBE kinds").rows == [
        ("ts", "TIMESTAMP", 8, ""),
        ("b", "BOOL", 1, ""),
        ("u", "BIGINT UNSIGNED", 8, ""),
        ("s", "VARCHAR", 16, ""),
        ("n", "NCHAR", 8, ""),
        ("t", "TINYINT UNSIGNED", 1, "TAG"),
    ]


def test_show_follows_alter_and_drop(catalog: Engine) -> None:
    catalog.execute(
        "ALTER STABLE meters ADD COLUMN extra DOUBLE; ALTER STABLE meters ADD TAG region NCHAR(4)"
    )
    assert [r[3:] for r in catalog.execute("SHOW STABLES").rows if r[0] == "meters"] == [(5, 3)]
    assert catalog.execute("DESCRIBE d1").rows[4:] == [
        ("extra", "DOUBLE", 8, ""),
        ("location", "VARCHAR", 64, "TAG"),
        ("groupid", "INT", 4, "TAG"),
        ("region", "NCHAR", 4, "TAG"),
    ]
    catalog.execute("DROP TABLE d2; DROP TOPIC tdb")
    assert [r[0] for r in catalog.execute("SHOW TABLES").rows] == ["d1", "ntb"]
    assert [r[0] for r in catalog.execute("SHOW TOPICS").rows] == ["tq", "ts1"]
    shown = {r[0]: r[3] for r in catalog.execute("SHOW DATABASES").rows}
    assert shown["power"] == 2


def test_show_needs_a_database(engine: Engine) -> None:
    with pytest.raises(SqlError, match="no database selected"):
        engine.execute("SHOW STABLES")
    assert engine.execute("SHOW DATABASES").rows == []
    assert engine.execute("SHOW TOPICS").rows == []
