"""Property tests: each TDengine scalar function, on generated rows, equals the pure-Python
meaning of tests/sql/tdengine_reference.py (written from TDengine's documentation,
docs/en/14-reference/03-taos-sql/22-function.md), on every evaluation path a value can
take outside Spark: a topic's compiled SQL run by DuckDB (what a vnode runs), the pyarrow
plan of arrow_eval where it applies (it must decline every function), and an ad hoc
SELECT's translation (server/core/query.py's). The Spark path:
tests/spark/test_backfill_functions.py."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from sqltopic.errors import SqlError
from sqltopic.sql import layout
from sqltopic.sql.functions.adhoc import translate_select
from sqltopic.sql.model import Catalog, Column, Database, Table, Topic
from sqltopic.sql.parse import parse
from sqltopic.sql.statements import CreateTopic, Select
from sqltopic.sql.topic import compile_topic
from sqltopic.sql.topic.arrow_eval import arrow_plan
from sqltopic.sql.topic.text import Text, func_name
from sqltopic.sql.types import ColumnType, Precision
from tests.sql import tdengine_reference as td

# Few examples per case: many cases, and each example runs two DuckDB queries.
EXAMPLES = 4
COLUMNS = tuple(
    Column(name, ColumnType.parse(kind))
    for name, kind in (
        ("ts", "TIMESTAMP"), ("t2", "TIMESTAMP"), ("i", "INT"), ("p", "INT"), ("n", "INT"),
        ("d", "DOUBLE"), ("f", "FLOAT"), ("s", "VARCHAR(40)"), ("dl", "VARCHAR(10)"),
    )
)  # fmt: skip
NAMES = [c.name for c in COLUMNS]
Row = dict[str, Any]

# Timestamps from 1900 to 2100 (pre-1970 ones exercise C's negative remainders).
_SECONDS = st.integers(-2_208_988_800, 4_102_444_800)
_TEXT = st.text(alphabet="ab.é北 ", max_size=8)


@st.composite
def rows(draw: st.DrawFn, precision: Precision) -> list[Row]:
    scale = td.TICKS_PER_SECOND[precision]

    def ticks() -> st.SearchStrategy[int]:
        return st.builds(lambda s, f: s * scale + f, _SECONDS, st.integers(0, scale - 1))

    row = st.fixed_dictionaries({
        "ts": ticks(),
        "t2": st.none() | ticks(),
        "i": st.none() | st.integers(-(2**31), 2**31 - 1),
        "p": st.none() | st.integers(-12, 12),
        "n": st.none() | st.integers(-3, 12),
        "d": st.none() | st.floats(-1e6, 1e6, allow_nan=False),
        "f": st.none() | st.floats(-1e4, 1e4, width=32),
        "s": st.none() | _TEXT,
        "dl": st.none() | st.text(alphabet="ab.-1 ", max_size=3),
    })  # fmt: skip
    return draw(st.lists(row, min_size=1, max_size=8))


@dataclass(frozen=True)
class Case:
    id: str
    expr: str
    ref: Callable[[Row, str], Any]
    ticks: bool = False  # the result is a timestamp: compared as ticks
    precisions: tuple[Precision, ...] = ("ms",)


ALL: tuple[Precision, ...] = ("ms", "us", "ns")
EDGES: tuple[Precision, ...] = ("ms", "ns")  # the coarsest and the finest
U = td.unit_ticks


def _week(r: Row, precision: str, mode: int) -> int | None:
    return td.week(r["t2"], precision, mode)


def _div(x: float | None, by: float) -> float | None:
    return None if x is None else x / by


CASES = [
    # strings (22-function.md, String Functions)
    Case("substring_pos", "substring(s, p)", lambda r, _: td.substring(r["s"], r["p"])),
    Case("substring_len", "substring(s, p, n)",
         lambda r, _: td.substring(r["s"], r["p"], r["n"], has_len=True)),
    Case("substr_literal", "substr('tdengine', p, n)",
         lambda r, _: td.substring("tdengine", r["p"], r["n"], has_len=True)),
    Case("substring_index_left", "substring_index(s, 'a', 2)",
         lambda r, _: td.substring_index(r["s"], "a", 2)),
    Case("substring_index_right", "substring_index(s, 'ab', -1)",
         lambda r, _: td.substring_index(r["s"], "ab", -1)),
    Case("substring_index_multibyte", "substring_index(s, '北', -2)",
         lambda r, _: td.substring_index(r["s"], "北", -2)),
    Case("trim_both", "trim(both 'ab' from s)", lambda r, _: td.trim(r["s"], "ab", "both")),
    Case("trim_leading", "trim(leading '.' from s)",
         lambda r, _: td.trim(r["s"], ".", "leading")),
    Case("trim_trailing", "trim(trailing 'a' from s)",
         lambda r, _: td.trim(r["s"], "a", "trailing")),
    Case("ascii", "ascii(s)", lambda r, _: td.ascii_(r["s"])),
    Case("char", "char(p, 77, n)", lambda r, _: td.char(r["p"], 77, r["n"])),
    Case("to_base64", "to_base64(s)", lambda r, _: td.to_base64(r["s"])),
    Case("position", "position(dl in s)", lambda r, _: td.position(r["dl"], r["s"])),
    Case("concat", "concat(s, dl, 'x')", lambda r, _: td.concat(r["s"], r["dl"], "x")),
    Case("lengths", "length(s) * 100 + char_length(s)",
         lambda r, _: None if r["s"] is None else len(r["s"].encode()) * 100 + len(r["s"])),
    # mathematical
    Case("greatest_ints", "greatest(i, p, n)",
         lambda r, _: td.extreme(max, r["i"], r["p"], r["n"])),
    Case("least_floats", "least(d, f)", lambda r, _: td.extreme(min, r["d"], r["f"])),
    Case("greatest_strings", "greatest(s, dl)", lambda r, _: td.extreme(max, r["s"], r["dl"])),
    Case("truncate_int", "truncate(i, -2)", lambda r, _: td.truncate_int(r["i"], -2)),
    Case("truncate_int_keep", "truncate(i, 3)", lambda r, _: td.truncate_int(r["i"], 3)),
    Case("truncate_double", "truncate(d, 1)", lambda r, _: td.truncate_float(r["d"], 1)),
    Case("truncate_double_left", "truncate(d, -2)", lambda r, _: td.truncate_float(r["d"], -2)),
    Case("truncate_float", "truncate(f, 2)",
         lambda r, _: None if r["f"] is None else td.float32(td.truncate_float(r["f"], 2) or 0.0)),
    Case("ln", "ln(d)", lambda r, _: td.ln(r["d"])),
    Case("mod", "mod(i, p)", lambda r, _: td.mod(r["i"], r["p"])),
    Case("mod_operator", "d % n", lambda r, _: td.mod(r["d"], r["n"])),
    Case("sqrt", "sqrt(d)", lambda r, _: td.real(math.sqrt, r["d"])),
    Case("acos", "acos(d / 1000000)", lambda r, _: td.real(math.acos, _div(r["d"], 1e6))),
    Case("exp", "exp(d)", lambda r, _: td.real(math.exp, r["d"])),
    # time and date, in every precision
    Case("timetruncate_s", "timetruncate(ts, 1s)",
         lambda r, pr: td.timetruncate(r["ts"], U("s", pr)), ticks=True, precisions=ALL),
    Case("timetruncate_d", "timetruncate(ts, 1d, 0)",
         lambda r, pr: td.timetruncate(r["ts"], U("d", pr)), ticks=True, precisions=EDGES),
    Case("timetruncate_w", "timetruncate(t2, 1w)",
         lambda r, pr: td.timetruncate(r["t2"], U("w", pr)), ticks=True, precisions=EDGES),
    Case("timediff_h", "timediff(ts, t2, 1h)",
         lambda r, pr: td.timediff(r["ts"], r["t2"], U("h", pr)), precisions=EDGES),
    Case("timediff_ticks", "timediff(ts, t2)", lambda r, _: td.timediff(r["ts"], r["t2"]),
         precisions=EDGES),
    Case("plus_duration", "ts + 1s", lambda r, pr: r["ts"] + U("s", pr), ticks=True,
         precisions=EDGES),
    Case("minus_duration", "t2 - 2d",
         lambda r, pr: None if r["t2"] is None else r["t2"] - 2 * U("d", pr),
         ticks=True, precisions=EDGES),
    Case("to_iso8601", "to_iso8601(ts)", lambda r, pr: td.to_iso8601(r["ts"], pr), precisions=ALL),
    Case("to_iso8601_zone", "to_iso8601(t2, '+08:00')",
         lambda r, pr: td.to_iso8601(r["t2"], pr, "+08:00"), precisions=EDGES),
    Case("to_iso8601_z", "to_iso8601(ts, 'Z')", lambda r, pr: td.to_iso8601(r["ts"], pr, "Z")),
    Case("to_iso8601_minus", "to_iso8601(ts, '-0330')",
         lambda r, pr: td.to_iso8601(r["ts"], pr, "-0330")),
    Case("weekday", "weekday(ts)", lambda r, pr: td.weekday(r["ts"], pr), precisions=EDGES),
    Case("dayofweek", "dayofweek(ts)", lambda r, pr: td.dayofweek(r["ts"], pr)),
    Case("weekofyear", "weekofyear(t2)", lambda r, pr: td.weekofyear(r["t2"], pr)),
    Case("week", "week(ts)", lambda r, pr: td.week(r["ts"], pr, 0)),
    # CAST (C's conversions: castFunction in sclfunc.c)
    Case("cast_double_int", "cast(d as int)", lambda r, _: td.cast_int(r["d"], 32, True)),
    Case("cast_float_uint", "cast(f as int unsigned)",
         lambda r, _: td.cast_int(r["f"], 32, False)),
    Case("cast_int_tinyint", "cast(i as tinyint)", lambda r, _: td.cast_int(r["i"], 8, True)),
    Case("cast_int_ubigint", "cast(i as bigint unsigned)",
         lambda r, _: td.cast_int(r["i"], 64, False)),
    Case("cast_double_binary", "cast(d as binary(9))", lambda r, _: td.cast_text(r["d"], 9)),
    Case("cast_float_varchar", "cast(f as varchar(20))", lambda r, _: td.cast_text(r["f"], 20)),
    Case("cast_ts_bigint", "cast(ts as bigint)", lambda r, _: r["ts"], precisions=EDGES),
    Case("cast_ts_binary", "cast(ts as binary(32))", lambda r, _: str(r["ts"])),
    Case("cast_int_timestamp", "cast(i as timestamp)", lambda r, _: r["i"], ticks=True,
         precisions=EDGES),
    Case("cast_string_int", "cast(dl as bigint)", lambda r, _: td.strtol(r["dl"])),
    Case("cast_string_double", "cast(dl as double)", lambda r, _: td.strtod(r["dl"])),
    Case("cast_string_binary", "cast(s as binary(3))", lambda r, _: td.cast_bytes(r["s"], 3)),
    *(
        Case(f"week_mode{m}", f"week(t2, {m})", functools.partial(_week, mode=m))
        for m in range(1, 8)
    ),
]  # fmt: skip


PARAMS = [(c, pr) for c in CASES for pr in c.precisions]


def _catalog(precision: Precision) -> Catalog:
    cat = Catalog()
    cat.databases["db"] = Database("db", (1,), precision, {}, 0)
    cat.tables[("db", "t")] = Table("db", "t", 1, 0, columns=COLUMNS)
    return cat


@functools.cache
def _topic(expr: str, precision: Precision) -> Topic:
    stmt = parse(f"create topic x as select {expr} as v from t")[-1]
    assert isinstance(stmt, CreateTopic)
    return compile_topic(stmt, _catalog(precision), current_db="db", owner="root", now_us=0)


@functools.cache
def _adhoc_sql(expr: str, precision: Precision) -> str:
    stmt = parse(f"select {expr} as v from t")[-1]
    assert isinstance(stmt, Select)
    tree = stmt.tree.copy()
    text = Text.of(stmt)

    def refuse(message: str, at: exp.Expr | None) -> NoReturn:
        raise text.error(SqlError, message, at)

    schema = layout.data_schema(COLUMNS, precision)
    translate_select(tree, schema, precision, lambda node: func_name(node, text), refuse)
    return tree.sql(dialect="duckdb")


def _batch(data: list[Row], precision: Precision) -> pa.Table:
    schema = layout.batch_schema(COLUMNS, (), precision)
    columns = [[r[name] for r in data] for name in NAMES] + [["t"] * len(data)]
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def _values(column: pa.ChunkedArray, precision: Precision, ticks: bool) -> list[Any]:
    if ticks:
        column = column.cast(pa.timestamp(precision)).cast(pa.int64())
    return list(column.to_pylist())


@functools.cache
def _connection() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    return con


def _run(sql: str, batch: pa.Table, name: str) -> pa.Table:
    con = _connection()
    con.register(name, batch)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister(name)


@pytest.mark.parametrize(("case", "precision"), PARAMS, ids=[f"{c.id}-{p}" for c, p in PARAMS])
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_function_equals_tdengine_meaning_on_every_path(
    case: Case, precision: Precision, data: st.DataObject
) -> None:
    generated = data.draw(rows(precision))
    batch = _batch(generated, precision)
    want = [case.ref(r, precision) for r in generated]
    topic = _topic(case.expr, precision)
    got = _values(_run(topic.select_sql, batch, layout.BATCH).column("v"), precision, case.ticks)
    assert got == want, f"topic: {topic.select_sql}"
    adhoc = _run(_adhoc_sql(case.expr, precision), batch, "t").column("v")
    assert _values(adhoc, precision, case.ticks) == want, "ad hoc SELECT"
    plan = arrow_plan(topic.select_sql)
    assert plan is None, "arrow_eval must leave function calls to DuckDB"


@pytest.mark.parametrize("precision", ALL)
def test_now_and_today_are_the_time_of_the_read(precision: Precision) -> None:
    """NOW is read when the query runs (not when the topic was created)."""
    topic = _topic("timediff(now(), ts) AS a, timediff(today(), ts) AS b, ts > now - 1d", precision)
    scale = td.TICKS_PER_SECOND[precision]
    before = time.time_ns() // (1_000_000_000 // scale)
    got = _run(topic.select_sql, _batch([_zero_row()], precision), layout.BATCH).to_pylist()[0]
    after = time.time_ns() // (1_000_000_000 // scale)
    assert before - scale <= got["a"] <= after  # NOW: a whole microsecond in a ns database
    day = 86_400 * scale
    assert got["b"] == got["a"] - got["a"] % day  # TODAY: the same clock, at UTC midnight
    assert list(got.values())[2] is False  # 1970 is not within the last day


def _zero_row() -> Row:
    return dict.fromkeys(NAMES) | {"ts": 0}


# The last half microsecond of a day (DuckDB rounds a TIMESTAMP_NS to microseconds
# for its date parts: it would count these in the next day), and before the epoch.
LAST_NANOSECONDS = [2_051_222_399_999_999_500, 2_051_222_399_999_999_999, -500, -1]


CALENDAR = [
    ("weekday(ts)", td.weekday),
    ("dayofweek(ts)", td.dayofweek),
    ("weekofyear(ts)", td.weekofyear),
    ("week(ts)", lambda ts, pr: td.week(ts, pr, 0)),
    ("week(ts, 1)", lambda ts, pr: td.week(ts, pr, 1)),
]


@pytest.mark.parametrize(("expr", "ref"), CALENDAR, ids=[e for e, _ in CALENDAR])
def test_calendar_parts_of_a_day_s_last_nanoseconds_are_that_day_s(
    expr: str, ref: Callable[[int, str], int]
) -> None:
    generated = [_zero_row() | {"ts": ts} for ts in LAST_NANOSECONDS]
    batch = _batch(generated, "ns")
    want = [ref(ts, "ns") for ts in LAST_NANOSECONDS]
    topic = _topic(expr, "ns")
    assert _values(_run(topic.select_sql, batch, layout.BATCH).column("v"), "ns", False) == want
    adhoc = _run(_adhoc_sql(expr, "ns"), batch, "t").column("v")
    assert _values(adhoc, "ns", False) == want
