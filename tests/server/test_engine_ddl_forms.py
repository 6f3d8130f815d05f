"""TDengine's other DDL forms on a real engine: a super table written CREATE TABLE ...
TAGS, several child tables in one CREATE TABLE (all or none), ALTER TABLE on super and
normal tables, MODIFY COLUMN/TAG, RENAME COLUMN of a normal table, table options.

The forms are those of TDengine's own subscription tests (tests/system-test/7-tmq/
tmqCommon.py `create_stable`, `create_ctable`; tmqAlterSchema.py), on the schema they use.
"""

from __future__ import annotations

import pytest

from sqltopic.errors import AlreadyExistsError, NotFoundError, SchemaInUseError, SqlError
from sqltopic.server.core.engine import Engine
from tests.server.support import EngineFactory, table_names, vgroups_of

# tmqCommon.py's create_stable schema.
STB = (
    "create table if not exists dbx.stb (ts timestamp, c1 int, c2 bigint, c3 double, "
    "c4 binary(32), c5 nchar(32), c6 timestamp) "
    "tags (t1 int, t2 bigint, t3 double, t4 binary(32), t5 nchar(32))"
)


@pytest.fixture
def dbx(engine: Engine) -> Engine:
    engine.execute("create database if not exists dbx vgroups 4 replica 1; use dbx")
    engine.execute(STB)
    return engine


def _children(n: int, start: int = 0) -> str:
    """One CREATE TABLE for `n` children, as tmqCommon.py's create_ctable writes it."""
    parts = [
        f" dbx.ctb{i} using dbx.stb tags({i}, {i}, {i}, 'shanghai', 'shanghai')"
        for i in range(start, start + n)
    ]
    return "create table" + "".join(parts)


def _describe(engine: Engine, table: str) -> list[tuple[str, str]]:
    """(field, type) of DESCRIBE, a string type with its length: `VARCHAR(32)`."""
    rows = engine.execute(f"DESCRIBE {table}").rows
    return [(r[0], f"{r[1]}({r[2]})" if r[1] in ("VARCHAR", "NCHAR") else r[1]) for r in rows]


def test_create_table_with_tags_is_a_super_table(dbx: Engine) -> None:
    assert [r[0] for r in dbx.execute("SHOW STABLES").rows] == ["stb"]
    assert table_names(dbx) == []
    shown = _describe(dbx, "stb")
    assert shown[:2] == [("ts", "TIMESTAMP"), ("c1", "INT")]
    assert ("t5", "NCHAR(32)") in shown
    dbx.execute(STB)  # IF NOT EXISTS: nothing happens
    with pytest.raises(AlreadyExistsError, match="stb"):
        dbx.execute(STB.replace(" if not exists", ""))


def test_ten_children_in_one_statement(dbx: Engine) -> None:
    dbx.execute(_children(10))
    assert sorted(table_names(dbx)) == sorted(f"ctb{i}" for i in range(10))
    dbx.execute("insert into dbx.ctb3 values (1640966400000, 1, 2, 3.5, 'b', 'n', now)")
    rows = dbx.execute("select tbname, t1, t4, c1 from dbx.stb").rows
    assert [tuple(r) for r in rows] == [("ctb3", 3, "shanghai", 1)]


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ("dbx.ctb0 using dbx.stb tags(0, 0, 0, 'a', 'a')", AlreadyExistsError, "ctb0"),
        ("dbx.ctbx using dbx.stb tags('not a number', 0, 0, 'a', 'a')", SqlError, "t1"),
        ("dbx.ctbx using dbx.nope tags(0)", NotFoundError, "nope"),
        ("dbx.ctb9 using dbx.stb tags(9, 9, 9, 'a', 'a')", AlreadyExistsError, "twice"),
    ],
)
def test_one_bad_child_creates_none(
    dbx: Engine, bad: str, error: type[Exception], message: str
) -> None:
    dbx.execute("create table dbx.ctb0 using dbx.stb tags(0, 0, 0, 'a', 'a')")
    sql = _children(2, start=8) + " " + bad
    versions = {v: dbx.state.vnode(v).wal.last_version for v in vgroups_of(dbx, "dbx")}
    with pytest.raises(error, match=message):
        dbx.execute(sql)
    assert table_names(dbx) == ["ctb0"]
    after = {v: dbx.state.vnode(v).wal.last_version for v in versions}
    assert after == versions, "a refused statement writes nothing"


