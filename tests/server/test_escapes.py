"""String escapes mean the same in stored values and in queries (TDengine's rules)."""

from __future__ import annotations

from pathlib import Path

import sqlglot

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.scan import unquote


def test_a_value_stored_with_escapes_is_found_by_the_same_literal(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False) as engine:
        engine.execute(
            "CREATE DATABASE db VGROUPS 1; USE db;"
            "CREATE TABLE t (ts TIMESTAMP, s VARCHAR(20));"
            r"INSERT INTO t VALUES (1700000000000, 'p\%q') (1700000000001, 'it\'s')"
            r" (1700000000002, 'a\_b')"
        )
        assert engine.execute(r"SELECT s FROM t WHERE s = 'p\%q'").rows == [("p\\%q",)]
        assert engine.execute(r"SELECT s FROM t WHERE s = 'it\'s'").rows == [("it's",)]
        engine.execute(r"CREATE TOPIC esc AS SELECT s FROM t WHERE s = 'a\_b'")
        items, _ = engine.read_topic("esc", 1, 0, 100)
        rows = [r for i in items if isinstance(i, TopicBlock) for r in i.data.to_pylist()]
        assert rows == [{"s": "a\\_b"}]


def test_query_literals_read_escapes_as_values_do() -> None:
    for literal in [r"'p\%q'", r"'a\nb'", r"'it\'s'", r"'x\\y'", r"'\x41'", r"'a''b'", r"'\q'"]:
        tree = sqlglot.parse_one(f"SELECT {literal}", read=TDengine)
        assert tree.expressions[0].this == unquote(literal), literal
