"""TDengine's durations, NOW and scalar functions in the parser and the topic compiler,
table-driven: what parses to what, and what is refused, with which error and where.
Meanings: docs/en/14-reference/03-taos-sql/22-function.md (taosdata/TDengine)."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery, SqlError, SqlSyntaxError
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.functions import FUNCTIONS, Duration
from sqltopic.sql.model import Catalog, Column, Database, Table
from sqltopic.sql.parse import parse
from sqltopic.sql.statements import CreateTopic
from sqltopic.sql.topic import SCALAR_FUNCTIONS, compile_topic
from sqltopic.sql.types import ColumnType

# (text, the durations it holds as (amount, unit))
DURATIONS = [
    ("SELECT ts FROM t WHERE ts > now - 36500d", [(36500, "d")]),
    ("SELECT timetruncate(c6, 1s), timediff(c6, ts, 1s) FROM t", [(1, "s"), (1, "s")]),
    ("SELECT 1b, 1u, 1a, 1s, 1m, 1h, 1d, 1w", [(1, u) for u in "buasmhdw"]),
    ("SELECT 10m + 2h", [(10, "m"), (2, "h")]),
    ("SELECT 1D", [(1, "d")]),  # unit letters are case-insensitive, as keywords
    ("SELECT 1 s", []),  # a space between: the number aliased as s
    ("SELECT 1e5, 1.5, 0x10", []),  # exponents, decimals, hex: numbers
    ("SELECT 1x", []),  # not a unit
]


@pytest.mark.parametrize(("sql", "durations"), DURATIONS, ids=[d[0] for d in DURATIONS])
def test_durations_parse(sql: str, durations: list[tuple[int, str]]) -> None:
    try:
        tree = sqlglot.parse_one(sql, read=TDengine)
    except sqlglot.errors.ParseError:
        assert not durations
        return
    found = [(d.amount, d.unit) for d in tree.find_all(Duration)]
    assert sorted(found) == sorted(durations)
    if durations:  # written back as TDengine writes them
        assert all(f"{a}{u}" in tree.sql(dialect=TDengine) for a, u in durations)


def test_a_duration_keeps_its_position() -> None:
    tree = sqlglot.parse_one("SELECT a FROM t WHERE ts > now - 36500d", read=TDengine)
    duration = next(tree.find_all(Duration))
    assert duration.meta["start"] == len("SELECT a FROM t WHERE ts > now - ")


def test_every_function_of_the_reference_is_in_the_catalogue() -> None:
    """The Single Row Functions of 22-function.md: each is exact or refused by name."""
    documented = {
        "abs", "acos", "asin", "atan", "ceil", "cos", "floor", "greatest", "least", "log",
        "pow", "round", "sin", "sqrt", "tan", "pi", "truncate", "exp", "ln", "mod", "rand",
        "sign", "degrees", "radians", "crc32", "char_length", "concat", "concat_ws",
        "length", "lower", "ltrim", "rtrim", "trim", "substring", "substr",
        "substring_index", "upper", "char", "ascii", "position", "replace", "repeat",
        "to_base64", "cast", "to_iso8601", "to_json", "to_unixtimestamp", "to_char",
        "to_timestamp", "now", "timediff", "timetruncate", "timezone", "today", "week",
        "weekofyear", "weekday", "dayofweek",
    }  # fmt: skip
    assert documented <= set(FUNCTIONS)
    for name in documented:
        spec = FUNCTIONS[name]
        assert (spec.build is None) == bool(spec.refused), name


# --- the topic compiler -----------------------------------------------------------------

COLS = tuple(
    Column(n, ColumnType.parse(t))
    for n, t in (("ts", "TIMESTAMP"), ("c1", "INT"), ("c3", "DOUBLE"), ("c6", "TIMESTAMP"),
                 ("s", "VARCHAR(20)"))
)  # fmt: skip


def _catalog(precision: str = "ms") -> Catalog:
    cat = Catalog()
    cat.databases["db"] = Database("db", (1,), precision, {}, 0)  # type: ignore[arg-type]
    cat.tables[("db", "t")] = Table("db", "t", 1, 0, columns=COLS)
    return cat


def _compile(select: str, precision: str = "ms") -> str:
    stmt = parse(f"CREATE TOPIC x AS {select}")[-1]
    assert isinstance(stmt, CreateTopic)
    topic = compile_topic(stmt, _catalog(precision), current_db="db", owner="root", now_us=0)
    return topic.select_sql


# The failures of issue 13: each now compiles (the property tests check the values).
ACCEPTED = [
    "SELECT to_iso8601(ts, '+00:00') FROM t",
    "SELECT greatest(c1, 2), least(c1, 2) FROM t",
    "SELECT truncate(c3, 0) FROM t",
    "SELECT now(), today(), now FROM t",
    "SELECT timetruncate(c6, 1s), timediff(c6, ts, 1s) FROM t",
    "SELECT ts FROM t WHERE ts > now - 36500d",
    "SELECT ts FROM t WHERE ts < now",
    "SELECT substring('tdengine', 0), substring('tdengine', -3, -3) FROM t",
    "SELECT ts + 1s, ts - 1a, now() + 1w FROM t",
]


@pytest.mark.parametrize("select", ACCEPTED)
def test_issue_13_forms_compile(select: str) -> None:
    assert "__batch" in _compile(select)


def test_now_in_a_topic_is_the_time_of_each_read() -> None:
    """NOW is DuckDB's clock of the query, never a constant fixed at creation."""
    sql = _compile("SELECT ts FROM t WHERE ts > now - 1d")
    assert "GET_CURRENT_TIMESTAMP()" in sql
    assert "td:now" in sql