def test_if_not_exists_applies_to_each_child(dbx: Engine) -> None:
    dbx.execute("create table dbx.ctb0 using dbx.stb tags(0, 0, 0, 'old', 'old')")
    dbx.execute(
        "create table if not exists dbx.ctb0 using dbx.stb tags(5, 5, 5, 'new', 'new') "
        "if not exists dbx.ctb1 using dbx.stb (t1, t4) tags(1, 'one')"
    )
    assert sorted(table_names(dbx)) == ["ctb0", "ctb1"]
    dbx.execute(
        "insert into dbx.ctb0 values (1, 1, 1, 1, 'a', 'a', 1) "
        "dbx.ctb1 values (1, 2, 2, 2, 'b', 'b', 1)"
    )
    tags = {r[0]: tuple(r[1:]) for r in dbx.execute("select tbname, t1, t2, t4 from dbx.stb").rows}
    assert tags == {"ctb0": (0, 0, "old"), "ctb1": (1, None, "one")}


def test_table_options_are_accepted_and_ignored(dbx: Engine) -> None:
    dbx.execute("create table dbx.ntb1 (ts timestamp, c1 int) ttl 10 comment 'readings'")
    dbx.execute("create table dbx.ctb0 using dbx.stb tags(0, 0, 0, 'a', 'a') ttl 1")
    assert sorted(table_names(dbx)) == ["ctb0", "ntb1"]
    assert _describe(dbx, "ntb1") == [("ts", "TIMESTAMP"), ("c1", "INT")]


# --- ALTER TABLE on a super table (tmqAlterSchema.py, case 1) ----------------------------


def test_alter_table_on_a_super_table(dbx: Engine) -> None:
    dbx.execute(_children(1))
    dbx.execute("insert into dbx.ctb0 values (1, 1, 1, 1, 'short', 'n', 1)")
    for sql in [
        "alter table dbx.stb add column newc1 double",
        "alter table dbx.stb add column newc2 binary(16)",
        "alter table dbx.stb add column newc3 double",
        "alter table dbx.stb modify column newc2 binary(32)",
        "alter table dbx.stb drop column newc3",
        "alter table dbx.stb add tag newt1 double",
        "alter table dbx.stb add tag newt2 binary(16)",
        "alter table dbx.stb add tag newt3 double",
        "alter table dbx.stb rename tag newt1 newt1n",
        "alter table dbx.stb modify tag newt2 binary(32)",
        "alter table dbx.stb drop tag newt3",
        "alter table dbx.ctb0 set tag newt2='new tag'",
    ]:
        dbx.execute(sql)
    shown = dict(_describe(dbx, "stb"))
    assert (shown["newc2"], shown["newt2"], shown["newt1n"]) == ("VARCHAR(32)",) * 2 + ("DOUBLE",)
    assert not {"newc3", "newt3", "newt1"} & set(shown)
    long = "x" * 30  # longer than the 16 the column was created with
    dbx.execute(f"insert into dbx.ctb0 (ts, c1, newc2) values (2, 2, '{long}')")
    rows = dbx.execute("select ts, c1, newc2, newt2 from dbx.ctb0 order by ts").rows
    assert [tuple(r[1:]) for r in rows] == [(1, None, "new tag"), (2, long, "new tag")]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("alter table dbx.stb modify column c4 binary(16)", "not longer"),
        ("alter table dbx.stb modify column c1 bigint", "only lengthen a VARCHAR or NCHAR"),
        ("alter table dbx.stb modify column c4 nchar(64)", "cannot become NCHAR"),
        ("alter table dbx.stb modify tag t4 binary(8)", "not longer"),
        ("alter table dbx.stb modify column nope binary(64)", "no column nope"),
        ("alter table dbx.stb rename column c1 c1n", "renames tags of a super table"),
        ("alter table dbx.ctb0 add column c9 int", "child table of stb"),
        ("alter table dbx.nope add column c9 int", "nope"),
    ],
)
def test_alter_refusals(dbx: Engine, sql: str, message: str) -> None:
    dbx.execute(_children(1))
    before = _describe(dbx, "stb")
    with pytest.raises((SqlError, NotFoundError), match=message):
        dbx.execute(sql)
    assert _describe(dbx, "stb") == before


