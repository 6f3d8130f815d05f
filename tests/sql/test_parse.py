# ruff: noqa: E501
"""SQL text to typed statements, table-driven: one row per statement.

Three tables: PARSES (statement class and field values, for every statement kind and
every SQL example of docs/sql.md and reference/tdengine-tmq.md §a), ROUND_TRIPS (the
dialect's generated text, and that it parses back to the same tree and statement), and
FAILS (error class, line, column and message, also for a bad statement deep in a
script). Then `split_statements` and `parse` over multi-statement scripts.

Rows that expose a known bug are strict xfails whose reason starts with "bug:".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import pytest
import sqlglot
from sqlglot import exp

from sqltopic.errors import SqlError, SqlSyntaxError, UnsupportedStatement
from sqltopic.sql import dialect
from sqltopic.sql import statements as st
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.insert import Insert, InsertPart
from sqltopic.sql.parse import parse, parse_one, split_statements
from sqltopic.sql.statements import Pos, Statement
from sqltopic.sql.types import ColumnType

# --- the examples of the reference, verbatim ---------------------------------------------

# The canonical 8-row multi-table INSERT of the connector examples (reference a.5).
CANONICAL_8_ROWS = """\
INSERT INTO d1001 USING meters TAGS('California.SanFrancisco', 2) VALUES ('2018-10-03 14:38:05.000', 10.30000, 219, 0.31000) ('2018-10-03 14:38:15.000', 12.60000, 218, 0.33000) ('2018-10-03 14:38:16.800', 12.30000, 221, 0.31000)
            d1002 USING meters TAGS('California.SanFrancisco', 3) VALUES ('2018-10-03 14:38:16.650', 10.30000, 218, 0.25000)
            d1003 USING meters TAGS('California.LosAngeles', 2) VALUES ('2018-10-03 14:38:05.500', 11.80000, 221, 0.28000) ('2018-10-03 14:38:16.600', 13.40000, 223, 0.29000)
            d1004 USING meters TAGS('California.LosAngeles', 3) VALUES ('2018-10-03 14:38:05.000', 10.80000, 223, 0.29000) ('2018-10-03 14:38:06.500', 11.50000, 221, 0.35000)"""

# The TMQ examples' INSERT (reference a.5).
TMQ_INSERT = """\
INSERT INTO power.d1001 USING power.meters (groupid, location) TAGS(2, 'California.SanFrancisco')
    VALUES (NOW + 1a, 10.30000, 219, 0.31000) (NOW + 2a, 12.60000, 218, 0.33000) (NOW + 3a, 12.30000, 221, 0.31000)
  power.d1002 USING power.meters (groupid, location) TAGS(3, 'California.SanFrancisco') VALUES (NOW + 1a, 10.30000, 218, 0.25000)"""

# docs/sql.md's two-table INSERT.
SPEC_INSERT = """\
INSERT INTO d1002 USING meters TAGS ('California.SanFrancisco', 3) VALUES (NOW, 10.2, 220, 0.23)
            d1003 USING meters (location) TAGS ('California.LosAngeles') VALUES (NOW + 1s, 11.5, 221, 0.35)"""

# The stable of the connector examples: `groupId` and `BINARY(64)` (reference a.5).
CONNECTOR_STABLE = "CREATE STABLE IF NOT EXISTS power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location BINARY(64), groupId INT)"
METERS_COLUMNS = ["ts TIMESTAMP", "current FLOAT", "voltage INT", "phase FLOAT"]


# --- observing a statement -----------------------------------------------------------------


def _plain(value: object) -> object:
    """A field value in the form the tables spell it."""
    if isinstance(value, st.TableRef):
        return str(value)
    if isinstance(value, st.ColumnDef):
        return f"{value.name} {value.type.sql()}"
    if isinstance(value, st.Value):
        return (value.kind, value.text)
    if isinstance(value, exp.Expression):
        return value.sql(dialect=TDengine)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, ColumnType):
        return value.sql()
    return value


def _part(part: InsertPart) -> dict[str, object]:
    return {
        "table": str(part.table),
        "using": str(part.using) if part.using else None,
        "tag_names": list(part.tag_names) if part.tag_names is not None else None,
        "tags": [(v.kind, v.text) for v in part.tag_values],
        "columns": list(part.columns) if part.columns is not None else None,
        "rows": len(part.rows),
        "first_row": part.rows.row(0),
    }


def observe(stmt: Statement) -> dict[str, object]:
    """Every field of `stmt`, plain; an INSERT also gives `tables`, `rows` (per part),
    `total_rows` and the per-part lists `using`, `tag_names`, `tags`, `columns`,
    `first_row`."""
    out = {f.name: _plain(getattr(stmt, f.name)) for f in dataclasses.fields(stmt)}
    if isinstance(stmt, Insert):
        parts = [_part(p) for p in stmt.parts]
        out["parts"] = parts
        for key in ("using", "tag_names", "tags", "columns", "rows", "first_row"):
            out[key] = [p[key] for p in parts]
        out["tables"] = [p["table"] for p in parts]
        out["total_rows"] = sum(len(p.rows) for p in stmt.parts)
    if isinstance(stmt, st.CreateTables):
        out["tables"] = [observe(t) for t in stmt.tables]
    return out


# --- 1. PARSES -------------------------------------------------------------------------

ParseRow = tuple[str, type[Statement], Mapping[str, object]]

# fmt: off
PARSES: list[ParseRow | pytest.ParameterSet] = [
    # CREATE / ALTER / DROP DATABASE, USE
    ("CREATE DATABASE IF NOT EXISTS power VGROUPS 4 PRECISION 'ms' WAL_LEVEL 2", st.CreateDatabase, {"name": "power", "if_not_exists": True, "options": {"VGROUPS": 4, "PRECISION": "ms", "WAL_LEVEL": 2}}),
    ("CREATE DATABASE power VGROUPS 4", st.CreateDatabase, {"name": "power", "if_not_exists": False, "options": {"VGROUPS": 4}}),
    ("CREATE DATABASE power", st.CreateDatabase, {"name": "power", "options": {}}),
    ("CREATE DATABASE d PRECISION 'us' WAL_FSYNC_PERIOD 3000 WAL_RETENTION_PERIOD 3600 WAL_RETENTION_SIZE 1024 WAL_SEGMENT_SIZE 4096 WAL_ROLL_PERIOD 60", st.CreateDatabase, {"options": {"PRECISION": "us", "WAL_FSYNC_PERIOD": 3000, "WAL_RETENTION_PERIOD": 3600, "WAL_RETENTION_SIZE": 1024, "WAL_SEGMENT_SIZE": 4096, "WAL_ROLL_PERIOD": 60}}),
    ("CREATE DATABASE d PRECISION \"ns\"", st.CreateDatabase, {"options": {"PRECISION": "ns"}}),
    ("CREATE DATABASE power PRECISION 'ms' KEEP 3650 DURATION 10 BUFFER 16", st.CreateDatabase, {"name": "power", "options": {"PRECISION": "ms", "KEEP": 3650, "DURATION": 10, "BUFFER": 16}}),
    ("create database if not exists db vgroups 10 buffer 10", st.CreateDatabase, {"name": "db", "if_not_exists": True, "options": {"VGROUPS": 10, "BUFFER": 10}}),
    ("create database db vgroups 4 replica 1 wal_retention_period 3600", st.CreateDatabase, {"name": "db", "options": {"VGROUPS": 4, "REPLICA": 1, "WAL_RETENTION_PERIOD": 3600}}),
    ("CREATE DATABASE d KEEP 3650d,3650d DURATION 10d", st.CreateDatabase, {"options": {"KEEP": "3650d,3650d", "DURATION": "10d"}}),
    ("create database db wal_retention_period -1 wal_retention_size -1", st.CreateDatabase, {"name": "db", "options": {"WAL_RETENTION_PERIOD": -1, "WAL_RETENTION_SIZE": -1}}),
    ("CREATE DATABASE d WAL_RETENTION_PERIOD -1 WAL_RETENTION_SIZE -1 WAL_ROLL_PERIOD 10 WAL_SEGMENT_SIZE 20", st.CreateDatabase, {"options": {"WAL_RETENTION_PERIOD": -1, "WAL_RETENTION_SIZE": -1, "WAL_ROLL_PERIOD": 10, "WAL_SEGMENT_SIZE": 20}}),
    ("ALTER DATABASE power WAL_LEVEL 1", st.AlterDatabase, {"name": "power", "options": {"WAL_LEVEL": 1}}),
    ("ALTER DATABASE Power WAL_FSYNC_PERIOD 100 WAL_RETENTION_PERIOD 7200 WAL_RETENTION_SIZE 1024 WAL_SEGMENT_SIZE 64 WAL_ROLL_PERIOD 30", st.AlterDatabase, {"name": "power", "options": {"WAL_FSYNC_PERIOD": 100, "WAL_RETENTION_PERIOD": 7200, "WAL_RETENTION_SIZE": 1024, "WAL_SEGMENT_SIZE": 64, "WAL_ROLL_PERIOD": 30}}),
    ("ALTER DATABASE power WAL_RETENTION_PERIOD -1", st.AlterDatabase, {"options": {"WAL_RETENTION_PERIOD": -1}}),
    ("DROP DATABASE power", st.DropDatabase, {"name": "power", "if_exists": False}),
    ("DROP DATABASE IF EXISTS power", st.DropDatabase, {"name": "power", "if_exists": True}),
    ("USE power", st.Use, {"name": "power"}),
    ("use `Power`", st.Use, {"name": "power"}),
    # SHOW, DESCRIBE
    ("SHOW DATABASES", st.Show, {"what": "databases", "db": None}),
    ("SHOW STABLES", st.Show, {"what": "stables", "db": None}),
    ("SHOW TABLES", st.Show, {"what": "tables", "db": None}),
    ("SHOW power.TABLES", st.Show, {"what": "tables", "db": "power"}),
    ("show Power.stables", st.Show, {"what": "stables", "db": "power"}),
    ("SHOW `power`.TABLES", st.Show, {"what": "tables", "db": "power"}),
    ("SHOW TOPICS", st.Show, {"what": "topics", "db": None}),
    ("SHOW CONSUMERS", st.Show, {"what": "consumers"}),
    ("SHOW SUBSCRIPTIONS", st.Show, {"what": "subscriptions"}),
    ("SHOW USERS", st.Show, {"what": "users"}),
    ("show topics", st.Show, {"what": "topics"}),
    ("DESCRIBE t", st.Describe, {"table": "t"}),
    ("DESCRIBE power.meters", st.Describe, {"table": "power.meters"}),
    ("desc Power.D1001", st.Describe, {"table": "power.d1001"}),
    # CREATE STABLE: docs/sql.md, the data-model doc, the connector examples, taosBenchmark
    ("CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location VARCHAR(64), groupid INT)", st.CreateStable, {"table": "meters", "if_not_exists": False, "columns": METERS_COLUMNS, "tags": ["location VARCHAR(64)", "groupid INT"]}),
    ("CREATE STABLE IF NOT EXISTS power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location VARCHAR(64), groupid INT)", st.CreateStable, {"table": "power.meters", "if_not_exists": True}),
    ("CREATE STABLE meters (ts timestamp, current float, voltage int, phase float) TAGS (location varchar(64), group_id int)", st.CreateStable, {"table": "meters", "columns": METERS_COLUMNS, "tags": ["location VARCHAR(64)", "group_id INT"]}),
    (CONNECTOR_STABLE, st.CreateStable, {"table": "power.meters", "if_not_exists": True, "columns": METERS_COLUMNS, "tags": ["location VARCHAR(64)", "groupid INT"]}),
    ("CREATE STABLE meters (ts TIMESTAMP, current float, voltage int, phase float) TAGS (groupid int, location binary(16))", st.CreateStable, {"tags": ["groupid INT", "location VARCHAR(16)"]}),
    ("create stable IF not exists Power.Meters (TS Timestamp, Current Float) tags (Location Varchar(64))", st.CreateStable, {"table": "power.meters", "columns": ["ts TIMESTAMP", "current FLOAT"], "tags": ["location VARCHAR(64)"]}),
    ("CREATE STABLE `Power`.`My Meters` (`TS` TIMESTAMP, `c 1` INT) TAGS (`T` INT)", st.CreateStable, {"table": "power.my meters", "columns": ["ts TIMESTAMP", "c 1 INT"], "tags": ["t INT"]}),
    ("CREATE STABLE s (ts TIMESTAMP, a BOOL, b BOOLEAN, c TINYINT, d SMALLINT, e INTEGER, f BIGINT, g DOUBLE, h NCHAR(8), i BINARY(3)) TAGS (t INT)", st.CreateStable, {"columns": ["ts TIMESTAMP", "a BOOL", "b BOOL", "c TINYINT", "d SMALLINT", "e INT", "f BIGINT", "g DOUBLE", "h NCHAR(8)", "i VARCHAR(3)"]}),
    ("CREATE STABLE s (ts TIMESTAMP, a TINYINT UNSIGNED, b smallint unsigned, c INT  UNSIGNED, d BIGINT UNSIGNED) TAGS (t NCHAR ( 10 ))", st.CreateStable, {"columns": ["ts TIMESTAMP", "a TINYINT UNSIGNED", "b SMALLINT UNSIGNED", "c INT UNSIGNED", "d BIGINT UNSIGNED"], "tags": ["t NCHAR(10)"]}),
    ("CREATE STABLE tags (ts TIMESTAMP, tags INT) TAGS (stable INT)", st.CreateStable, {"table": "tags", "columns": ["ts TIMESTAMP", "tags INT"], "tags": ["stable INT"]}),
    # CREATE TABLE: child tables with and without a tag list, normal tables
    ("CREATE TABLE d1001 USING meters TAGS ('California.SanFrancisco', 2)", st.CreateTable, {"table": "d1001", "using": "meters", "tag_names": None, "tag_values": [("string", "California.SanFrancisco"), ("number", "2")], "columns": [], "if_not_exists": False}),
    ("CREATE TABLE IF NOT EXISTS power.d1001 USING power.meters TAGS ('California.SanFrancisco', 2)", st.CreateTable, {"table": "power.d1001", "using": "power.meters", "if_not_exists": True}),
    ('CREATE TABLE d1001 USING meters (location, group_id) TAGS ("California.SanFrancisco", 2)', st.CreateTable, {"table": "d1001", "using": "meters", "tag_names": ["location", "group_id"], "tag_values": [("string", "California.SanFrancisco"), ("number", "2")]}),
    ("CREATE TABLE `D1001` USING `Meters` (`Location`) TAGS (\"x\")", st.CreateTable, {"table": "d1001", "using": "meters", "tag_names": ["location"], "tag_values": [("string", "x")]}),
    ("CREATE TABLE c USING s TAGS (true, NULL, -1.5, 'it''s', \"a;b\", FALSE, +2, 1e3)", st.CreateTable, {"tag_values": [("bool", "true"), ("null", "NULL"), ("number", "-1.5"), ("string", "it's"), ("string", "a;b"), ("bool", "false"), ("number", "+2"), ("number", "1e3")]}),
    ("CREATE TABLE c USING s TAGS (NOW, 1538548685000, '2018-10-03 14:38:05.000')", st.CreateTable, {"tag_values": [("now", "NOW"), ("number", "1538548685000"), ("string", "2018-10-03 14:38:05.000")]}),
    ("CREATE TABLE c USING s TAGS (NOW + 1s)", st.CreateTable, {"tag_values": [("now", "NOW+1s")]}),
    ("CREATE TABLE c USING s (t1, t2) TAGS (NOW+1a, NOW - 2d)", st.CreateTable, {"tag_values": [("now", "NOW+1a"), ("now", "NOW-2d")]}),
    ("CREATE TABLE c USING s TAGS ('a\\'b')", st.CreateTable, {"tag_values": [("string", "a'b")]}),
    ('CREATE TABLE c USING s TAGS ("say ""hi""")', st.CreateTable, {"tag_values": [("string", 'say "hi"')]}),
    ("CREATE TABLE c USING s TAGS (now(), TODAY(), NOW ( ))", st.CreateTable, {"tag_values": [("now", "NOW"), ("now", "TODAY()"), ("now", "NOW")]}),
    ("CREATE TABLE ntb (ts TIMESTAMP, c1 INT)", st.CreateTable, {"table": "ntb", "using": None, "columns": ["ts TIMESTAMP", "c1 INT"], "tag_values": []}),
    ("CREATE TABLE d1003 (ts timestamp, current float, voltage int, phase float, location varchar(64), group_id int)", st.CreateTable, {"table": "d1003", "columns": [*METERS_COLUMNS, "location VARCHAR(64)", "group_id INT"]}),
    ("CREATE TABLE IF NOT EXISTS Power.NTB (TS TIMESTAMP, C1 NCHAR(4))", st.CreateTable, {"table": "power.ntb", "if_not_exists": True, "columns": ["ts TIMESTAMP", "c1 NCHAR(4)"]}),
    # ALTER STABLE (every action), ALTER TABLE ... SET TAG
    ("ALTER STABLE meters ADD COLUMN c INT", st.AlterStable, {"table": "meters", "action": "add_column", "name": "c", "type": "INT", "new_name": None}),
    ("ALTER STABLE power.meters ADD COLUMN note VARCHAR(100)", st.AlterStable, {"table": "power.meters", "action": "add_column", "name": "note", "type": "VARCHAR(100)"}),
    ("ALTER STABLE meters DROP COLUMN c", st.AlterStable, {"action": "drop_column", "name": "c", "type": None, "new_name": None}),
    ("ALTER STABLE meters ADD TAG t VARCHAR(16)", st.AlterStable, {"action": "add_tag", "name": "t", "type": "VARCHAR(16)"}),
    ("ALTER STABLE meters ADD TAG t2 int unsigned", st.AlterStable, {"action": "add_tag", "name": "t2", "type": "INT UNSIGNED"}),
    ("ALTER STABLE meters DROP TAG t", st.AlterStable, {"action": "drop_tag", "name": "t", "type": None}),
    ("ALTER STABLE meters RENAME TAG a b", st.AlterStable, {"action": "rename_tag", "name": "a", "new_name": "b", "type": None}),
    ("alter stable Meters rename tag GroupId Group_Id", st.AlterStable, {"table": "meters", "action": "rename_tag", "name": "groupid", "new_name": "group_id"}),
    ("ALTER TABLE d1001 SET TAG groupid = 3", st.SetTag, {"table": "d1001", "tag": "groupid", "value": ("number", "3")}),
    ("ALTER TABLE power.d1001 SET TAG location='California.LosAngeles'", st.SetTag, {"table": "power.d1001", "tag": "location", "value": ("string", "California.LosAngeles")}),
    ("alter table D1001 set tag GroupId = -3", st.SetTag, {"table": "d1001", "tag": "groupid", "value": ("number", "-3")}),
    ("ALTER TABLE d SET TAG t = NULL", st.SetTag, {"value": ("null", "NULL")}),
    ("ALTER TABLE d SET TAG t = TRUE", st.SetTag, {"value": ("bool", "true")}),
    ("ALTER TABLE d SET TAG t = NOW", st.SetTag, {"value": ("now", "NOW")}),
    ("ALTER TABLE d SET TAG t = NOW + 1s", st.SetTag, {"value": ("now", "NOW+1s")}),
    # DROP TABLE / STABLE
    ("DROP TABLE t", st.DropTable, {"table": "t", "stable": False, "if_exists": False}),
    ("DROP TABLE IF EXISTS power.t", st.DropTable, {"table": "power.t", "stable": False, "if_exists": True}),
    ("DROP STABLE s", st.DropTable, {"table": "s", "stable": True, "if_exists": False}),
    ("drop stable if exists Power.Meters", st.DropTable, {"table": "power.meters", "stable": True, "if_exists": True}),
    # INSERT: every form
    ("INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, 218, 0.33)", Insert, {"tables": ["d1001"], "rows": [2], "using": [None], "columns": [None], "first_row": [("1538548685000", "10.3", "219", "0.31")]}),
    ("INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31)", Insert, {"tables": ["d1001"], "rows": [1]}),
    (SPEC_INSERT, Insert, {"tables": ["d1002", "d1003"], "rows": [1, 1], "using": ["meters", "meters"], "tag_names": [None, ["location"]], "tags": [[("string", "California.SanFrancisco"), ("number", "3")], [("string", "California.LosAngeles")]], "first_row": [("NOW", "10.2", "220", "0.23"), ("NOW + 1s", "11.5", "221", "0.35")]}),
    ("INSERT INTO d1001 (ts, current) VALUES (1538548685000, 10.3)", Insert, {"tables": ["d1001"], "columns": [["ts", "current"]], "rows": [1]}),
    ('INSERT INTO d1001 (ts, current, voltage, phase) VALUES ("2018-10-03 14:38:05", 10.3, 219, 0.31)', Insert, {"columns": [["ts", "current", "voltage", "phase"]], "first_row": [('"2018-10-03 14:38:05"', "10.3", "219", "0.31")]}),
    ('INSERT INTO d1001 (ts, current) VALUES ("2018-10-03 14:38:05", 22)', Insert, {"columns": [["ts", "current"]], "rows": [1]}),
    ("INSERT INTO meters (tbname, ts, current, voltage, phase, location, groupid) VALUES ('d1001', 1538548685000, 10.2, 220, 0.23, 'California.SanFrancisco', 2)", Insert, {"tables": ["meters"], "using": [None], "columns": [["tbname", "ts", "current", "voltage", "phase", "location", "groupid"]], "rows": [1]}),
    ('INSERT INTO meters (tbname, ts, current, voltage, phase, location, group_id) VALUES ("d1001", "2018-10-03 14:38:05", 10.2, 220, 0.23, "California.SanFrancisco", 2)', Insert, {"tables": ["meters"], "columns": [["tbname", "ts", "current", "voltage", "phase", "location", "group_id"]], "first_row": [('"d1001"', '"2018-10-03 14:38:05"', "10.2", "220", "0.23", '"California.SanFrancisco"', "2")]}),
    ('INSERT INTO d1002 USING meters TAGS ("California.SanFrancisco", 2) VALUES (NOW, 10.2, 219, 0.32)', Insert, {"tables": ["d1002"], "using": ["meters"], "tags": [[("string", "California.SanFrancisco"), ("number", "2")]], "rows": [1]}),
    ('INSERT INTO d1005 USING meters (location) TAGS ("California.SanFrancisco") VALUES ("2018-10-04 14:38:07", 10.15, 217, 0.33)', Insert, {"tables": ["d1005"], "using": ["meters"], "tag_names": [["location"]], "rows": [1]}),
    (CANONICAL_8_ROWS, Insert, {"tables": ["d1001", "d1002", "d1003", "d1004"], "rows": [3, 1, 2, 2], "total_rows": 8, "using": ["meters"] * 4, "tags": [[("string", "California.SanFrancisco"), ("number", "2")], [("string", "California.SanFrancisco"), ("number", "3")], [("string", "California.LosAngeles"), ("number", "2")], [("string", "California.LosAngeles"), ("number", "3")]]}),
    (TMQ_INSERT, Insert, {"tables": ["power.d1001", "power.d1002"], "rows": [3, 1], "using": ["power.meters", "power.meters"], "tag_names": [["groupid", "location"], ["groupid", "location"]], "tags": [[("number", "2"), ("string", "California.SanFrancisco")], [("number", "3"), ("string", "California.SanFrancisco")]], "first_row": [("NOW + 1a", "10.30000", "219", "0.31000"), ("NOW + 1a", "10.30000", "218", "0.25000")]}),
    ("insert into Power.D1001 values (1, 2)", Insert, {"tables": ["power.d1001"], "rows": [1]}),
    # SELECT (ad hoc)
    ("SELECT ts, current FROM power.meters WHERE voltage > 220", st.Select, {"tree": "SELECT ts, current FROM power.meters WHERE voltage > 220"}),
    ("select * from Meters", st.Select, {"tree": "SELECT * FROM Meters"}),
    ("SELECT 1 UNION SELECT 2", st.Select, {"tree": "SELECT 1 UNION SELECT 2"}),
    ("WITH a AS (SELECT 1) SELECT * FROM a", st.Select, {"tree": "WITH a AS (SELECT 1) SELECT * FROM a"}),
    # CREATE TOPIC: query / stable / database, WITH META / ONLY META, IF NOT EXISTS
    ("CREATE TOPIC IF NOT EXISTS t AS SELECT ts, current, voltage, location FROM power.meters WHERE voltage > 220", st.CreateTopic, {"name": "t", "kind": "query", "if_not_exists": True, "meta": "none", "query_sql": "SELECT ts, current, voltage, location FROM power.meters WHERE voltage > 220", "target": None, "db": None, "where": None}),
    ("CREATE TOPIC overvoltage AS SELECT ts, current FROM power.meters WHERE voltage > 220", st.CreateTopic, {"name": "overvoltage", "kind": "query", "if_not_exists": False}),
    ("CREATE TOPIC IF NOT EXISTS topic_meters AS SELECT ts, current, voltage, phase, groupid, location FROM meters", st.CreateTopic, {"name": "topic_meters", "kind": "query", "query": "SELECT ts, current, voltage, phase, groupid, location FROM meters"}),
    ("Create Topic `My Topic` As Select * From `Power`.`Meters`", st.CreateTopic, {"name": "my topic", "kind": "query", "query_sql": "SELECT * FROM `Power`.`Meters`"}),
    ("CREATE TOPIC t AS STABLE power.meters", st.CreateTopic, {"kind": "stable", "meta": "none", "target": "power.meters", "where": None, "where_sql": None, "query": None}),
    ("CREATE TOPIC t AS STABLE power.meters WHERE groupid = 2", st.CreateTopic, {"kind": "stable", "target": "power.meters", "where_sql": "groupid = 2"}),
    ("CREATE TOPIC t WITH META AS STABLE power.meters WHERE groupid = 2", st.CreateTopic, {"kind": "stable", "meta": "with", "where": "groupid = 2"}),
    ("CREATE TOPIC IF NOT EXISTS t WITH META AS STABLE power.meters", st.CreateTopic, {"kind": "stable", "meta": "with", "if_not_exists": True, "where": None}),
    ("CREATE TOPIC t ONLY META AS STABLE power.meters WHERE groupid = 2", st.CreateTopic, {"kind": "stable", "meta": "only", "where_sql": "groupid = 2"}),
    ("CREATE TOPIC t ONLY META AS STABLE meters", st.CreateTopic, {"kind": "stable", "meta": "only", "target": "meters", "where": None}),
    ("create topic T with meta as stable Power.Meters where tbname > 'a' and abs(t1) > 0", st.CreateTopic, {"name": "t", "target": "power.meters", "where_sql": "tbname > 'a' AND ABS(t1) > 0"}),
    # the topics of TDengine's own tests (reference a.3)
    ("create topic t1 as select ts, c3 from stb", st.CreateTopic, {"name": "t1", "kind": "query", "query_sql": "SELECT ts, c3 FROM stb"}),
    ("create topic t2 as select * from ctb0", st.CreateTopic, {"kind": "query", "query_sql": "SELECT * FROM ctb0"}),
    ("create topic t3 as select ts, abs(c1), sin(c2) from ntb0", st.CreateTopic, {"kind": "query", "query_sql": "SELECT ts, ABS(c1), SIN(c2) FROM ntb0"}),
    ("create topic t4 as select ts from m where c1 % 7 == 0", st.CreateTopic, {"query_sql": "SELECT ts FROM m WHERE c1 % 7 = 0"}),
    ('create topic t5 as select ts, a from m where ts > "2017-08-12 18:25:58.128Z" and sin(a) > 0.5', st.CreateTopic, {"query_sql": "SELECT ts, a FROM m WHERE ts > '2017-08-12 18:25:58.128Z' AND SIN(a) > 0.5"}),
    ("create topic t6 as stable stb where t1 > 0 and t1 < 0", st.CreateTopic, {"kind": "stable", "target": "stb", "where_sql": "t1 > 0 AND t1 < 0"}),
    ("create topic t7 as stable stb where 1 > 0", st.CreateTopic, {"where_sql": "1 > 0"}),
    ("create topic t8 as stable stb where 2 > 1", st.CreateTopic, {"where_sql": "2 > 1"}),
    ("create topic t9 as stable stb where false", st.CreateTopic, {"where_sql": "FALSE"}),
    ("create topic t10 as stable stb where tbname is not null", st.CreateTopic, {"where_sql": "NOT tbname IS NULL"}),
    ("create topic t11 as stable dbt.stb where t4 > t3", st.CreateTopic, {"target": "dbt.stb", "where_sql": "t4 > t3"}),
    ("create topic t12 as stable dbt.stb where t4 = 'beijing'", st.CreateTopic, {"where_sql": "t4 = 'beijing'"}),
    ("CREATE TOPIC t AS DATABASE power", st.CreateTopic, {"kind": "database", "meta": "none", "db": "power", "target": None, "query": None}),
    ("CREATE TOPIC t WITH META AS DATABASE power", st.CreateTopic, {"kind": "database", "meta": "with", "db": "power"}),
    ("CREATE TOPIC IF NOT EXISTS t ONLY META AS DATABASE power", st.CreateTopic, {"kind": "database", "meta": "only", "if_not_exists": True, "db": "power"}),
    ("Create Topic T only meta As Database P", st.CreateTopic, {"name": "t", "kind": "database", "meta": "only", "db": "p"}),
    ("CREATE TOPIC topic AS DATABASE stable", st.CreateTopic, {"name": "topic", "db": "stable"}),
    ("CREATE TOPIC `select` AS DATABASE `database`", st.CreateTopic, {"name": "select", "db": "database"}),
    # DROP TOPIC, DROP CONSUMER GROUP
    ("DROP TOPIC t", st.DropTopic, {"name": "t", "if_exists": False, "force": False}),
    ("DROP TOPIC IF EXISTS t", st.DropTopic, {"name": "t", "if_exists": True, "force": False}),
    ("DROP TOPIC FORCE t", st.DropTopic, {"name": "t", "if_exists": False, "force": True}),
    ("DROP TOPIC IF EXISTS FORCE t", st.DropTopic, {"name": "t", "if_exists": True, "force": True}),
    ("drop topic if exists force `T`", st.DropTopic, {"name": "t", "if_exists": True, "force": True}),
    ("DROP CONSUMER GROUP g ON t", st.DropConsumerGroup, {"group": "g", "topic": "t", "if_exists": False, "force": False}),
    ("DROP CONSUMER GROUP IF EXISTS g ON t", st.DropConsumerGroup, {"if_exists": True, "force": False}),
    ("DROP CONSUMER GROUP FORCE g ON t", st.DropConsumerGroup, {"group": "g", "if_exists": False, "force": True}),
    ("DROP CONSUMER GROUP IF EXISTS FORCE g ON t", st.DropConsumerGroup, {"group": "g", "topic": "t", "if_exists": True, "force": True}),
    ("drop consumer group if exists force G1 on Topic_Meters", st.DropConsumerGroup, {"group": "g1", "topic": "topic_meters", "if_exists": True, "force": True}),
    # users and rights
    ("CREATE USER u PASS 'secret'", st.CreateUser, {"name": "u", "password": "secret"}),
    ('CREATE USER `Bob` PASS "S3cret"', st.CreateUser, {"name": "bob", "password": "S3cret"}),
    ("ALTER USER u PASS 'new'", st.AlterUser, {"name": "u", "password": "new"}),
    ("DROP USER u", st.DropUser, {"name": "u"}),
    ("GRANT SUBSCRIBE ON t TO u", st.Grant, {"topic": "t", "user": "u", "revoke": False}),
    ("grant subscribe on Topic_Meters to Bob", st.Grant, {"topic": "topic_meters", "user": "bob", "revoke": False}),
    ("REVOKE SUBSCRIBE ON t FROM u", st.Grant, {"topic": "t", "user": "u", "revoke": True}),
    ("GRANT READ ON power.* TO alice", st.GrantRights, {"rights": ["read"], "db": "power", "table": None, "user": "alice", "revoke": False}),
    ("grant read, write on Power.Meters to Bob", st.GrantRights, {"rights": ["read", "write"], "db": "power", "table": "meters", "user": "bob"}),
    ("GRANT ALL ON *.* TO u", st.GrantRights, {"rights": ["read", "write"], "db": None, "table": None}),
    ("GRANT ALL PRIVILEGES ON d.t TO u", st.GrantRights, {"rights": ["read", "write"], "db": "d", "table": "t"}),
    ("GRANT WRITE ON power.meters WITH groupid = 2 AND location = 'x' TO u", st.GrantRights, {"rights": ["write"], "condition_sql": "groupid = 2 AND location = 'x'"}),
    ("REVOKE WRITE, READ ON d.* FROM u", st.GrantRights, {"rights": ["read", "write"], "db": "d", "table": None, "revoke": True}),
    ("SHOW USER PRIVILEGES", st.Show, {"what": "user privileges"}),
    # dnodes and vgroups (TDengine's forms)
    ("CREATE DNODE 'h1.example.com:6031'", st.CreateDnode, {"endpoint": "h1.example.com:6031"}),
    ('create dnode "10.0.0.5:6030"', st.CreateDnode, {"endpoint": "10.0.0.5:6030"}),
    ("CREATE DNODE h1.example.com PORT 6031", st.CreateDnode, {"endpoint": "h1.example.com:6031"}),
    ("CREATE DNODE localhost PORT 7000", st.CreateDnode, {"endpoint": "localhost:7000"}),
    ("DROP DNODE 3", st.DropDnode, {"dnode": 3}),
    ("drop dnode 'h1:6031'", st.DropDnode, {"dnode": "h1:6031"}),
    ("SHOW DNODES", st.Show, {"what": "dnodes", "db": None}),
    ("show vgroups", st.Show, {"what": "vgroups", "db": None}),
    ("SHOW Power.VGROUPS", st.Show, {"what": "vgroups", "db": "power"}),
]
# fmt: on


