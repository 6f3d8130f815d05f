"""TDengine's own subscription tests, their DDL and INSERT forms run unchanged against a
real server, consumed by a real consumer and checked as TDengine checks them: the rows a
consumer receives equal the rows the topic's SELECT returns.

Sources (taosdata/TDengine, tests/system-test/7-tmq/):
* tmqCommon.py: `create_database`, `create_stable` (a super table written CREATE TABLE
  ... TAGS), `create_ctable` (ten child tables to a statement),
  `insert_data_interlaceByMultiTbl` (several tables in one INSERT, `now` in a column),
  `insert_data_with_autoCreateTbl` (INSERT ... USING ... TAGS), `drop_ctable`;
* tmqAlterSchema.py: case 1 (ALTER TABLE on the super table while subscribed: add,
  modify, drop columns; add, rename, modify, drop tags; set tag) and case 2 (ALTER TABLE
  on a normal table: add, rename, modify, drop columns).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from tests.client.support import config, drain, rows_of
from tests.live_server import ServerProcess

# tmqCommon.py's schema for create_stable / create_ctable / insert_data_interlaceByMultiTbl.
SCHEMA = (
    "(ts timestamp, c1 int, c2 bigint, c3 double, c4 binary(32), c5 nchar(32), c6 timestamp) "
    "tags (t1 int, t2 bigint, t3 double, t4 binary(32), t5 nchar(32))"
)
START_TS = 1640966400000  # 2022-01-01 00:00:00.000, tmqAlterSchema.py's startTs
CTB_NUM = 12
ROWS_PER_TBL = 6
BATCH_NUM = 3


def create_ctables(conn: Connection, db: str, stb: str, count: int, start: int = 0) -> None:
    """tmqCommon.create_ctable: child tables in statements of ten."""
    sql = "create table"
    for i in range(count):
        tag = "shanghai" if i % 2 == 0 else "changsha" if i % 3 == 0 else "beijing"
        n = i + start
        sql += f" {db}.ctb{n} using {db}.{stb} tags({n}, {n}, {n}, '{tag}', '{tag}')"
        if (i + 1) % 10 == 0 or i == count - 1:
            conn.execute(sql)
            sql = "create table"


def insert_interlaced(conn: Connection, db: str, count: int, rows: int, batch: int) -> None:
    """tmqCommon.insert_data_interlaceByMultiTbl: `batch` rows of each table in turn, every
    table of a round in one INSERT, `now` in c6, signs alternating."""
    done = 0
    while done < rows:
        sql = "insert into "
        for i in range(count):
            sql += f" {db}.ctb{i} values "
            for k in range(done, min(done + batch, rows)):
                sign = 1 if k % 2 == 0 else -1
                sql += (
                    f"({START_TS + k}, {sign * k}, {k}, {sign * k}, "
                    f"'binary_{i}', 'nchar_{k}', now) "
                )
        conn.execute(sql)
        done += batch


def consumed(address: str, topic: str, group: str) -> Counter[tuple[Any, ...]]:
    consumer = Consumer(config(address, group))
    try:
        consumer.subscribe([topic])
        return rows_of(drain(consumer))
    finally:
        consumer.close()


def queried(conn: Connection, sql: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in conn.execute(sql).rows)


@pytest.fixture
def dbx(conn: Connection) -> Connection:
    """tmqCommon's database, super table and child tables, with interlaced rows."""
    conn.execute("drop database if exists dbx")
    conn.execute("create database if not exists dbx vgroups 4 replica 1")
    conn.execute(f"create table if not exists dbx.stb {SCHEMA}")
    create_ctables(conn, "dbx", "stb", CTB_NUM)
    conn.execute("use dbx")
    insert_interlaced(conn, "dbx", CTB_NUM, ROWS_PER_TBL, BATCH_NUM)
    return conn


def test_tmq_common_schema_topics(dbx: Connection, server: ServerProcess) -> None:
    """create_stable + create_ctable + insert_data_interlaceByMultiTbl, then a `select *`
    topic and a filtered one (tmqConsFromTsdb-*-funcNFilter.py's filter shape)."""
    assert sorted(r[0] for r in dbx.execute("show dbx.stables").rows) == ["stb"]
    assert len(dbx.execute("show dbx.tables").rows) == CTB_NUM
    queries = {
        "topic_all": "select * from dbx.stb",
        "topic_filter": "select ts, c1, c4, t4 from dbx.stb where c1 > 0 and t4 = 'shanghai'",
    }
    for name, query in queries.items():
        dbx.execute(f"create topic {name} as {query}")
    everything = queried(dbx, queries["topic_all"])
    assert sum(everything.values()) == CTB_NUM * ROWS_PER_TBL
    assert consumed(server.address, "topic_all", "cgrp_all") == everything
    filtered = queried(dbx, queries["topic_filter"])
    # k > 0 and even (c1 = k), tables 0, 2, 4, ... (shanghai): 6 tables x rows 2, 4
    assert sum(filtered.values()) == 6 * 2
    assert consumed(server.address, "topic_filter", "cgrp_filter") == filtered


