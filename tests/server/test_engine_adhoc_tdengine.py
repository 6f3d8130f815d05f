"""Ad hoc SELECT as TDengine answers it: result columns named as written, system
information functions, and TDengine's result types (BIGINT for a SUM of integers,
DOUBLE for decimal literals and what they compute)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.errors import SqlError
from sqltopic.server.common.result import Session
from sqltopic.server.core.engine import Engine


@pytest.fixture
def t(engine: Engine) -> Engine:
    engine.execute("create database p; use p; create table t (ts timestamp, v int, f float)")
    engine.execute("insert into t values (1, 1, 1.5) (2, 2, 2.5)")
    return engine


@pytest.mark.parametrize(
    ("select", "names"),
    [
        ("select log(8,2) from t", ["log(8,2)"]),
        ("SELECT  LOG( 8 , 2 ), count(*) FROM t", ["LOG( 8 , 2 )", "count(*)"]),
        ("select v, v + 1, v + 1 as w from t", ["v", "v + 1", "w"]),
        ("select *, f * 2 from t", ["ts", "v", "f", "f * 2"]),
        ("select length('ab'), concat('a', v) from t", ["length('ab')", "concat('a', v)"]),
    ],
)
def test_columns_are_named_as_written(t: Engine, select: str, names: list[str]) -> None:
    assert t.execute(select).columns == names


def test_system_functions_answer_for_the_session(t: Engine) -> None:
    result = t.execute(
        "select current_user(), user(), database(), server_status(), server_version()",
        Session(db="p", user="root"),
    )
    (row,) = result.rows
    assert row[:4] == ("root", "root", "p", 1)
    assert isinstance(row[4], str)
    assert row[4]
    assert t.execute("select database()", Session()).rows == [(None,)]


def test_result_types_are_tdengines(t: Engine) -> None:
    result = t.execute("select sum(v), round(8888.88), ceil(1.5), 1.5 * 2, avg(v) from t")
    assert result.table.schema.types == [pa.int64(), *[pa.float64()] * 4]
    assert result.rows == [(3, 8889.0, 2.0, 3.0, 1.5)]
    # the same answer as a topic gives for a decimal literal (a DOUBLE, then rounded)
    assert t.execute("select round(1.005, 2)").rows == [(1.0,)]


def test_whole_numbers_take_the_smallest_tdengine_type_that_holds_them(t: Engine) -> None:
    big = 9223372036854775807
    unsigned = t.execute(f"select sum(v) + {big} from t")
    assert unsigned.table.schema.types == [pa.uint64()]
    assert unsigned.rows == [(3 + big,)]
    beyond = t.execute(f"select sum(v) * {big} from t")  # past BIGINT UNSIGNED: kept exact
    assert pa.types.is_decimal(beyond.table.schema.types[0])
    assert beyond.rows == [(3 * big,)]


def test_a_later_batch_beyond_the_first_ones_type_is_an_error_naming_its_column(
    t: Engine,
) -> None:
    """The type is chosen from the first batch (65,536 rows); a later one that does not
    fit it is refused rather than delivered in another type."""
    for start in range(10, 70_010, 35_000):
        values = " ".join(f"({ts}, 1, 0)" for ts in range(start, start + 35_000))
        t.execute(f"insert into t values {values}")
    sql = (
        "select case when ts < 70000 then sum(v) else sum(v) * 9223372036854775807 * 4 end as s "
        "from t group by ts order by ts"
    )
    with pytest.raises(SqlError, match=r"'s' holds a whole number beyond int64's range"):
        t.execute(sql)


def test_length_counts_four_bytes_a_character_of_an_nchar(engine: Engine) -> None:
    """tests/system-test/2-query/length.py in TDengine: LENGTH of an NCHAR is 4 bytes a
    character (UCS-4), of a VARCHAR its UTF-8 bytes; in a topic as in SELECT."""
    engine.execute(
        "create database n; use n; create stable st (ts timestamp, c nchar(10), b binary(10)) "
        "tags (loc nchar(8)); create table t using st tags ('北京')"
    )
    engine.execute("insert into t values (1, 'héllo', 'héllo')")
    assert engine.execute("select length(c), length(b), length(loc) from st").rows == [(20, 6, 8)]
    engine.execute("create topic tl as select ts, length(c) as lc, length(b) as lb from st")
    topic = engine.state.catalog.topics["tl"]
    assert "4 *" in topic.select_sql
    with pytest.raises(SqlError, match="NCHAR column c"):
        engine.execute("select length(upper(c)) from st")


def test_match_and_nmatch_search_a_regular_expression(engine: Engine) -> None:
    """16-operators.md: `MATCH` / `NMATCH` on tbname and string tags and columns, in
    SELECT, a query topic's WHERE and a stable topic's condition."""
    engine.execute(
        "create database m; use m; create stable st (ts timestamp, v int) "
        "tags (location binary(20)); create table d100 using st tags ('San Jose'); "
        "create table d2 using st tags ('LA')"
    )
    engine.execute("insert into d100 values (1, 1); insert into d2 values (2, 2)")
    assert engine.execute("select tbname from st where tbname match 'd1.0'").rows == [("d100",)]
    assert engine.execute("select tbname from st where location nmatch '^San'").rows == [("d2",)]
    engine.execute("create topic m1 as select ts, v from st where tbname match 'd1' and v > 0")
    engine.execute("create topic m2 as stable st where location match 'San'")
    assert "REGEXP_MATCHES" in engine.state.catalog.topics["m1"].select_sql


def test_stddev_is_the_population_one_and_first_last_are_refused(t: Engine) -> None:
    """TDengine's STDDEV is the population standard deviation; its FIRST/LAST are by
    timestamp, which DuckDB's are not: refused with how to write them."""
    assert t.execute("select stddev(v) from t").rows == [(0.5,)]
    with pytest.raises(SqlError, match=r"arg_min\(x, ts\)"):
        t.execute("select first(v) from t")
    with pytest.raises(SqlError, match="LAST is not supported"):
        t.execute("select last(v) from t")