def _param_id(sql: str) -> str:
    return sql if len(sql) <= 60 else sql[:57] + "..."


@pytest.mark.parametrize(("sql", "cls", "fields"), PARSES)
def test_parses(sql: str, cls: type[Statement], fields: Mapping[str, object]) -> None:
    (stmt,) = parse(sql)
    assert type(stmt) is cls
    assert stmt.sql == sql
    assert stmt.pos == Pos(1, 1)
    seen = observe(stmt)
    assert {k: seen[k] for k in fields} == fields


def test_parse_one_takes_a_statement_and_its_position() -> None:
    stmt = parse_one("SHOW TOPICS", Pos(7, 5))
    assert stmt == st.Show(sql="SHOW TOPICS", pos=Pos(7, 5), what="topics")


def test_a_topic_query_is_the_select_tree() -> None:
    (stmt,) = parse("CREATE TOPIC t AS SELECT ts, abs(current) AS a FROM m WHERE voltage > 220")
    assert isinstance(stmt, st.CreateTopic)
    assert isinstance(stmt.query, exp.Select)
    assert [e.alias_or_name for e in stmt.query.expressions] == ["ts", "a"]


def test_a_stable_topic_where_is_the_condition_tree() -> None:
    (stmt,) = parse("CREATE TOPIC t AS STABLE m WHERE groupid = 2 AND location = 'x'")
    assert isinstance(stmt, st.CreateTopic)
    assert isinstance(stmt.where, exp.And)
    assert stmt.where_sql == "groupid = 2 AND location = 'x'"