def test_modify_refused_for_a_column_a_topic_uses(dbx: Engine) -> None:
    dbx.execute("create topic t1 as select ts, c4 from dbx.stb")
    with pytest.raises(SchemaInUseError, match="topic t1 uses c4"):
        dbx.execute("alter table dbx.stb modify column c4 binary(64)")
    dbx.execute("alter table dbx.stb modify column c5 nchar(64)")  # unused: fine


# --- ALTER TABLE on a normal table (tmqAlterSchema.py, case 2) ---------------------------


def test_alter_a_normal_table_and_restart(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.execute("create database db1 vgroups 2; use db1")
    engine.execute("create table db1.ntb (ts timestamp, c1 int, c2 int, c3 binary(20))")
    engine.execute("insert into db1.ntb values (1, 1, 1, 'one')")
    for sql in [
        "alter table db1.ntb add column newc1 double",
        "alter table db1.ntb add column newc2 binary(16)",
        "alter table db1.ntb add column newc3 double",
        "alter table db1.ntb rename column newc1 newc1n",
        "alter table db1.ntb modify column newc2 binary(32)",
        "alter table db1.ntb drop column newc3",
        "alter table db1.ntb rename column c1 c1n",
    ]:
        engine.execute(sql)
    engine.execute(
        "insert into db1.ntb values (2, 2, 2, 'two', 2.5, 'thirty-two chars, give or take')"
    )
    expected = [
        ("ts", "TIMESTAMP"), ("c1n", "INT"), ("c2", "INT"), ("c3", "VARCHAR(20)"),
        ("newc1n", "DOUBLE"), ("newc2", "VARCHAR(32)"),
    ]  # fmt: skip
    assert _describe(engine, "db1.ntb") == expected
    query = "select c1n, c3, newc1n, newc2 from db1.ntb order by ts"
    rows = [tuple(r) for r in engine.execute(query).rows]
    assert rows == [(1, "one", None, None), (2, "two", 2.5, "thirty-two chars, give or take")]
    make_engine.close_all()
    again = make_engine()
    assert _describe(again, "db1.ntb") == expected
    assert [tuple(r) for r in again.execute(query).rows] == rows


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("alter table db1.ntb add tag t1 int", "normal table: it has columns, no tags"),
        ("alter table db1.ntb rename column ts ts2", r"first \(timestamp\) column"),
        ("alter table db1.ntb drop column ts", r"first \(timestamp\) column"),
        ("alter table db1.ntb rename column c1 c2", "already has a column or tag c2"),
        ("alter table db1.ntb add column c1 int", "already has a column or tag c1"),
        ("alter table db1.ntb modify column c2 binary(8)", "only lengthen"),
        ("alter table db1.ntb drop column nope", "no column nope"),
    ],
)
def test_normal_table_refusals(engine: Engine, sql: str, message: str) -> None:
    engine.execute("create database db1; use db1")
    engine.execute("create table db1.ntb (ts timestamp, c1 int, c2 int)")
    with pytest.raises((SqlError, NotFoundError, AlreadyExistsError), match=message):
        engine.execute(sql)
    assert _describe(engine, "db1.ntb") == [("ts", "TIMESTAMP"), ("c1", "INT"), ("c2", "INT")]


def test_rename_refused_for_a_column_a_topic_uses(engine: Engine) -> None:
    engine.execute("create database db1; use db1")
    engine.execute("create table db1.ntb (ts timestamp, c1 int, c2 int)")
    engine.execute("create topic t1 as select ts, c1 from db1.ntb")
    with pytest.raises(SchemaInUseError, match="topic t1 uses c1"):
        engine.execute("alter table db1.ntb rename column c1 c9")
    engine.execute("alter table db1.ntb rename column c2 c9")
