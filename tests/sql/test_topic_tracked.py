"""A query topic's tracked form (sql/topic/tracked.py): the topic's own rows, in order,
each with the id of the input row it came from, through pyarrow and DuckDB alike; the
id names the row whatever the other rows are (a condition on NOW() that lets rows in or
out moves no id)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import duckdb
import pyarrow as pa
import pytest

from sqltopic.sql import layout
from sqltopic.sql.model import Catalog, Column, Database, SuperTable, Topic
from sqltopic.sql.parse import parse_one
from sqltopic.sql.statements import CreateTopic
from sqltopic.sql.topic import compile_topic
from sqltopic.sql.topic.arrow_eval import arrow_plan
from sqltopic.sql.topic.tracked import split_ids, tracked_sql, with_row_ids
from sqltopic.sql.types import ColumnType

Run = Callable[[pa.Table], pa.Table]

# Topics over `meters` of every shape the compiler takes: plain and computed columns,
# tag and tbname conditions, functions, CASE, NOW(), and a parameterized shared form.
TOPICS = [
    "SELECT ts, current, voltage FROM meters",
    "SELECT ts, voltage FROM meters WHERE voltage > 218 AND location = 'sf'",
    "SELECT ts, current * 2 AS double, tbname FROM meters WHERE tbname IN ('d1', 'd3')",
    "SELECT ts, CASE WHEN voltage > 220 THEN 'high' ELSE 'ok' END AS level FROM meters",
    "SELECT ts, ABS(current - 10) AS off, groupid FROM meters WHERE groupid < 2 OR phase > 0.5",
    "SELECT ts, voltage FROM meters WHERE ts < NOW() AND voltage % 2 = 0",
    "SELECT ts, current FROM meters WHERE tbname = ? AND voltage > 215",
]


def _catalog() -> Catalog:
    def cols(*specs: str) -> tuple[Column, ...]:
        return tuple(Column(s.split()[0], ColumnType.parse(s.split(maxsplit=1)[1])) for s in specs)

    catalog = Catalog()
    catalog.databases["power"] = Database("power", (1, 2), "ms", {}, 0)
    catalog.stables[("power", "meters")] = SuperTable(
        "power", "meters",
        cols("ts TIMESTAMP", "current FLOAT", "voltage INT", "phase FLOAT"),
        cols("location VARCHAR(16)", "groupid INT"), 0,
    )  # fmt: skip
    return catalog


def _compiled(sql: str) -> Topic:
    statement = parse_one(f"CREATE TOPIC t AS {sql}")
    assert isinstance(statement, CreateTopic)
    return compile_topic(statement, _catalog(), current_db="power", owner="root", now_us=1)


def _entries(seed: int) -> tuple[pa.Table, list[int], list[int]]:
    """Rows of several entries (versions with gaps, one of them empty), as the vnode
    builds a batch: data columns, the tags and tbname."""
    rng = random.Random(seed)
    versions, lengths, rows = [], [], []
    version = 10
    for _ in range(6):
        version += rng.randint(1, 3)
        n = rng.choice([0, 1, 4, 9])
        table = rng.choice(["d1", "d2", "d3"])
        versions.append(version)
        lengths.append(n)
        for _ in range(n):
            rows.append({
                "ts": rng.choice([1_000, 2_000, 4_102_444_800_000]),  # the last after NOW()
                "current": rng.uniform(5, 15), "voltage": rng.randint(214, 224),
                "phase": rng.random(), "location": rng.choice(["sf", "la"]),
                "groupid": rng.randint(0, 3), "tbname": table,
            })  # fmt: skip
    schema = pa.schema([
        ("ts", pa.timestamp("ms")), ("current", pa.float32()), ("voltage", pa.int32()),
        ("phase", pa.float32()), ("location", pa.string()), ("groupid", pa.int32()),
        ("tbname", pa.string()),
    ])  # fmt: skip
    return pa.Table.from_pylist(rows, schema=schema), versions, lengths


@functools.cache
def _connection() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()  # one for every example: opening one costs ~80 ms


def _runner(path: str, sql: str) -> Run:
    """`sql` over a batch in DuckDB, or with the pyarrow evaluator."""
    if path == "arrow":
        plan = arrow_plan(sql)
        assert plan is not None, sql
        return plan.run

    def run(batch: pa.Table) -> pa.Table:
        con = _connection()
        con.register(layout.BATCH, batch)
        try:
            return con.sql(sql).to_arrow_table()
        finally:
            con.unregister(layout.BATCH)

    return run


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("topic_sql", TOPICS)
def test_the_tracked_form_gives_the_topics_rows_with_their_input_rows_ids(
    topic_sql: str, seed: int
) -> None:
    topic = _compiled(topic_sql)
    batch, versions, lengths = _entries(seed)
    ided = with_row_ids(batch, versions, lengths)
    starts = {v: sum(lengths[:k]) for k, v in enumerate(versions)}
    paths = ["duckdb"] + (["arrow"] if arrow_plan(topic.select_sql) is not None else [])
    for path in paths:
        plain = _runner(path, topic.select_sql)
        own, version, index = split_ids(_runner(path, tracked_sql(topic.select_sql))(ided))
        assert own.to_pylist() == plain(batch).to_pylist(), path
        ids = list(zip(version.to_pylist(), index.to_pylist(), strict=True))
        assert ids == sorted(set(ids)), path  # input order, each input row at most once
        for k, (v, i) in enumerate(ids):
            alone = batch.slice(starts[v] + i, 1)  # the input row the id names
            assert plain(alone).to_pylist() == own.slice(k, 1).to_pylist(), (path, v, i)


def test_ids_must_cover_the_batch_and_outputs_must_end_with_them() -> None:
    batch, versions, lengths = _entries(0)
    with pytest.raises(ValueError, match="entries of"):
        with_row_ids(batch, versions, [n + 1 for n in lengths])
    with pytest.raises(ValueError, match="not a tracked form's output"):
        split_ids(batch)
    with pytest.raises(ValueError, match="one SELECT"):
        tracked_sql("INSERT INTO x VALUES (1)")


def test_a_part_of_an_entry_counts_its_rows_from_where_it_starts() -> None:
    batch = pa.table({"v": pa.array([1, 2, 3, 4], pa.int32())})
    ided = with_row_ids(batch, [7, 9], [3, 1], firsts=[5, 0])
    assert ided.column("__row_version").to_pylist() == [7, 7, 7, 9]
    assert ided.column("__row_index").to_pylist() == [5, 6, 7, 0]


def test_an_entry_larger_than_the_counting_array_gets_every_index() -> None:
    batch = pa.table({"v": pa.array(range(70_000), pa.int32())})
    ided = with_row_ids(batch, [3, 4], [69_990, 10], firsts=[0, 65_530])
    assert ided.column("__row_index").to_pylist() == [*range(69_990), *range(65_530, 65_540)]
