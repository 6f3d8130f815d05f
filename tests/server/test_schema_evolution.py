"""ALTER STABLE and SET TAG under topics: rows follow the current columns, what a topic
uses cannot change, and tag changes move tables in and out of a stable topic's filter."""

from __future__ import annotations

from typing import Any

import pytest

from sqltopic.errors import AlreadyExistsError, NotFoundError, SchemaInUseError, SqlError
from sqltopic.server.core.engine import Engine
from tests.server.support import blocks, read_vgroups, tabled_rows, vgroups_of


def _wal_ends(engine: Engine) -> dict[int, int]:
    return {v: engine.state.vnode(v).wal.last_version for v in vgroups_of(engine, "power")}


def _read(engine: Engine, topic: str) -> list[tuple[Any, ...]]:
    """(table, *row) of every block of every vgroup, vgroups in order."""
    return [
        r for items in read_vgroups(engine, topic, "power").values() for r in tabled_rows(items)
    ]


def _columns(engine: Engine, topic: str) -> set[tuple[str, ...]]:
    return {
        tuple(b.data.column_names)
        for items in read_vgroups(engine, topic, "power").values()
        for b in blocks(items)
    }


def test_stable_topic_rows_follow_add_and_drop_column(power: Engine) -> None:
    power.execute("""
        CREATE TOPIC whole AS STABLE meters;
        CREATE TABLE d1 USING meters TAGS ('SF', 1);
        INSERT INTO d1 VALUES (1, 1.5, 220, 0.5);
        ALTER STABLE meters ADD COLUMN extra INT;
        INSERT INTO d1 VALUES (2, 2.5, 221, 0.25, 7);
        ALTER STABLE meters DROP COLUMN phase;
        INSERT INTO d1 VALUES (3, 3.5, 222, 8);
        INSERT INTO d1 (ts, extra) VALUES (4, 9);
    """)
    assert _columns(power, "whole") == {("ts", "current", "voltage", "extra")}
    got = [(r[0], r[1].microsecond // 1000, *r[2:]) for r in _read(power, "whole")]
    assert got == [
        ("d1", 1, 1.5, 220, None),
        ("d1", 2, 2.5, 221, 7),
        ("d1", 3, 3.5, 222, 8),
        ("d1", 4, None, None, 9),
    ]
    assert power.execute("SELECT extra FROM meters ORDER BY ts").rows == [(None,), (7,), (8,), (9,)]
    with pytest.raises(SqlError):
        power.execute("SELECT phase FROM meters")


def test_query_topic_keeps_its_columns_after_add_column(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('SF', 1);
        CREATE TOPIC star AS SELECT * FROM meters;
        INSERT INTO d1 VALUES (1, 1.5, 220, 0.5);
        ALTER STABLE meters ADD COLUMN extra INT;
        INSERT INTO d1 VALUES (2, 2.5, 221, 0.25, 7);
    """)
    assert _columns(power, "star") == {("ts", "current", "voltage", "phase", "location", "groupid")}
    assert [r[3] for r in _read(power, "star")] == [220, 221]


@pytest.mark.parametrize(
    ("topic", "alter", "names"),
    [
        ("CREATE TOPIC t AS SELECT * FROM meters", "DROP COLUMN phase", "phase"),
        ("CREATE TOPIC t AS SELECT ts, voltage FROM meters", "DROP COLUMN voltage", "voltage"),
        (
            "CREATE TOPIC t AS SELECT ts FROM meters WHERE voltage > 1",
            "DROP COLUMN voltage",
            "voltage",
        ),
        ("CREATE TOPIC t AS SELECT ts, abs(phase) AS p FROM d1", "DROP COLUMN phase", "phase"),
        (
            "CREATE TOPIC t AS SELECT ts FROM meters WHERE location = 'x'",
            "DROP TAG location",
            "location",
        ),
        ("CREATE TOPIC t AS SELECT ts, groupid FROM d1", "RENAME TAG groupid gid", "groupid"),
        ("CREATE TOPIC t AS STABLE meters WHERE groupid = 2", "DROP TAG groupid", "groupid"),
        ("CREATE TOPIC t AS STABLE meters WHERE groupid = 2", "RENAME TAG groupid g", "groupid"),
        (
            "CREATE TOPIC t AS STABLE meters WHERE lower(location) = 'x'",
            "DROP TAG location",
            "location",
        ),
    ],
)
def test_altering_what_a_topic_uses_is_refused_and_changes_nothing(
    power: Engine, topic: str, alter: str, names: str
) -> None:
    power.execute(
        "CREATE TABLE d1 USING meters TAGS ('x', 1); CREATE TABLE d2 USING meters TAGS ('y', 2)"
    )
    power.execute(topic)
    before = (power.execute("DESCRIBE meters").rows, _wal_ends(power))
    with pytest.raises(SchemaInUseError, match=names) as info:
        power.execute(f"ALTER STABLE meters {alter}")
    assert "topic t " in info.value.message
    assert (power.execute("DESCRIBE meters").rows, _wal_ends(power)) == before
    power.execute("DROP TOPIC t")
    power.execute(f"ALTER STABLE meters {alter}")  # allowed once the topic is gone


def test_unused_columns_and_tags_may_change_under_a_topic(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        CREATE TOPIC q AS SELECT ts, voltage FROM meters WHERE groupid = 1;
        CREATE TOPIC s AS STABLE meters WHERE groupid = 1;
        ALTER STABLE meters DROP COLUMN phase;
        ALTER STABLE meters RENAME TAG location loc;
        ALTER STABLE meters ADD TAG region NCHAR(8);
        INSERT INTO d1 VALUES (1, 1.5, 220);
    """)
    assert [r[2] for r in _read(power, "q")] == [220]
    assert [r[3] for r in _read(power, "s")] == [220]
    power.execute("ALTER STABLE meters DROP TAG loc")
    assert [r[3] for r in _read(power, "s")] == [220]


@pytest.mark.parametrize(
    ("alter", "error"),
    [
        ("ADD COLUMN voltage INT", AlreadyExistsError),
        ("ADD COLUMN location INT", AlreadyExistsError),
        ("ADD TAG current INT", AlreadyExistsError),
        ("ADD COLUMN tbname INT", SqlError),
        ("DROP COLUMN ts", SqlError),
        ("DROP COLUMN nosuch", NotFoundError),
        ("DROP TAG nosuch", NotFoundError),
        ("DROP TAG current", NotFoundError),
        ("DROP COLUMN location", NotFoundError),
        ("RENAME TAG location groupid", AlreadyExistsError),
        ("RENAME TAG location voltage", AlreadyExistsError),
    ],
)
def test_bad_alter_is_refused(power: Engine, alter: str, error: type[SqlError]) -> None:
    before = (power.execute("DESCRIBE meters").rows, _wal_ends(power))
    with pytest.raises(error):
        power.execute(f"ALTER STABLE meters {alter}")
    assert (power.execute("DESCRIBE meters").rows, _wal_ends(power)) == before


def test_the_last_tag_cannot_be_dropped(power: Engine) -> None:
    power.execute("ALTER STABLE meters DROP TAG location")
    with pytest.raises(SqlError, match="tag"):
        power.execute("ALTER STABLE meters DROP TAG groupid")


def test_tag_changes_follow_to_children(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        ALTER STABLE meters ADD TAG region NCHAR(8);
        ALTER STABLE meters RENAME TAG location loc;
        ALTER TABLE d1 SET TAG region = 'east';
        INSERT INTO d1 VALUES (1, 1.5, 220, 0.5);
    """)
    assert power.execute("SELECT loc, groupid, region FROM d1").rows == [("x", 1, "east")]
    power.execute("ALTER STABLE meters DROP TAG groupid")
    assert power.execute("SELECT * FROM meters").columns == [
        "ts", "current", "voltage", "phase", "loc", "region",
    ]  # fmt: skip


def test_set_tag_moves_a_table_in_and_out_of_a_stable_topic(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        CREATE TABLE d2 USING meters TAGS ('y', 2);
        CREATE TOPIC g2 AS STABLE meters WHERE groupid = 2;
        INSERT INTO d1 VALUES (1, 1, 1, 1) d2 VALUES (2, 2, 2, 2);
    """)
    assert {r[0] for r in _read(power, "g2")} == {"d2"}
    positions = {v: power.read_topic("g2", v, 0, 10**6)[1] for v in vgroups_of(power, "power")}
    power.execute("""
        ALTER TABLE d1 SET TAG groupid = 2;
        ALTER TABLE d2 SET TAG groupid = 3;
        INSERT INTO d1 VALUES (3, 3, 3, 3) d2 VALUES (4, 4, 4, 4);
    """)
    later = [
        (row[0], row[3])
        for v, start in positions.items()
        for row in tabled_rows(power.read_topic("g2", v, start, 10**6)[0])
    ]
    assert later == [("d1", 3)]


def test_added_tag_can_filter_a_new_topic(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        CREATE TABLE d2 USING meters TAGS ('y', 2);
        ALTER STABLE meters ADD TAG region NCHAR(8);
        CREATE TOPIC east AS STABLE meters WHERE region = 'east';
        CREATE TOPIC unset AS STABLE meters WHERE region IS NULL;
        INSERT INTO d1 VALUES (1, 1, 1, 1) d2 VALUES (2, 2, 2, 2);
    """)
    assert _read(power, "east") == []
    assert {r[0] for r in _read(power, "unset")} == {"d1", "d2"}
    power.execute("ALTER TABLE d2 SET TAG region = 'east'; INSERT INTO d2 VALUES (3, 3, 3, 3)")
    power.execute(
        "INSERT INTO d3 USING meters (region, groupid) TAGS ('east', 9) VALUES (4, 4, 4, 4)"
    )
    assert {r[0] for r in _read(power, "east")} >= {"d2", "d3"}
    assert [r[3] for r in _read(power, "east") if r[0] == "d3"] == [4]


def test_renamed_tag_keeps_values_for_a_new_topic(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('SF', 1);
        CREATE TABLE d2 USING meters TAGS ('LA', 2);
        ALTER STABLE meters RENAME TAG location city;
        CREATE TOPIC sf AS STABLE meters WHERE city = 'SF';
        INSERT INTO d1 VALUES (1, 1, 1, 1) d2 VALUES (2, 2, 2, 2);
    """)
    assert [r[0] for r in _read(power, "sf")] == ["d1"]


def test_query_topic_filter_on_a_tag_follows_set_tag(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        CREATE TOPIC q AS SELECT ts, voltage, groupid FROM meters WHERE groupid = 2;
        INSERT INTO d1 VALUES (1, 1, 1, 1);
        ALTER TABLE d1 SET TAG groupid = 2;
        INSERT INTO d1 VALUES (2, 2, 2, 2);
    """)
    got = [r[2:] for r in _read(power, "q")]
    assert (2, 2) in got
    assert all(g == 2 for _, g in got)


# --- a dropped column that comes back ---------------------------------------------------


def test_re_added_column_is_null_for_earlier_rows(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        INSERT INTO d1 VALUES (1, 1.5, 220, 0.5);
        ALTER STABLE meters DROP COLUMN voltage;
        ALTER STABLE meters ADD COLUMN voltage INT;
    """)
    assert power.execute("SELECT voltage FROM d1").rows == [(None,)]


def test_re_added_column_of_another_type_reads(power: Engine) -> None:
    power.execute("""
        ALTER STABLE meters ADD COLUMN note VARCHAR(8);
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        CREATE TOPIC whole AS STABLE meters;
        INSERT INTO d1 VALUES (1, 1.5, 220, 0.5, 'abc');
        ALTER STABLE meters DROP COLUMN note;
        ALTER STABLE meters ADD COLUMN note INT;
        INSERT INTO d1 VALUES (2, 2.5, 221, 0.25, 5);
    """)
    assert [r[-1] for r in _read(power, "whole")] == [None, 5]
    assert power.execute("SELECT note FROM d1 ORDER BY ts").rows == [(None,), (5,)]