# --- 2. ROUND_TRIPS ------------------------------------------------------------------------

# fmt: off
ROUND_TRIPS: list[tuple[str, str] | pytest.ParameterSet] = [
    ("create database if not exists power vgroups 4 precision 'ms' wal_level 2", "CREATE DATABASE IF NOT EXISTS power VGROUPS 4 PRECISION 'ms' WAL_LEVEL 2"),
    ("CREATE DATABASE power PRECISION \"ms\" KEEP 3650 DURATION 10 BUFFER 16", "CREATE DATABASE power PRECISION 'ms' KEEP 3650 DURATION 10 BUFFER 16"),
    ("create database db wal_retention_period -1 wal_retention_size -1", "CREATE DATABASE db WAL_RETENTION_PERIOD -1 WAL_RETENTION_SIZE -1"),
    ("CREATE DATABASE d KEEP 3650d,3650d DURATION 10d", "CREATE DATABASE d KEEP 3650d,3650d DURATION 10d"),
    ("alter database power wal_level 1 wal_fsync_period 100", "ALTER DATABASE power WAL_LEVEL 1 WAL_FSYNC_PERIOD 100"),
    ("drop database if exists power", "DROP DATABASE IF EXISTS power"),
    ("DROP DATABASE power", "DROP DATABASE power"),
    ("show databases", "SHOW DATABASES"),
    ("show dnodes", "SHOW DNODES"),
    ("show power.vgroups", "SHOW power.VGROUPS"),
    ("create dnode 'h1:6031'", "CREATE DNODE 'h1:6031'"),
    ("create dnode h1 port 6031", "CREATE DNODE 'h1:6031'"),
    ("drop dnode 2", "DROP DNODE 2"),
    ("drop dnode 'h1:6031'", "DROP DNODE 'h1:6031'"),
    ("use power", "USE power"),
    ("use `Power`", "USE `Power`"),
    ("create stable meters (ts timestamp, current float, voltage int, phase float) tags (location varchar(64), group_id int)", "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location VARCHAR(64), group_id INT)"),
    (CONNECTOR_STABLE, CONNECTOR_STABLE),
    ("CREATE STABLE s (ts TIMESTAMP, c int  unsigned, d nchar( 10 )) TAGS (t bool)", "CREATE STABLE s (ts TIMESTAMP, c INT UNSIGNED, d NCHAR(10)) TAGS (t BOOL)"),
    ('create table d1001 using meters (location, group_id) tags ("California.SanFrancisco", 2)', 'CREATE TABLE d1001 USING meters (location, group_id) TAGS ("California.SanFrancisco", 2)'),
    ("CREATE TABLE IF NOT EXISTS d1001 USING power.meters TAGS ('California.SanFrancisco', -2, NULL, true, NOW)", "CREATE TABLE IF NOT EXISTS d1001 USING power.meters TAGS ('California.SanFrancisco', -2, NULL, true, NOW)"),
    ("CREATE TABLE c USING s TAGS (NOW + 1s, 'a\\'b', \"say \"\"hi\"\"\")", "CREATE TABLE c USING s TAGS (NOW + 1s, 'a\\'b', \"say \"\"hi\"\"\")"),
    ("create  table  d1  using  m  tags  (1)", "CREATE TABLE d1 USING m TAGS (1)"),
    ("create table ntb (ts timestamp, c1 int, c2 binary(8))", "CREATE TABLE ntb (ts TIMESTAMP, c1 INT, c2 BINARY(8))"),
    ("alter stable meters add column c int", "ALTER STABLE meters ADD COLUMN c INT"),
    ("alter stable meters drop column c", "ALTER STABLE meters DROP COLUMN c"),
    ("alter stable power.meters add tag t varchar(16)", "ALTER STABLE power.meters ADD TAG t VARCHAR(16)"),
    ("alter stable meters drop tag t", "ALTER STABLE meters DROP TAG t"),
    ("alter stable meters rename tag a b", "ALTER STABLE meters RENAME TAG a b"),
    # TDengine's own subscription tests (tests/system-test/7-tmq/tmqAlterSchema.py) alter
    # super and normal tables with ALTER TABLE.
    ("alter table db1.stb add column newc1 double", "ALTER TABLE db1.stb ADD COLUMN newc1 DOUBLE"),
    ("alter table db1.stb modify column newc2 binary(32)", "ALTER TABLE db1.stb MODIFY COLUMN newc2 BINARY(32)"),
    ("alter table db1.stb drop column newc3", "ALTER TABLE db1.stb DROP COLUMN newc3"),
    ("alter table db1.stb add tag newt2 binary(16)", "ALTER TABLE db1.stb ADD TAG newt2 BINARY(16)"),
    ("alter table db1.stb rename tag newt1 newt1n", "ALTER TABLE db1.stb RENAME TAG newt1 newt1n"),
    ("alter table db1.stb modify tag newt2 binary(32)", "ALTER TABLE db1.stb MODIFY TAG newt2 BINARY(32)"),
    ("alter table db1.ntb rename column newc1 newc1n", "ALTER TABLE db1.ntb RENAME COLUMN newc1 newc1n"),
    ("alter stable meters modify column c4 nchar(64)", "ALTER STABLE meters MODIFY COLUMN c4 NCHAR(64)"),
    # tmqCommon.py's create_stable and create_ctable: a super table as CREATE TABLE ...
    # TAGS, and ten child tables to a statement; TDengine's table_options are ignored.
    ("create table if not exists dbx.stb (ts timestamp, c1 int) tags (t1 int)", "CREATE STABLE IF NOT EXISTS dbx.stb (ts TIMESTAMP, c1 INT) TAGS (t1 INT)"),
    ("create table dbx.ctb0 using dbx.stb tags(0, 'shanghai') dbx.ctb1 using dbx.stb tags(1, 'beijing')", "CREATE TABLE dbx.ctb0 USING dbx.stb TAGS (0, 'shanghai') dbx.ctb1 USING dbx.stb TAGS (1, 'beijing')"),
    ("create table if not exists a using s tags (1) if not exists b using s (t1) tags (2)", "CREATE TABLE IF NOT EXISTS a USING s TAGS (1) IF NOT EXISTS b USING s (t1) TAGS (2)"),
    ("create table n (ts timestamp, c1 int) ttl 10 comment 'x'", "CREATE TABLE n (ts TIMESTAMP, c1 INT)"),
    ("create table c using s tags (1) ttl 10 comment 'note'", "CREATE TABLE c USING s TAGS (1)"),
    ("create stable s (ts timestamp, c int) tags (t int) comment 'x' watermark 5s,10s max_delay 1m rollup(avg) sma(c)", "CREATE STABLE s (ts TIMESTAMP, c INT) TAGS (t INT)"),
    ("alter table d1001 set tag groupid=3", "ALTER TABLE d1001 SET TAG groupid = 3"),
    ("alter table d1001 set tag groupid = NOW + 1s", "ALTER TABLE d1001 SET TAG groupid = NOW + 1s"),
    ("ALTER TABLE d1001 SET TAG location = \"x\"", 'ALTER TABLE d1001 SET TAG location = "x"'),
    ("drop table if exists t", "DROP TABLE IF EXISTS t"),
    ("drop stable power.s", "DROP STABLE power.s"),
    ("show stables", "SHOW STABLES"),
    ("show tables", "SHOW TABLES"),
    ("show power.tables", "SHOW power.TABLES"),
    ("describe t", "DESCRIBE t"),
    ("desc power.t", "DESCRIBE power.t"),
    ("select ts, current from power.meters where voltage > 220", "SELECT ts, current FROM power.meters WHERE voltage > 220"),
    ("create topic if not exists t as select ts, current, voltage, location from power.meters where voltage > 220", "CREATE TOPIC IF NOT EXISTS t AS SELECT ts, current, voltage, location FROM power.meters WHERE voltage > 220"),
    ("create topic t with meta as stable power.meters where groupid = 2", "CREATE TOPIC t WITH META AS STABLE power.meters WHERE groupid = 2"),
    ("create topic t only meta as stable power.meters", "CREATE TOPIC t ONLY META AS STABLE power.meters"),
    ("create topic t as stable meters", "CREATE TOPIC t AS STABLE meters"),
    ("create topic t with meta as database power", "CREATE TOPIC t WITH META AS DATABASE power"),
    ("create topic if not exists t only meta as database power", "CREATE TOPIC IF NOT EXISTS t ONLY META AS DATABASE power"),
    ("create topic t as database power", "CREATE TOPIC t AS DATABASE power"),
    ("create topic `My Topic` as select * from `Power`.`Meters`", "CREATE TOPIC `My Topic` AS SELECT * FROM `Power`.`Meters`"),
    ("drop topic t", "DROP TOPIC t"),
    ("drop topic if exists force t", "DROP TOPIC IF EXISTS FORCE t"),
    ("drop topic force t", "DROP TOPIC FORCE t"),
    ("drop consumer group g on t", "DROP CONSUMER GROUP g ON t"),
    ("drop consumer group if exists force g on t", "DROP CONSUMER GROUP IF EXISTS FORCE g ON t"),
    ("show topics", "SHOW TOPICS"),
    ("show consumers", "SHOW CONSUMERS"),
    ("show subscriptions", "SHOW SUBSCRIPTIONS"),
    ("create user u pass 'secret'", "CREATE USER u PASS 'secret'"),
    ("alter user u pass \"new\"", "ALTER USER u PASS 'new'"),
    ("drop user u", "DROP USER u"),
    ("show users", "SHOW USERS"),
    ("grant subscribe on t to u", "GRANT SUBSCRIBE ON t TO u"),
    ("revoke subscribe on t from u", "REVOKE SUBSCRIBE ON t FROM u"),
    ("grant read , write on power.* to u", "GRANT READ, WRITE ON power.* TO u"),
    ("grant all on *.* to u", "GRANT ALL ON *.* TO u"),
    ("revoke write on d.stb with groupid=2 from u", "REVOKE WRITE ON d.stb WITH groupid = 2 FROM u"),
    ("show user privileges", "SHOW USER PRIVILEGES"),
    # TDengine's DATABASE() system function is a function call, not the keyword
    ("select database(), current_user()", "SELECT DATABASE(), CURRENT_USER()"),
]
# fmt: on