def test_auto_create_and_drop_child_tables(conn: Connection, server: ServerProcess) -> None:
    """insert_data_with_autoCreateTbl and drop_ctable."""
    conn.execute("create database if not exists dbt vgroups 2 replica 1")
    conn.execute(f"create table if not exists dbt.stb {SCHEMA}")
    conn.execute("create topic topic_auto as select ts, c1, t1, tbname from dbt.stb")
    sql = "insert into "
    for i in range(3):
        sql += f" dbt.ctb{i} using dbt.stb tags ({i}, {i}, {i}, 'beijing', 'beijing') values "
        sql += " ".join(f"({START_TS + j}, {j}, {j}, {j}, 'b', 'n', now)" for j in range(4))
    conn.execute(sql)
    conn.execute("drop table if exists dbt.ctb9;")
    got = consumed(server.address, "topic_auto", "cgrp_auto")
    as_ms = Counter((round(r[0].timestamp() * 1000), *r[1:]) for r in got.elements())
    assert as_ms == Counter((START_TS + j, j, i, f"ctb{i}") for i in range(3) for j in range(4))


def test_alter_super_table_while_subscribed(dbx: Connection, server: ServerProcess) -> None:
    """tmqAlterSchema.py case 1: ALTER TABLE on the super table between two drains; the
    consumer receives every row the topic's SELECT returns, before and after."""
    query = "select ts, c1, c2, c4 from dbx.stb"
    dbx.execute(f"create topic topic1 as {query}")
    consumer = Consumer(config(server.address, "cgrp1"))
    try:
        consumer.subscribe(["topic1"])
        first = rows_of(drain(consumer))
        assert first == queried(dbx, query)
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
        long = "y" * 30  # fits the widened newc2 only
        dbx.execute(
            f"insert into dbx.ctb0 (ts, c1, c2, c4, newc2) values ({START_TS + 100}, 7, 7, 'x', "
            f"'{long}')"
        )
        second = rows_of(drain(consumer))
        assert first + second == queried(dbx, query)
        (row,) = second.elements()
        assert row[1:] == (7, 7, "x")
    finally:
        consumer.close()
    described = {r[0]: (r[1], r[2]) for r in dbx.execute("describe dbx.stb").rows}
    assert described["newc2"] == ("VARCHAR", 32)
    assert described["newt2"] == ("VARCHAR", 32)
    assert "newt1n" in described
    assert "newc3" not in described


def test_alter_normal_table_while_subscribed(conn: Connection, server: ServerProcess) -> None:
    """tmqAlterSchema.py case 2: a topic on a normal table; ADD, RENAME, MODIFY and DROP
    COLUMN while it is consumed."""
    conn.execute("create database if not exists db1 vgroups 4 replica 1")
    conn.execute(
        "create table db1.ntb (ts timestamp, c1 int, c2 int, c3 binary(20), c4 binary(20))"
    )
    values = " ".join(f"({START_TS + j}, {j}, {-j}, 'a{j}', 'b{j}')" for j in range(10))
    conn.execute(f"insert into db1.ntb values {values}")
    query = "select * from db1.ntb"
    conn.execute(f"create topic topic_ntb as {query}")
    consumer = Consumer(config(server.address, "cgrp_ntb"))
    try:
        consumer.subscribe(["topic_ntb"])
        first = rows_of(drain(consumer))
        assert sum(first.values()) == 10
        for sql in [
            "alter table db1.ntb add column newc1 double",
            "alter table db1.ntb add column newc2 binary(16)",
            "alter table db1.ntb add column newc3 double",
            "alter table db1.ntb rename column newc1 newc1n",
            "alter table db1.ntb modify column newc2 binary(32)",
            "alter table db1.ntb drop column newc3",
        ]:
            conn.execute(sql)
        conn.execute(
            f"insert into db1.ntb values ({START_TS + 10}, 10, -10, 'a10', 'b10', 1.5, 'new')"
        )
        second = rows_of(drain(consumer))
    finally:
        consumer.close()
    # The topic delivers the columns it had when created (docs/sql.md §9.8).
    (row,) = second.elements()
    assert row[1:] == (10, -10, "a10", "b10")
    described = [r[0] for r in conn.execute("describe db1.ntb").rows]
    assert described == ["ts", "c1", "c2", "c3", "c4", "newc1n", "newc2"]
