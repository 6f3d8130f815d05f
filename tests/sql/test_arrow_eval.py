"""The pyarrow evaluator of simple topics against DuckDB: same rows, same order, on
generated data and conditions (three-valued logic, every supported type, literals of
every family), and None (use DuckDB) wherever it cannot be exact."""

from __future__ import annotations

import functools
import math
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqltopic.sql.topic.arrow_eval import _decoded, _membership, arrow_plan

BATCH = "__batch"
INTS = {"i8": pa.int8(), "i32": pa.int32(), "i64": pa.int64(), "u32": pa.uint32()}
FLOATS = {"f32": pa.float32(), "f64": pa.float64()}
STRINGS = {"s": pa.string()}
BOOLS = {"b": pa.bool_()}
# a tag column, dictionary-encoded as the vnode adds it
TAG = "loc"
COLUMNS = {**INTS, **FLOATS, **STRINGS, **BOOLS}
WORDS = ["", "a", "ab", "b", "sf", "SF", "z", "é"]
INT_EDGES = [0, 1, -1, 127, -128, 16_777_217, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1]


@functools.cache
def _connection() -> duckdb.DuckDBPyConnection:
    """One connection for every example: opening one costs ~80 ms, the query ~3 ms (the
    property test's 400 examples took 30 s); each query sees only the table it registers."""
    con = duckdb.connect()
    con.execute("SET threads = 1")
    return con


def _duckdb(sql: str, table: pa.Table) -> list[dict[str, Any]]:
    con = _connection()
    con.register(BATCH, table)
    try:
        rows: list[dict[str, Any]] = con.sql(sql).to_arrow_table().to_pylist()
    finally:
        con.unregister(BATCH)
    return rows


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    def norm(v: Any) -> Any:
        return "nan" if isinstance(v, float) and math.isnan(v) else v

    return [{k: norm(v) for k, v in r.items()} for r in a] == [
        {k: norm(v) for k, v in r.items()} for r in b
    ]


def _value(name: str, draw: st.DrawFn) -> Any:
    if name in INTS:
        t = INTS[name]
        bits = t.bit_width
        lo, hi = (
            (0, 2**bits - 1) if name.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        )
        edges = [v for v in INT_EDGES if lo <= v <= hi]
        small = st.integers(max(lo, -3), 3)
        return draw(st.one_of(st.sampled_from(edges), st.integers(lo, hi), small))
    if name == "f32":
        return draw(
            st.floats(width=32, allow_nan=False) | st.sampled_from([16_777_216.0, 0.5, -0.0])
        )
    if name == "f64":
        return draw(st.floats(allow_nan=False) | st.sampled_from([0.5, 2.0**53, -0.0]))
    if name in STRINGS or name == TAG:
        return draw(st.sampled_from(WORDS))
    return draw(st.booleans())


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 12))
    arrays = {}
    for name, t in COLUMNS.items():
        values = [None if draw(st.integers(0, 4)) == 0 else _value(name, draw) for _ in range(n)]
        arrays[name] = pa.array(values, t)
    tag = [None if draw(st.integers(0, 4)) == 0 else _value(TAG, draw) for _ in range(n)]
    arrays[TAG] = pa.array(tag, pa.string()).dictionary_encode()
    return pa.table(arrays)


def _literal(family: str, draw: st.DrawFn) -> str:
    if family == "int":
        v = draw(st.sampled_from(INT_EDGES) | st.integers(-200, 200))
        return str(v) if v >= 0 else f"-{-v}"
    if family == "float":
        f = draw(st.sampled_from([0.5, 1.5, -2.25, 16777216.5, 1e10]))
        return f"CAST({f!r} AS DOUBLE)"
    if family == "string":
        return "'" + draw(st.sampled_from(WORDS)) + "'"
    return draw(st.sampled_from(["TRUE", "FALSE"]))


def _family(name: str) -> str:
    if name in INTS:
        return "int"
    if name in FLOATS:
        return "float"
    if name in BOOLS:
        return "bool"
    return "string"


@st.composite
def comparisons(draw: st.DrawFn) -> str:
    col = draw(st.sampled_from([*COLUMNS, TAG]))
    family = _family(col)
    op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
    kind = draw(st.sampled_from(["literal", "column", "between", "in", "null"]))
    if kind == "null":
        return f'"{col}" IS NULL' if draw(st.booleans()) else f'NOT "{col}" IS NULL'
    lit_family = family
    if family in ("int", "float"):
        lit_family = draw(st.sampled_from(["int", "float"]))
    if kind == "column":
        same = [c for c in [*COLUMNS, TAG] if _family(c) == family]
        other = draw(st.sampled_from(same))
        return f'"{col}" {op} "{other}"'
    if kind == "between":
        return f'"{col}" BETWEEN {_literal(lit_family, draw)} AND {_literal(lit_family, draw)}'
    if kind == "in":
        items = draw(st.lists(st.just(0), min_size=1, max_size=3))
        return f'"{col}" IN ({", ".join(_literal(lit_family, draw) for _ in items)})'
    literal = _literal(lit_family, draw)
    return f'"{col}" {op} {literal}' if draw(st.booleans()) else f'{literal} {op} "{col}"'


def conditions(depth: int = 2) -> st.SearchStrategy[str]:
    leaf = comparisons() | st.sampled_from(['"b"', 'NOT "b"'])
    if depth == 0:
        return leaf
    inner = conditions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda c: f"NOT ({c})"),
    )