def _same_statement(a: Statement, b: Statement) -> bool:
    """Equal but for the text they were parsed from (and so their values' positions)."""
    return _textless(observe(a)) == _textless(observe(b))


def _textless(fields: dict[str, object]) -> dict[str, object]:
    out = {**fields, "sql": ""}
    if "tables" in out and isinstance(out["tables"], list):
        out["tables"] = [_textless(t) if isinstance(t, dict) else t for t in out["tables"]]
    return out


@pytest.mark.parametrize(("sql", "normalised"), ROUND_TRIPS)
def test_round_trips(sql: str, normalised: str) -> None:
    tree = sqlglot.parse_one(sql, read=TDengine)
    assert not isinstance(tree, exp.Command)
    assert tree.sql(dialect=TDengine) == normalised
    again = sqlglot.parse_one(normalised, read=TDengine)
    assert again == tree
    assert again.sql(dialect=TDengine) == normalised
    assert _same_statement(parse_one(normalised), parse_one(sql))


def test_round_trip_tables_cover_every_custom_expression() -> None:
    """Each TDengine expression class is generated by some ROUND_TRIPS row."""
    made: set[type[exp.Expr]] = set()
    for row in ROUND_TRIPS:
        sql = row.values[0] if isinstance(row, pytest.ParameterSet) else row[0]
        assert isinstance(sql, str)
        made.add(type(sqlglot.parse_one(sql, read=TDengine)))
    custom = {
        cls
        for name, cls in vars(dialect).items()
        if name.startswith("Td") and isinstance(cls, type) and issubclass(cls, exp.Expression)
    }
    assert custom - {dialect.TdOption, dialect.TdColumnDef, dialect.TdValue} <= made