# (SELECT, error class, text where the error points, words of the message)
REFUSED = [
    ("SELECT rand() FROM t", InvalidTopicQuery, "rand", "RAND is not allowed in a topic"),
    ("SELECT crc32(s) FROM t", InvalidTopicQuery, "crc32", "DuckDB has no CRC-32"),
    ("SELECT to_json(s) FROM t", InvalidTopicQuery, "to_json", "no JSON type"),
    ("SELECT to_char(ts, 'yyyy') FROM t", InvalidTopicQuery, "to_char", "TO_CHAR"),
    ("SELECT to_timestamp(s, 'yyyy') FROM t", InvalidTopicQuery, "to_timestamp", "TO_TIMESTAMP"),
    ("SELECT timetruncate(ts, 2s) FROM t", InvalidTopicQuery, "2s", "must be one of 1b"),
    ("SELECT timetruncate(ts, 1b) FROM t", InvalidTopicQuery, "1b", "finer than the database"),
    ("SELECT timetruncate(ts, 1s, 2) FROM t", InvalidTopicQuery, "2)", "0 or 1"),
    ("SELECT timediff(ts, s) FROM t", InvalidTopicQuery, "s)", "string column"),
    ("SELECT ts + 1b FROM t", InvalidTopicQuery, "1b", "finer than the database"),
    ("SELECT to_iso8601(ts, 'CET') FROM t", InvalidTopicQuery, "'CET'", "time zone"),
    ("SELECT to_iso8601(ts, '+15:00') FROM t", InvalidTopicQuery, "'+15:00'", "out of range"),
    ("SELECT truncate(c3, c1) FROM t", InvalidTopicQuery, "c1)", "integer constant"),
    ("SELECT greatest(c1, s) FROM t", InvalidTopicQuery, "greatest", "CAST the arguments"),
    ("SELECT greatest(c1) FROM t", InvalidTopicQuery, "greatest", "at least 2"),
    ("SELECT concat(s) FROM t", InvalidTopicQuery, "concat", "2 to 8 argument"),
    ("SELECT week(ts, 8) FROM t", InvalidTopicQuery, "8)", "mode must be an integer constant"),
    ("SELECT substring_index(s, s, 1) FROM t", InvalidTopicQuery, "s, 1)", "literal"),
    ("SELECT trim(s FROM s) FROM t", InvalidTopicQuery, "s FROM", "string literal"),
    ("SELECT to_unixtimestamp(s) FROM t", InvalidTopicQuery, "s)", "string literal"),
    ("SELECT timetruncate(ts 1s) FROM t", SqlSyntaxError, "1s", ""),
    ("SELECT md5(s) FROM t", InvalidTopicQuery, "md5", "use one of"),
    ("SELECT 0x10 FROM t", SqlSyntaxError, "0x10", "unsupported token"),
    ("SELECT ts FROM t WHERE c1 = 0b101", SqlSyntaxError, "0b101", "decimal number (5)"),
    ("SELECT repeat(s, 2000000000) FROM t", InvalidTopicQuery, "2000000000", "at most 65517"),
    ("SELECT repeat(s, c1) FROM t", InvalidTopicQuery, "c1)", "integer literal"),
    ("SELECT cast(s AS timestamp) FROM t", InvalidTopicQuery, "cast", "string column"),
    ("SELECT cast(c1 AS date) FROM t", InvalidTopicQuery, "cast", "not supported"),
]  # fmt: skip


@pytest.mark.parametrize(("select", "cls", "marker", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_what_where_and_how(
    select: str, cls: type[SqlError], marker: str, words: str
) -> None:
    text = f"CREATE TOPIC x AS {select}"
    with pytest.raises(SqlError) as info:
        _compile(select)
    err = info.value
    assert type(err) is cls, err
    assert words in err.message
    assert err.line == 1
    assert err.column == text.index(marker) + 1, err


def test_rand_is_no_topic_function_but_the_others_are() -> None:
    assert "rand" not in SCALAR_FUNCTIONS
    assert {"to_iso8601", "greatest", "timetruncate", "now", "today"} <= SCALAR_FUNCTIONS


def test_precision_scales_durations() -> None:
    """`1s` is 1000 ticks in a ms database, 10^9 in a ns one."""
    assert "1000" in _compile("SELECT ts + 1s FROM t", "ms")
    assert "1000000000" in _compile("SELECT ts + 1s FROM t", "ns")
    assert isinstance(exp.Literal.number(1), exp.Literal)