@given(table=tables(), where=conditions())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_pyarrow_evaluator_returns_duckdbs_rows(table: pa.Table, where: str) -> None:
    sql = f'SELECT "i32" AS "x", "s" AS "y", "{TAG}" AS "t" FROM "{BATCH}" WHERE {where}'
    plan = arrow_plan(sql)
    assert plan is not None, sql
    mine = plan.run(table)
    if mine is None:
        return  # a case it declines (NaN never occurs here; types it does not know)
    assert _same(mine.to_pylist(), _duckdb(sql, table)), sql


def test_a_projection_without_where_keeps_every_row_in_order() -> None:
    table = pa.table({"a": [3, 1, 2], "b": ["x", None, "z"]})
    plan = arrow_plan('SELECT "b" AS "first", "a" AS "a" FROM "__batch"')
    assert plan is not None
    out = plan.run(table)
    assert out is not None
    assert out.to_pylist() == [
        {"first": "x", "a": 3},
        {"first": None, "a": 1},
        {"first": "z", "a": 2},
    ]


def test_an_integer_literal_meets_a_float_column_as_duckdb_rounds_it() -> None:
    table = pa.table({"f": pa.array([16_777_216.0, 1.0], pa.float32())})
    sql = 'SELECT "f" AS "f" FROM "__batch" WHERE "f" = 16777217'
    plan = arrow_plan(sql)
    assert plan is not None
    out = plan.run(table)
    assert out is not None
    assert out.to_pylist() == _duckdb(sql, table) == [{"f": 16_777_216.0}]


def test_nan_in_a_compared_column_is_left_to_duckdb() -> None:
    table = pa.table({"f": pa.array([math.nan, 1.0])})
    sql = 'SELECT "f" AS "f" FROM "__batch" WHERE "f" > 0'
    plan = arrow_plan(sql)
    assert plan is not None
    assert plan.run(table) is None
    assert len(_duckdb(sql, table)) == 2  # DuckDB: NaN is above every number


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT TRY("a" * 2) AS "x" FROM "__batch"',
        'SELECT "a" AS "a" FROM "__batch" WHERE TRY("a" % 2 = 0)',
        'SELECT "a" AS "a" FROM "__batch" WHERE "a" > TRY_CAST(\'3\' AS DOUBLE)',
        'SELECT "a" AS "a" FROM "__batch" WHERE "ts" > CAST(\'1970-01-01\' AS TIMESTAMP)',
        'SELECT "a" AS "a" FROM "__batch" WHERE 1 = 1',
        'SELECT "a" AS "a" FROM "__batch" WHERE "a" > 99999999999999999999',
        'SELECT "a" AS "a" FROM "__batch" WHERE LOWER("s") = \'x\'',
    ],
)
def test_anything_else_is_left_to_duckdb(sql: str) -> None:
    assert arrow_plan(sql) is None


@pytest.mark.parametrize(
    ("column", "where"),
    [
        (pa.array([1, 2], pa.uint64()), '"c" > 1'),
        (pa.array([b"x", b"y"], pa.binary()), "\"c\" = 'x'"),
        (pa.array([1, 2], pa.timestamp("ms")), '"c" IS NULL'),
        (pa.array(["1", "2"]), '"c" > 1'),
        (pa.array([1, 2], pa.int32()), '"c"'),
    ],
)
def test_types_it_does_not_know_are_left_to_duckdb(column: pa.Array, where: str) -> None:
    plan = arrow_plan(f'SELECT "c" AS "c" FROM "__batch" WHERE {where}')
    assert plan is not None
    assert plan.run(pa.table({"c": column})) is None


@st.composite
def memberships(draw: st.DrawFn) -> str:
    """A whole WHERE that is `x IN (...)` or `x = literal` over an integer or string
    column (the tag too): the evaluator's is_in path."""
    col = draw(st.sampled_from([*INTS, *STRINGS, TAG]))
    family = _family(col)
    items = [_literal(family, draw) for _ in range(draw(st.integers(1, 4)))]
    if len(items) == 1 and draw(st.booleans()):
        return f'"{col}" = {items[0]}' if draw(st.booleans()) else f'{items[0]} = "{col}"'
    return f'"{col}" IN ({", ".join(items)})'


@given(table=tables(), where=memberships())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_membership_condition_is_one_is_in_with_duckdbs_rows(table: pa.Table, where: str) -> None:
    sql = f'SELECT "i32" AS "x", "s" AS "y", "{TAG}" AS "t" FROM "{BATCH}" WHERE {where}'
    plan = arrow_plan(sql)
    assert plan is not None, sql
    assert plan.where is not None
    assert _membership(plan.where, _decoded(table, plan.reads)) is not None, sql
    mine = plan.run(table)
    assert mine is not None, sql
    assert _same(mine.to_pylist(), _duckdb(sql, table)), sql


def test_a_membership_under_not_or_with_another_column_is_not_one_is_in() -> None:
    table = pa.table({"a": pa.array([1, None, 3], pa.int32()), "b": ["x", "y", None]})
    for where, rows in [
        ('NOT ("a" IN (1, 2))', [{"a": 3}]),  # NULL stays NULL under NOT: not kept
        ('"a" IN (1) OR "b" = \'y\'', [{"a": 1}, {"a": None}]),
    ]:
        plan = arrow_plan(f'SELECT "a" AS "a" FROM "__batch" WHERE {where}')
        assert plan is not None
        assert plan.where is not None
        assert _membership(plan.where, table) is None
        out = plan.run(table)
        assert out is not None
        assert out.to_pylist() == rows