# --- 3. FAILS ------------------------------------------------------------------------------


class Fail(NamedTuple):
    """A text that must fail, the error it raises and where (in the whole text).

    `bug` names a known bug that makes the row fail: the row is then a strict xfail.
    """

    sql: str
    error: type[SqlError]
    line: int
    column: int
    message: str
    bug: str | None = None


SCRIPT = "USE power;\nSHOW TOPICS;\n"  # two good statements before the bad one

# fmt: off
FAILS: list[Fail] = [
    # plain syntax errors
    Fail("SELECT FROM", SqlSyntaxError, 1, 8, "table name"),
    Fail("USE power extra", SqlSyntaxError, 1, 11, "Unexpected token"),
    Fail("SHOW TOPICS extra", SqlSyntaxError, 1, 13, "Unexpected token"),
    Fail("DROP TOPIC t u", SqlSyntaxError, 1, 14, "Unexpected token"),
    Fail("DROP TABLE db.t, db.u", SqlSyntaxError, 1, 16, "Unexpected token"),
    Fail("DESCRIBE meters extra", SqlSyntaxError, 1, 17, "Unexpected token"),
    Fail("CREATE TOPIC t AS DATABASE power x", SqlSyntaxError, 1, 34, "Unexpected token"),
    Fail("CREATE TOPIC t AS STABLE meters WHERE groupid = 2 extra", SqlSyntaxError, 1, 51, "Unexpected token"),
    Fail("CREATE TOPIC t AS SELEC 1", SqlSyntaxError, 1, 25, "Unexpected token"),
    Fail("CREATE TOPIC t AS", SqlSyntaxError, 1, 16, "expected SELECT, STABLE or DATABASE after AS"),
    Fail("CREATE DATABASE", SqlSyntaxError, 1, 8, "expected a database name"),
    Fail("DROP TABLE", SqlSyntaxError, 1, 6, "expected a table name"),
    Fail("DESCRIBE", SqlSyntaxError, 1, 1, "expected a table name"),
    Fail("CREATE STABLE s () TAGS (t INT)", SqlSyntaxError, 1, 18, "expected a column name"),
    Fail("CREATE STABLE s ts TIMESTAMP TAGS (t INT)", SqlSyntaxError, 1, 17, "expected ( and a list of columns"),
    Fail("CREATE USER u PASS secret", SqlSyntaxError, 1, 20, "expected the password as a quoted string"),
    Fail("CREATE USER u", SqlSyntaxError, 1, 13, "expected PASS"),
    Fail("CREATE DNODE h1", SqlSyntaxError, 1, 14, "expected PORT"),
    Fail("CREATE DNODE h1 PORT x", SqlSyntaxError, 1, 22, "expected the port as a number"),
    Fail("CREATE DNODE", SqlSyntaxError, 1, 8, "expected the dnode's endpoint"),
    Fail("DROP DNODE", SqlSyntaxError, 1, 6, "expected the dnode's id or 'endpoint'"),
    Fail("DROP DNODE 2 FORCE", SqlSyntaxError, 1, 14, "FORCE/UNSAFE is not supported"),
    Fail("SHOW power.DNODES", SqlSyntaxError, 1, 12, "unsupported SHOW"),
    Fail("GRANT SELECT ON t TO u", SqlSyntaxError, 1, 7, "expected SUBSCRIBE, or database privileges READ, WRITE or ALL"),
    Fail("GRANT READ ON power TO u", SqlSyntaxError, 1, 21, "expected db.table, db.* or *.* after ON"),
    Fail("GRANT READ ON power.* WITH TO u", SqlSyntaxError, 1, 28, "expected a tag condition after WITH"),
    Fail("GRANT READ, SUBSCRIBE ON power.* TO u", SqlSyntaxError, 1, 13, "expected SUBSCRIBE, or database privileges"),
    Fail("GRANT SUBSCRIBE ON t FROM u", SqlSyntaxError, 1, 22, "expected TO"),
    Fail("REVOKE SUBSCRIBE ON t TO u", SqlSyntaxError, 1, 23, "expected FROM"),
    Fail("ALTER TABLE t ADD INDEX c", SqlSyntaxError, 1, 15, "expected SET TAG"),
    Fail("ALTER USER u", SqlSyntaxError, 1, 12, "expected PASS"),
    Fail("ALTER DATABASE power", SqlSyntaxError, 1, 16, "ALTER DATABASE needs an option"),
    Fail("ALTER STABLE m ADD COLUMN c", SqlSyntaxError, 1, 27, "expected a type"),
    Fail("ALTER STABLE m RENAME TAG a", SqlSyntaxError, 1, 27, "expected a tag name"),
    Fail("CREATE TABLE c USING s TAGS ()", SqlSyntaxError, 1, 30, "expected a value"),
    Fail("SELECT 'abc", SqlSyntaxError, 1, 1, "cannot tokenize"),
    # types
    Fail("CREATE STABLE s (ts TIMESTAMP, c FOO) TAGS (t INT)", SqlSyntaxError, 1, 34, "unknown type 'FOO'"),
    Fail("CREATE TABLE t (ts TIMESTAMP, c foo(3))", SqlSyntaxError, 1, 33, "unknown type 'foo(3)'"),
    Fail("CREATE STABLE s (ts TIMESTAMP, c FLOAT UNSIGNED) TAGS (t INT)", SqlSyntaxError, 1, 34, "unknown type 'FLOAT UNSIGNED'"),
    Fail("CREATE STABLE s (ts TIMESTAMP, c VARCHAR) TAGS (t INT)", SqlSyntaxError, 1, 34, "VARCHAR needs a length"),
    Fail("CREATE TABLE t (ts TIMESTAMP, c NCHAR)", SqlSyntaxError, 1, 33, "NCHAR needs a length"),
    Fail("CREATE STABLE s (ts TIMESTAMP, c VARCHAR(0)) TAGS (t INT)", SqlSyntaxError, 1, 34, "VARCHAR needs a length in 1..65517"),
    Fail("CREATE STABLE s (ts TIMESTAMP, c VARCHAR(x)) TAGS (t INT)", SqlSyntaxError, 1, 34, "bad type length"),
    Fail("CREATE STABLE s (ts TIMESTAMP, c INT(4)) TAGS (t INT)", SqlSyntaxError, 1, 34, "INT takes no length"),
    Fail("ALTER STABLE m ADD COLUMN c FOO", SqlSyntaxError, 1, 29, "unknown type 'FOO'"),
    Fail("ALTER STABLE m ADD TAG t VARCHAR", SqlSyntaxError, 1, 26, "VARCHAR needs a length"),
    # database options
    Fail("CREATE DATABASE d FOO 1", SqlSyntaxError, 1, 19, "unknown database option FOO"),
    Fail("CREATE DATABASE d VGROUPS 4 WAL_LEVL 2", SqlSyntaxError, 1, 29, "unknown database option WAL_LEVL"),
    Fail("ALTER DATABASE d WAL_LEVEL 1 FOO 2", SqlSyntaxError, 1, 30, "unknown database option FOO"),
    Fail("CREATE DATABASE d VGROUPS", SqlSyntaxError, 1, 19, "expected a number or a quoted string"),
    # values of TAGS and SET TAG: what INSERT's TAGS list takes, and errors where it has them
    Fail("CREATE TABLE c USING s TAGS (x)", SqlSyntaxError, 1, 30, "expected"),
    Fail("CREATE TABLE c USING s TAGS (1, x)", SqlSyntaxError, 1, 33, "expected"),
    Fail("CREATE TABLE c USING s TAGS (1 + 2)", SqlSyntaxError, 1, 32, "expected"),
    Fail("CREATE TABLE c USING s TAGS (1 2)", SqlSyntaxError, 1, 32, "expected"),
    Fail("CREATE TABLE c USING s TAGS ('a' 'b')", SqlSyntaxError, 1, 34, "expected"),
    Fail("ALTER TABLE c SET TAG t = a + b", SqlSyntaxError, 1, 27, "expected"),
    Fail("ALTER TABLE c SET TAG t = 'x' WHERE a = 1", SqlSyntaxError, 1, 31, "expected"),
    # unsupported statements: refused, never run as an unparsed exp.Command
    Fail("CREATE VIEW v AS SELECT 1", SqlSyntaxError, 1, 8, "unsupported CREATE"),
    Fail("CREATE INDEX i ON t (a)", SqlSyntaxError, 1, 8, "unsupported CREATE"),
    Fail("CREATE OR REPLACE TABLE t (a INT)", SqlSyntaxError, 1, 8, "unsupported CREATE"),
    Fail("CREATE SEQUENCE s", SqlSyntaxError, 1, 8, "unsupported CREATE"),
    Fail("EXPLAIN SELECT 1", UnsupportedStatement, 1, 1, "unsupported statement 'EXPLAIN SELECT 1'"),
    Fail("SHOW GRANTS", SqlSyntaxError, 1, 6, "unsupported SHOW"),
    Fail("SHOW CREATE TABLE t", SqlSyntaxError, 1, 6, "unsupported SHOW"),
    Fail("SHOW power.TOPICS", SqlSyntaxError, 1, 12, "unsupported SHOW"),
    Fail("SHOW", SqlSyntaxError, 1, 1, "unsupported SHOW"),
    Fail("DELETE FROM t", UnsupportedStatement, 1, 1, "unsupported statement 'DELETE FROM t'"),
    Fail("DELETE FROM meters WHERE ts < '2021-10-01 10:40:00.100'", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("UPDATE t SET a = 1", UnsupportedStatement, 1, 1, "unsupported statement 'UPDATE t SET'"),
    Fail("DROP VIEW v", SqlSyntaxError, 1, 6, "unsupported DROP"),
    Fail("ALTER STABLE meters COMMENT 'x'", SqlSyntaxError, 1, 21, "unsupported ALTER STABLE"),
    Fail("ALTER STABLE stb MODIFY TAG t", SqlSyntaxError, 1, 29, "expected a type"),
    Fail("CREATE TABLE a USING s TAGS (1) b TAGS (2)", SqlSyntaxError, 1, 35, "expected USING"),
    Fail("CREATE TABLE a USING s TAGS (1) b USING s", SqlSyntaxError, 1, 41, "expected TAGS"),
    Fail("alter table ct11111 set tag groupid = 100 ct2 set tag groupid = 101", SqlSyntaxError, 1, 43, "expected"),
    Fail("alter table using stb set tag region = 'shanghai' where groupid = 100", SqlSyntaxError, 1, 19, "expected SET TAG"),
    Fail("ALTER VIEW v AS SELECT 1", SqlSyntaxError, 1, 7, "unsupported ALTER"),
    Fail("RELOAD TOPIC IF EXISTS t AS SELECT 1", SqlSyntaxError, 1, 14, "Unexpected token"),
    Fail("TRUNCATE TABLE t", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("CALL foo()", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("LOAD httpfs", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("VACUUM", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("PRAGMA foo", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("SET x = 1", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("ATTACH 'x' AS y", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("COPY t TO 'x'", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("VALUES (1)", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("BEGIN", UnsupportedStatement, 1, 1, "unsupported statement"),
    Fail("INSERT INTO t SELECT * FROM u", UnsupportedStatement, 1, 15, "INSERT ... SELECT is not supported"),
    # topics
    Fail("CREATE TOPIC t WITH META AS SELECT * FROM m", SqlSyntaxError, 1, 29, "WITH META applies to STABLE and DATABASE topics only"),
    Fail("CREATE TOPIC t ONLY META AS SELECT * FROM m", SqlSyntaxError, 1, 29, "ONLY META applies to STABLE and DATABASE topics only"),
    # missing TAGS
    Fail("CREATE STABLE s (ts TIMESTAMP, c INT)", SqlSyntaxError, 1, 37, "expected TAGS"),
    Fail("CREATE TABLE c1 USING s", SqlSyntaxError, 1, 23, "expected TAGS"),
    Fail("CREATE TABLE c1 USING s ('x')", SqlSyntaxError, 1, 29, "expected TAGS"),
    Fail("INSERT INTO d1 USING meters VALUES (1)", SqlSyntaxError, 1, 29, "expected TAGS after USING meters"),
    # DROP CONSUMER GROUP without ON
    Fail("DROP CONSUMER GROUP g", SqlSyntaxError, 1, 21, "expected ON"),
    Fail("DROP CONSUMER GROUP IF EXISTS FORCE g t", SqlSyntaxError, 1, 39, "expected ON"),
    # the bad statement on line 3 of a script: the position is in the whole text
    Fail(SCRIPT + "  CREATE VIEW v AS SELECT 1", SqlSyntaxError, 3, 10, "unsupported CREATE"),
    Fail(SCRIPT + "  EXPLAIN SELECT 1", UnsupportedStatement, 3, 3, "unsupported statement"),
    Fail(SCRIPT + "  DELETE FROM t", UnsupportedStatement, 3, 3, "unsupported statement"),
    Fail(SCRIPT + "CREATE STABLE s (ts TIMESTAMP,\n   c FOO) TAGS (t INT)", SqlSyntaxError, 4, 6, "unknown type 'FOO'"),
    Fail("USE power; SHOW TOPICS; CREATE STABLE s (ts TIMESTAMP, c FOO) TAGS (t INT)", SqlSyntaxError, 1, 58, "unknown type 'FOO'"),
    Fail(SCRIPT + "  INSERT INTO d1 USING meters VALUES (1)", SqlSyntaxError, 3, 31, "expected TAGS after USING meters"),
    Fail(SCRIPT + "  CREATE TOPIC t WITH META AS SELECT * FROM m", SqlSyntaxError, 3, 31, "WITH META applies"),
    Fail(SCRIPT + "\n  DROP CONSUMER GROUP g", SqlSyntaxError, 4, 23, "expected ON"),
    Fail(SCRIPT + "  CREATE TABLE c USING s TAGS (x)", SqlSyntaxError, 3, 32, "expected"),
    Fail(SCRIPT + "  CREATE TABLE c1 USING s", SqlSyntaxError, 3, 25, "expected TAGS"),
]
# fmt: on


def _raises(text: str) -> SqlError:
    with pytest.raises(SqlError) as caught:
        parse(text)
    return caught.value


def _fail_param(fail: Fail) -> pytest.ParameterSet:
    marks = [pytest.mark.xfail(strict=True, reason=fail.bug)] if fail.bug else []
    return pytest.param(fail, marks=marks, id=_param_id(fail.sql))


@pytest.mark.parametrize("fail", [_fail_param(f) for f in FAILS])
def test_fails(fail: Fail) -> None:
    err = _raises(fail.sql)
    assert type(err) is fail.error, err
    assert fail.message in err.message
    assert (err.line, err.column) == (fail.line, fail.column), err
    assert err.sql is not None
    assert err.sql in fail.sql
    assert f"(line {err.line}, column {err.column})" in str(err)


def test_syntax_messages_are_plain() -> None:
    """No sqlglot token repr (`<Token token_type: TokenType.SENTINEL ...>`) in messages."""
    err = _raises("SELECT FROM")
    assert "<Token" not in err.message
    assert "TokenType" not in err.message


def test_tag_values_carry_their_position_in_the_whole_text() -> None:
    _, create, set_tag = parse(
        "USE power;\n  CREATE TABLE c USING s TAGS ('x', NOW + 1s);\nALTER TABLE c SET TAG t = 3"
    )
    assert isinstance(create, st.CreateTable)
    assert [v.pos for v in create.tag_values] == [Pos(2, 32), Pos(2, 37)]
    assert isinstance(set_tag, st.SetTag)
    assert set_tag.value.pos == Pos(3, 27)


def test_the_error_names_the_bad_statement_of_a_script() -> None:
    err = _raises(SCRIPT + "  CREATE VIEW v AS SELECT 1;\nUSE other")
    assert err.sql == "CREATE VIEW v AS SELECT 1"


@pytest.mark.parametrize(
    "sql",
    ["EXPLAIN SELECT 1", "CALL foo()", "LOAD httpfs", "VACUUM", "RELOAD TOPIC t AS SELECT 1"],
)
def test_command_fallbacks_are_refused(sql: str) -> None:
    """What sqlglot would keep as an unparsed exp.Command is never a statement."""
    with pytest.raises(SqlError):
        parse_one(sql)


# --- split_statements and multi-statement scripts -------------------------------------------

# fmt: off
SPLITS: list[tuple[str, list[tuple[str, tuple[int, int]]]]] = [
    ("", []),
    ("   \n  ", []),
    (";", []),
    (";;  ; \n;", []),
    ("USE p", [("USE p", (1, 1))]),
    ("USE p;", [("USE p", (1, 1))]),
    ("  USE p  ;  ", [("USE p", (1, 3))]),
    ("USE p; SHOW TOPICS", [("USE p", (1, 1)), ("SHOW TOPICS", (1, 8))]),
    ("USE p;\n\n   SHOW TOPICS;\n", [("USE p", (1, 1)), ("SHOW TOPICS", (3, 4))]),
    ("USE p;;;SHOW TOPICS", [("USE p", (1, 1)), ("SHOW TOPICS", (1, 9))]),
    ("SELECT ';' FROM t; USE p", [("SELECT ';' FROM t", (1, 1)), ("USE p", (1, 20))]),
    ("SELECT 'it''s;' FROM t; USE p", [("SELECT 'it''s;' FROM t", (1, 1)), ("USE p", (1, 25))]),
    ("INSERT INTO t VALUES ('a\\';b'); USE p", [("INSERT INTO t VALUES ('a\\';b')", (1, 1)), ("USE p", (1, 33))]),
    ('SELECT ";" FROM t; USE p', [('SELECT ";" FROM t', (1, 1)), ("USE p", (1, 20))]),
    ('SELECT "a"";" FROM t; USE p', [('SELECT "a"";" FROM t', (1, 1)), ("USE p", (1, 23))]),
    ("SELECT `a;b` FROM t; USE p", [("SELECT `a;b` FROM t", (1, 1)), ("USE p", (1, 22))]),
    ("USE p -- a; comment\n; SHOW TOPICS", [("USE p -- a; comment", (1, 1)), ("SHOW TOPICS", (2, 3))]),
    ("USE p /* a; b */; SHOW TOPICS", [("USE p /* a; b */", (1, 1)), ("SHOW TOPICS", (1, 19))]),
    ("-- lead; comment\n/* and; another\n */ USE p", [("USE p", (3, 5))]),
    ("USE p; -- only a comment; here", [("USE p", (1, 1))]),
    ("USE p; /* only; a comment */ ;", [("USE p", (1, 1))]),
    ("CREATE TOPIC t AS\n  SELECT ts\n  FROM m;\n\tUSE p", [("CREATE TOPIC t AS\n  SELECT ts\n  FROM m", (1, 1)), ("USE p", (4, 2))]),
]
# fmt: on


@pytest.mark.parametrize(("text", "want"), SPLITS, ids=[repr(s[0])[:50] for s in SPLITS])
def test_split_statements(text: str, want: list[tuple[str, tuple[int, int]]]) -> None:
    assert split_statements(text) == [(sql, Pos(*pos)) for sql, pos in want]


SCRIPT_TEXT = """\
-- set up power
CREATE DATABASE IF NOT EXISTS power VGROUPS 4;
USE power;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);   CREATE TABLE d1001 USING meters TAGS ('California.SanFrancisco', 2);
/* a; b */ INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, 218, 0.33);

  CREATE TOPIC overvoltage AS SELECT ts, current FROM meters WHERE voltage > 220 ;
GRANT SUBSCRIBE ON overvoltage TO bob;;
SHOW SUBSCRIPTIONS"""


def test_parse_a_script_in_order_with_positions() -> None:
    statements = parse(SCRIPT_TEXT)
    assert [(type(s).__name__, s.pos) for s in statements] == [
        ("CreateDatabase", Pos(2, 1)),
        ("Use", Pos(3, 1)),
        ("CreateStable", Pos(4, 1)),
        ("CreateTable", Pos(5, 49)),
        ("Insert", Pos(6, 12)),
        ("CreateTopic", Pos(8, 3)),
        ("Grant", Pos(9, 1)),
        ("Show", Pos(10, 1)),
    ]
    lines = SCRIPT_TEXT.splitlines()
    for stmt in statements:
        line = lines[stmt.pos.line - 1]
        assert line[stmt.pos.column - 1 :].startswith(stmt.sql.split()[0])
    insert = statements[4]
    assert isinstance(insert, Insert)
    assert insert.parts[0].pos == Pos(6, 24)
    assert len(insert.parts[0].rows) == 2


def test_parse_stops_at_the_first_bad_statement() -> None:
    err = _raises("USE power;\nCREATE VIEW v AS SELECT 1;\nEXPLAIN SELECT 1")
    assert err.line == 2
    assert "unsupported CREATE" in err.message
