"""TDengine's information_schema views through a real server, as TDengine's own test
checks them: taosdata/TDengine tests/system-test/7-tmq/ins_topics_test.py, run unchanged
but for its `tdSql.checkData` calls, which become the assertions below."""

from __future__ import annotations

import json

import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import QueryNotAllowed
from tests.live_server import ServerProcess

# ins_topics_test.py's expected `schema` values (checkData(1..3, 4, ...)).
ST_SCHEMA = [
    {"name": "ts", "type": "TIMESTAMP", "length": 8}, {"name": "c1", "type": "INT", "length": 4},
    {"name": "c2", "type": "BOOL", "length": 1}, {"name": "c3", "type": "TINYINT", "length": 1},
    {"name": "c4", "type": "DOUBLE", "length": 8}, {"name": "c5", "type": "NCHAR", "length": 8},
]  # fmt: skip
NT_SCHEMA = [
    {"name": "ts", "type": "TIMESTAMP", "length": 8},
    {"name": "c1", "type": "SMALLINT", "length": 2}, {"name": "c2", "type": "FLOAT", "length": 4},
    {"name": "c3", "type": "VARCHAR", "length": 64}, {"name": "c4", "type": "BIGINT", "length": 8},
]  # fmt: skip
COLUMN_SCHEMA = [
    {"name": "ts", "type": "TIMESTAMP", "length": 8},
    {"name": "c3", "type": "TINYINT", "length": 1}, {"name": "c5", "type": "NCHAR", "length": 8},
    {"name": "t2", "type": "FLOAT", "length": 4},
]  # fmt: skip


@pytest.fixture
def topics(conn: Connection) -> Connection:
    """ins_topics_test.py's `test()` up to its query, statement for statement."""
    conn.execute("create database if not exists db1 vgroups 4 wal_retention_period 3600")
    conn.execute(
        "create table if not exists db1.st(ts timestamp, c1 int, c2 bool, c3 tinyint, "
        "c4 double, c5 nchar(8)) tags(t1 int, t2 float, t3 binary(4))"
    )
    conn.execute(
        "create table if not exists db1.nt(ts timestamp, c1 smallint, c2 float, "
        "c3 binary(64), c4 bigint)"
    )
    conn.execute('create table if not exists db1.st1 using db1.st tags(1, 9.3, "st1")')
    conn.execute("create topic topic_1 as database db1")
    conn.execute("create topic topic_2 with meta as stable db1.st")
    conn.execute("create topic topic_3 as select * from db1.nt")
    conn.execute("create topic topic_4 as select ts,c3,c5,t2 from db1.st")
    for i in range(5, 21):
        conn.execute(f"create topic topic_{i} as select ts,c3,c5,t2 from db1.st")
    conn.execute("create topic if not exists topic_1 as database db1")
    for i in range(5, 21):
        conn.execute(f"drop topic topic_{i}")
    return conn


def test_ins_topics(topics: Connection) -> None:
    rows = topics.execute("select * from information_schema.ins_topics order by topic_name").rows
    assert [r[0] for r in rows] == ["topic_1", "topic_2", "topic_3", "topic_4"]
    assert rows[2][1] == "db1"
    assert rows[2][3] == "create topic topic_3 as select * from db1.nt"
    assert rows[0][4] is None
    assert [json.loads(r[4]) for r in rows[1:]] == [ST_SCHEMA, NT_SCHEMA, COLUMN_SCHEMA]
    assert [(r[5], r[6]) for r in rows] == [
        ("no", "db"), ("yes", "stable"), ("no", "column"), ("no", "column"),
    ]  # fmt: skip


def test_views_follow_the_callers_rights(topics: Connection, server: ServerProcess) -> None:
    topics.execute("create user reader pass 'reader_pw1'")
    as_root = topics.execute("select stable_name, db_name from information_schema.ins_stables")
    assert as_root.rows == [("st", "db1")]
    assert topics.execute("select count(*) from information_schema.ins_tables").rows == [(2,)]
    with connect(server.address, user="reader", password="reader_pw1") as reader:
        assert reader.execute("select * from information_schema.ins_topics").rows == []
        assert reader.execute("select * from information_schema.ins_tables").rows == []
        users = reader.execute("select name from information_schema.ins_users order by name")
        assert users.rows == [("reader",), ("root",)]


def test_unknown_view(topics: Connection) -> None:
    with pytest.raises(QueryNotAllowed, match=r"information_schema\.ins_vnodes .*ins_topics"):
        topics.execute("select * from information_schema.ins_vnodes")
