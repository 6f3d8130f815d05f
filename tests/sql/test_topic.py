"""The topic compiler: TDengine's accept/reject rules with exact error classes and
positions, SELECT * expansion, output names and types, stable-topic tag filters, and a
differential check of the compiled SQL against plain DuckDB."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from sqltopic.errors import (
    InvalidTopicQuery,
    NotFoundError,
    SqlError,
    SqlSyntaxError,
    TopicNotStateless,
)
from sqltopic.sql import layout
from sqltopic.sql.model import Catalog, Column, Database, SuperTable, Table, Topic
from sqltopic.sql.parse import parse
from sqltopic.sql.statements import CreateTopic
from sqltopic.sql.topic import (
    TBNAME_LENGTH,
    UNKNOWN_STRING_LENGTH,
    compile_topic,
    matching_tables,
    topic_schema,
)
from sqltopic.sql.topic import probe as schema_probe
from sqltopic.sql.topic import schema as schema_module
from sqltopic.sql.topic.target import find_target
from sqltopic.sql.types import ColumnType, Precision

# --- the catalog --------------------------------------------------------------------------


def _cols(*spec: str) -> tuple[Column, ...]:
    """`_cols("ts TIMESTAMP", "c1 INT")` -> Columns."""
    return tuple(Column(s.split()[0], ColumnType.parse(s.split(maxsplit=1)[1])) for s in spec)


METERS = _cols("ts TIMESTAMP", "current FLOAT", "voltage INT", "phase FLOAT")
METER_TAGS = _cols("location VARCHAR(64)", "groupid INT")
NTB = _cols(
    "ts TIMESTAMP", "c_bool BOOL", "c_tiny TINYINT", "c_small SMALLINT", "c_int INT",
    "c_big BIGINT", "c_utiny TINYINT UNSIGNED", "c_usmall SMALLINT UNSIGNED",
    "c_uint INT UNSIGNED", "c_ubig BIGINT UNSIGNED", "c_float FLOAT", "c_double DOUBLE",
    "c_bin BINARY(16)", "c_var VARCHAR(32)", "c_nchar NCHAR(8)",
)  # fmt: skip
# As TDengine's create_wrong_topic.py: every numeric type, tag t0.
WIDE = _cols(
    "ts TIMESTAMP", "col1 TINYINT", "col2 SMALLINT", "col3 INT", "col4 BIGINT",
    "col5 TINYINT UNSIGNED", "col6 SMALLINT UNSIGNED", "col7 INT UNSIGNED",
    "col8 BIGINT UNSIGNED", "col9 FLOAT", "col10 DOUBLE",
)  # fmt: skip
# As TDengine's test_topic.py and stbFilterWhere.py (tmqCommon's default stable).
STB = _cols("ts TIMESTAMP", "c1 INT", "c2 FLOAT", "c3 BINARY(16)")
STB_TAGS = _cols("t1 INT", "t2 INT", "t3 INT", "t4 BINARY(20)", "t5 BINARY(20)")


DATABASES: tuple[tuple[str, Precision], ...] = (
    ("power", "ms"), ("dbt", "ms"), ("fine", "ns"), ("micro", "us"),
)  # fmt: skip


def _add_stable(cat: Catalog, db: str, name: str, cols: Any, tags: Any) -> None:
    cat.stables[(db, name)] = SuperTable(db, name, cols, tags, 0)


def _add_child(cat: Catalog, db: str, name: str, stable: str) -> None:
    cat.tables[(db, name)] = Table(db, name, 1, 0, stable=stable)


@pytest.fixture
def catalog() -> Catalog:
    cat = Catalog()
    for db, precision in DATABASES:
        cat.databases[db] = Database(db, (1, 2), precision, {}, 0)
    _add_stable(cat, "power", "meters", METERS, METER_TAGS)
    _add_child(cat, "power", "d1001", "meters")
    _add_child(cat, "power", "d1002", "meters")
    cat.tables[("power", "ntb")] = Table("power", "ntb", 1, 0, columns=NTB)
    _add_stable(cat, "power", "wide", WIDE, _cols("t0 INT"))
    _add_child(cat, "power", "wide_tb1", "wide")
    _add_stable(cat, "dbt", "stb", STB, STB_TAGS)
    _add_child(cat, "dbt", "ctb0", "stb")
    cat.tables[("dbt", "ntb0")] = Table("dbt", "ntb0", 1, 0, columns=STB)
    for db in ("fine", "micro"):
        cat.tables[(db, "t")] = Table(db, "t", 1, 0, columns=_cols("ts TIMESTAMP", "v INT"))
    return cat


def create(catalog: Catalog, text: str, current_db: str | None = "power") -> Topic:
    """Compile the last statement of `text` (earlier ones only place it in the text)."""
    stmt = parse(text)[-1]
    assert isinstance(stmt, CreateTopic)
    return compile_topic(stmt, catalog, current_db=current_db, owner="root", now_us=7)


def refused(catalog: Catalog, text: str, current_db: str | None = "power") -> SqlError:
    with pytest.raises(SqlError) as info:
        create(catalog, text, current_db)
    return info.value


def column_of(sql: str, marker: str) -> int:
    """The 1-based column where `marker` first occurs in a one-line statement."""
    assert marker in sql, marker
    return sql.index(marker) + 1


# --- query topics: accepted ----------------------------------------------------------------

ACCEPTED: list[tuple[str, list[str] | None]] = [
    # TDengine's test_topic.py
    ("select ts, c3 from dbt.stb", ["ts", "c3"]),
    ("select ts, c1, c2, c3 from dbt.stb", ["ts", "c1", "c2", "c3"]),
    ("select ts, abs(c1), sin(c2) from dbt.stb", ["ts", "abs(c1)", "sin(c2)"]),
    ("select ts, c3 from dbt.ctb0", ["ts", "c3"]),
    ("select * from dbt.ctb0", ["ts", "c1", "c2", "c3"]),
    ("select ts, abs(c1), sin(c2) from dbt.ctb0", ["ts", "abs(c1)", "sin(c2)"]),
    ("select * from dbt.ntb0", ["ts", "c1", "c2", "c3"]),
    ("select ts, abs(c1), sin(c2) from dbt.ntb0", ["ts", "abs(c1)", "sin(c2)"]),
    # docs/sql.md
    (
        "select ts, current, voltage, location from power.meters where voltage > 220",
        ["ts", "current", "voltage", "location"],
    ),
    # tags and tbname, of a super and of a child table
    ("select ts, tbname, groupid from meters", ["ts", "tbname", "groupid"]),
    ("select ts, location from d1001", ["ts", "location"]),
    # qualified columns, aliases, backticks, case-insensitive names
    ("select meters.voltage, power.meters.ts from meters", ["voltage", "ts"]),
    ("select m.voltage from meters m where m.groupid = 2", ["voltage"]),
    ("select `Voltage`, CURRENT as Amps from METERS", ["voltage", "amps"]),
    # arithmetic, CASE, comparisons, boolean logic, IN, BETWEEN, IS NULL, LIKE, CAST
    (
        "select current*2, voltage + 1, -voltage, voltage % 7, voltage / 2, phase - current "
        "from meters",
        ["current*2", "voltage + 1", "-voltage", "voltage % 7", "voltage / 2", "phase - current"],
    ),
    (
        "select case when voltage > 220 then 'high' else 'ok' end as level from meters "
        "where (voltage in (219, 220) or phase between 0.1 and 0.3) and location is not null "
        "and location like 'Cal%' and not groupid <> 2",
        ["level"],
    ),
    (
        "select cast(voltage as bigint), cast(current as int), cast(voltage as binary(10)), "
        "cast(voltage as nchar(4)) from meters",
        [
            "cast(voltage as bigint)",
            "cast(current as int)",
            "cast(voltage as binary(10))",
            "cast(voltage as nchar(4))",
        ],
    ),
    # TDengine's scalar functions (test_tmq_cons2_v4_tn.py) and string functions
    (
        "select abs(current), acos(phase), asin(phase), atan(phase), ceil(current), "
        "cos(phase), floor(current), log(current), log(current, 2), pow(voltage, 2), "
        "round(current), sin(phase), sqrt(current), tan(phase) from meters",
        [
            "abs(current)",
            "acos(phase)",
            "asin(phase)",
            "atan(phase)",
            "ceil(current)",
            "cos(phase)",
            "floor(current)",
            "log(current)",
            "log(current, 2)",
            "pow(voltage, 2)",
            "round(current)",
            "sin(phase)",
            "sqrt(current)",
            "tan(phase)",
        ],
    ),
    (
        "select length(location), char_length(location), lower(location), upper(location), "
        "ltrim(location), rtrim(location), concat(location, tbname), "
        "concat_ws('-', location, tbname), substr(location, 2), substr(location, 2, 3) "
        "from meters",
        [
            "length(location)",
            "char_length(location)",
            "lower(location)",
            "upper(location)",
            "ltrim(location)",
            "rtrim(location)",
            "concat(location, tbname)",
            "concat_ws('-', location, tbname)",
            "substr(location, 2)",
            "substr(location, 2, 3)",
        ],
    ),
    # timestamps against date-time strings (either quote) and integers
    (
        "select ts from meters where ts > '2018-10-03 14:38:05' and ts < \"2018-10-04\" "
        "and ts >= 1538548685000 and ts between '2018-10-03T14:38:05.000Z' and 1538548695000",
        ["ts"],
    ),
    ('select * from dbt.ntb0 where ts > "2017-08-12 18:25:58.128Z" and sin(c2) > 0.5', None),
    ("select ts from dbt.stb where c1 % 7 == 0", ["ts"]),
]


@pytest.mark.parametrize(("sql", "names"), ACCEPTED)
def test_query_topic_is_accepted(catalog: Catalog, sql: str, names: list[str] | None) -> None:
    topic = create(catalog, f"create topic t as {sql}")
    assert topic.kind == "query"
    assert topic.select_sql.startswith("SELECT ")
    assert topic.select_sql.count('FROM "__batch"') == 1
    if names is not None:
        assert [c.name for c in topic.output] == names
    assert topic_schema(topic, catalog).names == [c.name for c in topic.output]


def test_query_topic_record(catalog: Catalog) -> None:
    text = "create topic volts as select ts, voltage + 1 from power.meters where groupid = 2"
    topic = create(catalog, text, current_db=None)
    assert (topic.name, topic.db, topic.kind, topic.target, topic.meta) == (
        "volts", "power", "query", "meters", "none",
    )  # fmt: skip
    assert (topic.sql, topic.owner, topic.create_us, topic.filter_sql) == (text, "root", 7, None)
    assert topic.select_sql == (
        'SELECT "ts" AS "ts", '
        'TRY("voltage" + 1) AS "voltage + 1" FROM "__batch" WHERE "groupid" = 2'
    )
    assert topic.uses == ("ts", "voltage", "groupid")


# --- query topics: refused -----------------------------------------------------------------

# (statement, error class, where the error points (first occurrence), words of the message)
IQ, NS, NF = InvalidTopicQuery, TopicNotStateless, NotFoundError
REFUSED: list[tuple[str, type[SqlError], str, str]] = [
    ("select distinct ts from meters", IQ, "distinct", "DISTINCT is not allowed"),
    ("select ts from meters group by ts", IQ, "group", "GROUP BY is not allowed"),
    ("select ts from meters order by ts", IQ, "order", "delivers rows in WAL order"),
    ("select ts from meters limit 10", IQ, "limit", "LIMIT is not allowed"),
    ("select ts from meters limit 1 offset 2", IQ, "limit", "LIMIT"),
    ("select ts from meters offset 2", IQ, "offset", "OFFSET is not allowed"),
    ("select ts from meters fetch first 1 rows only", IQ, "1 rows", "LIMIT"),
    ("select ts from meters having ts > 1", IQ, "having", "HAVING"),
    ("select ts from meters qualify ts > 1", IQ, "qualify", "QUALIFY"),
    ("select ts from meters window w as (order by ts)", IQ, "window", "WINDOW"),
    ("with x as (select 1) select ts from meters", IQ, "with", "CTE"),
    ("select ts from meters, d1001", IQ, "d1001", "JOIN is not allowed"),
    ("select ts from meters join d1001 on meters.ts = d1001.ts", IQ, "d1001", "JOIN"),
    ("select ts from meters left join d1001 using (ts)", IQ, "d1001", "JOIN"),
    ("select ts from (select * from meters)", IQ, "select *", "subqueries"),
    ("select ts from meters where voltage in (select 1)", IQ, "select 1", "subqueries"),
    ("select ts, (select 1) from meters", IQ, "select 1", "subqueries"),
    ("select ts from meters where exists (select 1)", IQ, "select 1", "subqueries"),
    ("select ts from meters union select ts from d1001", IQ, "union", "UNION"),
    ("select ts from meters union all select ts from d1001", IQ, "union", "UNION"),
    ("select ts from meters intersect select ts from d1001", IQ, "intersect", "INTERSECT"),
    ("select ts from meters except select ts from d1001", IQ, "except", "EXCEPT"),
    ("select 1", IQ, "select", "add FROM"),
    ("select ts from read_csv('x.csv')", IQ, "read_csv", "one real table"),
    ("select ts from meters tablesample 10%", IQ, "meters", "SAMPLE"),
    ("select * exclude (ts) from meters", IQ, "*", "list the columns"),
    # aggregates and windows: a second, distinct error
    ("select count(*) from meters", NS, "count", "aggregate function COUNT"),
    ("select ts, avg(voltage) from meters", NS, "avg", "AVG"),
    ("select ts from meters where sum(voltage) > 1", NS, "sum", "SUM"),
    ("select abs(max(voltage)) from meters", NS, "max", "MAX"),
    ("select last(voltage) from meters", NS, "last", "LAST"),
    ("select csum(voltage) from meters", NS, "csum", "CSUM"),
    ("select diff(voltage) from meters", NS, "diff", "DIFF"),
    ("select top(voltage, 2) from meters", NS, "top(", "TOP"),
    ("select ts, sum(voltage) over (order by ts) from meters", NS, "sum", "window"),
    ("select ts, row_number() over () from meters", NS, "row_number", "window"),
    ("select count(*) from meters interval(10s)", NS, "interval", "INTERVAL"),
    ("select ts from meters session(ts, 10s)", NS, "session", "SESSION"),
    ("select ts from meters state_window(voltage)", NS, "state_window", "STATE"),
    # names: unknown, reserved, twice
    ("select ts, xx from meters", NF, "xx", "column 'xx' does not exist"),
    ("select ts from meters where xx > 1", NF, "xx", "'xx'"),
    ("select ts, c_int from meters", NF, "c_int", "use one of ts, current"),
    ("select d1001.ts from meters", NF, "d1001", "reads only power.meters"),
    ("select other.meters.ts from meters", NF, "other", "reads only"),
    ("select ts from nosuch", NF, "nosuch", "power.nosuch does not exist"),
    ("select ts from nodb.meters", NF, "nodb", "database 'nodb' does not exist"),
    ("select ts as __x from meters", IQ, "ts as", "reserved"),
    ("select voltage as __tbname from meters", IQ, "voltage", "reserved"),
    ("select ts, ts from meters", IQ, "ts from", "appears twice"),
    ("select *, ts from meters", IQ, "ts from", "appears twice"),
    # what DuckDB cannot do, or a topic cannot deliver
    ("select ts, rand() from meters", IQ, "rand", "function RAND is not allowed in a topic"),
    ("select ts, crc32(location) from meters", IQ, "crc32", "function CRC32 is not supported"),
    ("select read_text('x') from meters", IQ, "read_text", "not supported"),
    ("select leastquares(voltage, 1, 1) from meters", IQ, "leastquares", "LEASTQ"),
    ("select abs(location) from meters", SqlError, "abs", "abs(VARCHAR)"),
    ("select ts - ts from meters", IQ, "ts - ts", "CAST it"),
    ("select ts from meters where ts > 'yesterday'", SqlError, "'yesterday'", "not a timestamp"),
    ("select ts from meters where ts > 1.5", SqlError, "1.5", "not a timestamp"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "cls", "marker", "words"), REFUSED)
def test_query_topic_is_refused(
    catalog: Catalog, sql: str, cls: type[SqlError], marker: str, words: str
) -> None:
    text = f"create topic t as {sql}"
    err = refused(catalog, text)
    assert type(err) is cls, err
    assert (err.line, err.column) == (1, column_of(text, marker)), err
    assert words in err.message
    assert err.sql == text


COLUMNS = [c.name for c in WIDE if c.name != "ts"]


@pytest.mark.parametrize("column", COLUMNS)
@pytest.mark.parametrize("func", ["avg", "spread", "stddev", "sum", "hyperloglog"])
def test_create_wrong_topic_aggregates(catalog: Catalog, func: str, column: str) -> None:
    """TDengine's create_wrong_topic.py: every aggregate over every column is refused."""
    err = refused(catalog, f"create topic tpn as select {func}({column}) from wide")
    assert type(err) is TopicNotStateless
    assert err.column == column_of(f"create topic tpn as select {func}", func)


@pytest.mark.parametrize(
    "call",
    [
        "count(*)",
        "apercentile({c},50)",
        "leastsquares({c},1,1)",
        "HISTOGRAM({c},user_input,[1,3,5,7],0)",
        "percentile({c},1)",
    ],
)
@pytest.mark.parametrize("table", ["wide", "wide_tb1"])
def test_create_wrong_topic_functions(catalog: Catalog, call: str, table: str) -> None:
    for column in COLUMNS:
        sql = f"create topic tpn as select {call.format(c=column)} from {table}"
        err = refused(catalog, sql)
        assert type(err) is TopicNotStateless, sql
        assert err.column == len("create topic tpn as select ") + 1


def test_partition_by_is_an_invalid_topic_query() -> None:
    """PARTITION BY does not parse in the DuckDB-based dialect; it is refused as TDengine
    refuses it, with its position."""
    with pytest.raises(InvalidTopicQuery) as err:
        parse("create topic t as select * from meters partition by tbname")
    assert (err.value.line, err.value.column) == (1, 40)
    assert "PARTITION is not allowed in a topic" in str(err.value)


def test_slimit_does_not_parse() -> None:
    with pytest.raises(SqlSyntaxError):
        parse("create topic t as select ts from meters slimit 1")


def test_no_current_database(catalog: Catalog) -> None:
    err = refused(catalog, "create topic t as select ts from meters", current_db=None)
    assert type(err) is SqlError
    assert "USE db" in err.message
    assert err.column == column_of("create topic t as select ts from meters", "meters")


# --- positions in a longer text -----------------------------------------------------------


def test_error_position_on_a_later_line(catalog: Catalog) -> None:
    text = "USE power;\nCREATE TOPIC t AS\n  SELECT ts,\n         avg(voltage)\n  FROM meters"
    err = refused(catalog, text)
    assert type(err) is TopicNotStateless
    assert (err.line, err.column) == (4, 10)


def test_error_position_after_an_earlier_statement(catalog: Catalog) -> None:
    text = "USE power; CREATE TOPIC t AS SELECT ts FROM meters ORDER BY ts"
    err = refused(catalog, text)
    assert type(err) is InvalidTopicQuery
    assert (err.line, err.column) == (1, column_of(text, "ORDER"))


def test_error_position_in_a_stable_where_on_a_later_line(catalog: Catalog) -> None:
    text = "\n\n  create topic t as stable dbt.stb\n    where t1 > 0 and\n      c1 < 0"
    err = refused(catalog, text)
    assert type(err) is InvalidTopicQuery
    assert (err.line, err.column) == (5, 7)


# --- SELECT *, output names, types and uses ----------------------------------------------


def _names(columns: tuple[Column, ...]) -> list[str]:
    return [c.name for c in columns]


def test_star_of_a_super_table_is_its_columns_then_its_tags(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as select * from meters")
    assert topic.output == METERS + METER_TAGS
    assert topic.uses == tuple(_names(METERS + METER_TAGS))


def test_star_of_child_and_normal_tables_is_their_data_columns(catalog: Catalog) -> None:
    assert create(catalog, "create topic t as select * from d1001").output == METERS
    assert create(catalog, "create topic t as select meters.* from meters").output == (
        METERS + METER_TAGS
    )
    ntb = create(catalog, "create topic t as select * from ntb")
    assert ntb.output == NTB
    assert topic_schema(ntb, catalog) == layout.data_schema(NTB, "ms")


def test_star_is_fixed_at_creation(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as select * from meters")
    stb = catalog.stables[("power", "meters")]
    catalog.stables[("power", "meters")] = SuperTable(
        "power", "meters", (*stb.columns, *_cols("extra INT")), stb.tags, 0
    )
    assert topic_schema(topic, catalog).names == _names(METERS + METER_TAGS)


def test_uses_lists_columns_and_tags_in_catalog_order(catalog: Catalog) -> None:
    topic = create(
        catalog, "create topic t as select tbname, groupid * voltage from meters where ts > 0"
    )
    assert topic.uses == ("ts", "voltage", "groupid")


VARCHAR = ColumnType("VARCHAR", UNKNOWN_STRING_LENGTH)

# (expression over meters, Arrow type, TDengine type)
OUTPUT_TYPES: list[tuple[str, pa.DataType, ColumnType]] = [
    ("ts", pa.timestamp("ms"), ColumnType("TIMESTAMP")),
    ("current", pa.float32(), ColumnType("FLOAT")),
    ("current*2", pa.float32(), ColumnType("FLOAT")),  # DuckDB: FLOAT * INTEGER is FLOAT
    ("current*2.0", pa.float64(), ColumnType("DOUBLE")),  # decimal literals are DOUBLE
    ("voltage+1", pa.int32(), ColumnType("INT")),
    ("voltage/2", pa.float64(), ColumnType("DOUBLE")),
    ("1.5 * voltage", pa.float64(), ColumnType("DOUBLE")),
    ("voltage > 220", pa.bool_(), ColumnType("BOOL")),
    ("location", pa.string(), ColumnType("VARCHAR", 64)),
    ("location as place", pa.string(), ColumnType("VARCHAR", 64)),
    ("tbname", pa.string(), ColumnType("VARCHAR", TBNAME_LENGTH)),
    ("concat(location, 'x')", pa.string(), VARCHAR),
    ("lower(location)", pa.string(), VARCHAR),
    ("length(location)", pa.int64(), ColumnType("BIGINT")),
    ("log(current)", pa.float64(), ColumnType("DOUBLE")),
    ("cast(voltage as bigint)", pa.int64(), ColumnType("BIGINT")),
    ("cast(voltage as binary(8))", pa.string(), VARCHAR),
    ("cast(ts as timestamp)", pa.timestamp("ms"), ColumnType("TIMESTAMP")),
    ("cast(voltage as int unsigned)", pa.uint32(), ColumnType("INT UNSIGNED")),
]


@pytest.mark.parametrize(("expr", "arrow", "kind"), OUTPUT_TYPES)
def test_output_types(catalog: Catalog, expr: str, arrow: pa.DataType, kind: ColumnType) -> None:
    topic = create(catalog, f"create topic t as select {expr} from meters")
    assert [c.type for c in topic.output] == [kind]
    assert topic_schema(topic, catalog).types == [arrow]


def test_plain_columns_keep_their_catalog_types(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as select c_nchar, c_bin, c_ubig, c_var from ntb")
    assert [c.type.sql() for c in topic.output] == [
        "NCHAR(8)", "VARCHAR(16)", "BIGINT UNSIGNED", "VARCHAR(32)",
    ]  # fmt: skip


def test_output_names_are_the_alias_the_column_or_the_text(catalog: Catalog) -> None:
    topic = create(
        catalog,
        "create topic t as select meters.Voltage, current  *  2, ABS(phase) AS P, "
        "(voltage + 1) from meters",
    )
    assert _names(topic.output) == ["voltage", "current  *  2", "p", "(voltage + 1)"]


# --- stable topics --------------------------------------------------------------------------

STABLE_ACCEPTED = [
    # TDengine's test_topic.py
    "t1 > 0",
    "t1 > 0 and t1 < 0",
    "1 > 0",
    "abs(t1) > 0",
    "tbname is not null",
    "tbname > 'a'",
    # stbFilterWhere.py
    "2 > 1",
    "t4 = 'beijing'",
    "t4 > t3",
    "t3 = t4",
    # more
    "false",
    "stb.t1 in (1, 2) and lower(t4) like 'bei%'",
]


@pytest.mark.parametrize("cond", STABLE_ACCEPTED)
def test_stable_topic_is_accepted(catalog: Catalog, cond: str) -> None:
    topic = create(catalog, f"create topic t as stable dbt.stb where {cond}")
    assert (topic.kind, topic.db, topic.target, topic.output) == ("stable", "dbt", "stb", ())
    assert topic.filter_sql is not None


STABLE_REFUSED: list[tuple[str, type[SqlError], str, str]] = [
    ("last(t1) > 0", TopicNotStateless, "last", "LAST"),
    ("sum(t1) > 0", TopicNotStateless, "sum", "SUM"),
    ("tbname > 0 and xx < 0", NotFoundError, "xx", "column 'xx' does not exist"),
    ("tbname > 0 and c1 < 0", InvalidTopicQuery, "c1", "'c1' is a data column"),
    ("c1 = 4 and t1 = 3", InvalidTopicQuery, "c1", "only tags, tbname and constants"),
    ("ts > 0", InvalidTopicQuery, "ts", "data column"),
    ("t1 in (select 1)", InvalidTopicQuery, "select", "subqueries"),
    ("ctb0.t1 > 0", NotFoundError, "ctb0", "reads only dbt.stb"),
    ("abs(t4) > 0", SqlError, "abs", "abs(VARCHAR)"),
]


@pytest.mark.parametrize(("cond", "cls", "marker", "words"), STABLE_REFUSED)
def test_stable_topic_where_is_refused(
    catalog: Catalog, cond: str, cls: type[SqlError], marker: str, words: str
) -> None:
    prefix = "create topic t as stable dbt.stb where "
    err = refused(catalog, prefix + cond)
    assert type(err) is cls, err
    assert (err.line, err.column) == (1, len(prefix) + cond.index(marker) + 1)
    assert words in err.message


@pytest.mark.parametrize(
    ("target", "cls", "words"),
    [
        ("dbt.ctb0", InvalidTopicQuery, "Only super tables"),
        ("dbt.ntb0", InvalidTopicQuery, "is a normal table"),
        ("dbt.nosuch", NotFoundError, "does not exist"),
        ("nodb.stb", NotFoundError, "database 'nodb'"),
    ],
)
def test_stable_topic_needs_a_super_table(
    catalog: Catalog, target: str, cls: type[SqlError], words: str
) -> None:
    text = f"create topic t with meta as stable {target}"
    err = refused(catalog, text)
    assert type(err) is cls
    assert words in err.message
    assert err.column == column_of(text, target)


def test_stable_topic_without_where(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t only meta as stable meters")
    assert (topic.meta, topic.filter_sql, topic.uses, topic.target) == ("only", None, (), "meters")


def test_stable_topic_filter_sql(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as stable dbt.stb where t4 > t3 and abs(t1) > 0")
    assert topic.filter_sql == 'TRY(TRY_CAST("t4" AS DOUBLE) > "t3" AND ABS("t1") > 0)'


def test_only_query_topics_have_a_schema(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as stable meters")
    with pytest.raises(SqlError, match="not a query topic"):
        topic_schema(topic, catalog)


def test_stable_topic_uses_the_tags_it_names(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as stable dbt.stb where t4 = 'x' or t1 > tbname")
    assert topic.uses == ("t1", "t4")


def _stb_tags(rows: list[tuple[str, int | None, str | None]]) -> pa.Table:
    """tags of dbt.stb: (tbname, t1 = t2 = t3, t4)."""
    schema = layout.tags_schema(STB_TAGS, "ms")
    columns: list[list[Any]] = [[r[0] for r in rows]]
    columns += [[r[1] for r in rows]] * 3
    columns += [[r[2] for r in rows], [None] * len(rows)]
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


TAGS = _stb_tags([("ctb0", 0, "beijing"), ("ctb1", 1, "3"), ("ctb2", None, None), ("x9", 5, "7")])


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        (None, ["ctb0", "ctb1", "ctb2", "x9"]),
        ("t1 > 0", ["ctb1", "x9"]),
        ("t1 > 0 and t1 < 0", []),
        ("1 > 0", ["ctb0", "ctb1", "ctb2", "x9"]),
        ("false", []),
        ("abs(t1) > 0", ["ctb1", "x9"]),
        ("tbname is not null", ["ctb0", "ctb1", "ctb2", "x9"]),
        ("tbname > 'ctb1'", ["ctb2", "x9"]),
        ("t4 = 'beijing'", ["ctb0"]),
        ("t4 > t3", ["ctb1", "x9"]),  # a string compares with a number as a number
        ("t3 = t4", []),
        ("tbname like 'ctb%' and t1 in (0, 5)", ["ctb0"]),
    ],
)
def test_matching_tables(catalog: Catalog, cond: str | None, expected: list[str]) -> None:
    where = f" where {cond}" if cond else ""
    topic = create(catalog, f"create topic t as stable dbt.stb{where}")
    con = duckdb.connect()
    assert matching_tables(topic, TAGS, con) == expected


def test_matching_tables_on_per_thread_cursors(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as stable dbt.stb where t1 >= 1")
    con = duckdb.connect()

    def run(_: int) -> list[str]:
        cursor = con.cursor()
        try:
            return matching_tables(topic, TAGS, cursor)
        finally:
            cursor.close()

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(run, range(32))) == [["ctb1", "x9"]] * 32


# --- database topics ----------------------------------------------------------------------


def test_database_topic(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t with meta as database power", current_db=None)
    assert (topic.kind, topic.db, topic.meta, topic.target, topic.uses) == (
        "database", "power", "with", None, (),
    )  # fmt: skip


def test_database_topic_needs_the_database(catalog: Catalog) -> None:
    text = "create topic t as database nodb"
    err = refused(catalog, text)
    assert type(err) is NotFoundError
    assert err.column == column_of(text, "nodb")


# --- timestamps -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("db", "literal", "expected"),
    [
        ("power", "1538548685000", "CAST('2018-10-03 06:38:05.000' AS TIMESTAMP)"),
        ("power", "'2018-10-03 14:38:05'", "CAST('2018-10-03 14:38:05.000' AS TIMESTAMP)"),
        ("power", "'2018-10-03 14:38:05.1239'", "CAST('2018-10-03 14:38:05.123' AS TIMESTAMP)"),
        ("power", "'2018-10-03T14:38:05+08:00'", "CAST('2018-10-03 06:38:05.000' AS TIMESTAMP)"),
        ("power", "'2018-10-03T14:38:05.5-0130'", "CAST('2018-10-03 16:08:05.500' AS TIMESTAMP)"),
        ("power", "-1", "CAST('1969-12-31 23:59:59.999' AS TIMESTAMP)"),
        ("micro", "1538548685000001", "CAST('2018-10-03 06:38:05.000001' AS TIMESTAMP)"),
        (
            "fine",
            "'2018-10-03 14:38:05.123456789Z'",
            "CAST('2018-10-03 14:38:05.123456789' AS TIMESTAMP_NS)",
        ),
    ],
)
def test_timestamp_literals(catalog: Catalog, db: str, literal: str, expected: str) -> None:
    table = "meters" if db == "power" else "t"
    topic = create(catalog, f"create topic x as select ts from {db}.{table} where ts > {literal}")
    assert topic.select_sql.endswith(f'WHERE "ts" > {expected}')


def test_literal_on_the_left_of_a_timestamp(catalog: Catalog) -> None:
    topic = create(catalog, "create topic x as select ts from meters where 0 < ts")
    assert topic.select_sql.endswith("WHERE CAST('1970-01-01 00:00:00.000' AS TIMESTAMP) < \"ts\"")


# --- differential: the compiled SQL over a batch equals plain DuckDB over a table -------------

BATCH_ROWS: list[tuple[Any, ...]] = [
    # ts, current, voltage, phase, location, groupid, tbname
    (1538548685000, 10.3, 219, 0.31, "California.SanFrancisco", 2, "d1001"),
    (1538548686500, 12.6, 218, 0.33, "California.SanFrancisco", 2, "d1001"),
    (1538548685500, 10.2, 220, 0.23, "California.LosAngeles", 3, "d1002"),
    (1538548696600, 13.4, 223, 0.29, "Zürich", 3, "d1003"),
    (1538548696650, None, None, None, None, None, "d1004"),
    (1538548695000, 11.8, 221, 0.28, "California.LosAngeles", None, "d1002"),
    (1538577490000, 0.1, 2147483647, 0.0, "", 2, "d1001"),
]


def _batch() -> pa.Table:
    schema = layout.batch_schema(METERS, METER_TAGS, "ms")
    columns = list(zip(*BATCH_ROWS, strict=True))
    return pa.Table.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


@pytest.fixture
def duck() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    con.execute("SET python_enable_replacements=false")
    batch = _batch()
    con.register(layout.BATCH, batch)
    con.register("meters", batch)
    return con


# (topic SELECT, the equivalent plain DuckDB SELECT over table `meters`)
DIFFERENTIAL: list[tuple[str, str]] = [
    ("select ts, current, voltage from meters where voltage > 219", "same"),
    ("select * from meters", "select ts, current, voltage, phase, location, groupid from meters"),
    (
        "select ts, current * 2, -phase, voltage % 7, voltage / 2, phase - current, tbname "
        "from meters where voltage < 2147483647",
        "same",
    ),
    (
        "select case when voltage > 220 then 'high' else 'ok' end, abs(phase), round(current), "
        "ceil(current), floor(current), sin(phase), cos(phase) from meters "
        "where location like 'Cal%' or location is null",
        "same",
    ),
    (
        "select ts, log(current), log(current, 2), pow(voltage, 2), sqrt(current), "
        "atan(phase) from meters",
        "select ts, ln(current), log(2, current), pow(voltage, 2), sqrt(current), "
        "atan(phase) from meters",
    ),
    (
        "select length(location), char_length(location), lower(location), upper(location), "
        "concat(location, '-', tbname), concat_ws('/', location, tbname), "
        "substr(location, 2, 3), ltrim(location), rtrim(location) from meters",
        "select strlen(location), length(location), lower(location), upper(location), "
        "location || '-' || tbname, location || '/' || tbname, substr(location, 2, 3), "
        "ltrim(location), rtrim(location) from meters",
    ),
    (
        "select ts, tbname from meters where ts > '2018-10-03 06:38:06' "
        "and ts <= 1538548696600 and groupid in (2, 3) and phase is not null",
        "select ts, tbname from meters where ts > TIMESTAMP '2018-10-03 06:38:06' "
        "and ts <= epoch_ms(1538548696600) and groupid in (2, 3) and phase is not null",
    ),
    (
        "select ts, voltage from meters where voltage between 218 and 221 or location is null",
        "same",
    ),
    (
        "select cast(voltage as bigint), cast(current as int), cast(voltage as binary(10)) "
        "from meters where current > 10.3",
        # C's conversion truncates toward zero (DuckDB's CAST rounds)
        "select cast(voltage as bigint), cast(trunc(current) as int), "
        "cast(voltage as varchar) from meters where current > 10.3::double",
    ),
    (
        "select m.voltage as v, m.groupid * 2 from meters m where not m.groupid <> 2",
        "select voltage as v, groupid * 2 from meters where not groupid <> 2",
    ),
]


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Row lists equal, NaN equal to NaN."""

    def norm(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    return [tuple(map(norm, r)) for r in a] == [tuple(map(norm, r)) for r in b]


@pytest.mark.parametrize(("topic_sql", "plain_sql"), DIFFERENTIAL)
def test_compiled_sql_matches_plain_duckdb(
    catalog: Catalog, duck: duckdb.DuckDBPyConnection, topic_sql: str, plain_sql: str
) -> None:
    topic = create(catalog, f"create topic t as {topic_sql}")
    got = duck.sql(topic.select_sql).to_arrow_table()
    plain = duck.sql(topic_sql if plain_sql == "same" else plain_sql).fetchall()
    rows = [tuple(r.values()) for r in got.to_pylist()]
    assert _same(rows, plain)
    assert got.schema == topic_schema(topic, catalog)


def test_a_row_that_would_fail_yields_null(
    catalog: Catalog, duck: duckdb.DuckDBPyConnection
) -> None:
    """voltage + 1 overflows INT on the last row, voltage % 0 divides by zero: NULL, not an
    error that would stop every poll of the topic."""
    topic = create(catalog, "create topic t as select voltage + 1, voltage % 0 from meters")
    got = duck.sql(topic.select_sql).to_arrow_table()
    assert got.column(0).to_pylist() == [220, 219, 221, 224, None, 222, None]
    assert set(got.column(1).to_pylist()) == {None}


def test_batch_with_columns_added_later(catalog: Catalog) -> None:
    topic = create(catalog, "create topic t as select * from meters where voltage > 219")
    wider = _batch().append_column("extra", pa.array([1] * len(BATCH_ROWS), pa.int32()))
    con = duckdb.connect()
    con.register(layout.BATCH, wider)
    got = con.sql(topic.select_sql).to_arrow_table()
    assert got.schema.names == _names(METERS + METER_TAGS)
    assert got.num_rows == 4


@pytest.mark.parametrize("precision", ["ms", "us", "ns"])
def test_batch_timestamps_in_each_precision(catalog: Catalog, precision: Precision) -> None:
    db = {"ms": "power", "us": "micro", "ns": "fine"}[precision]
    catalog.tables[(db, "t")] = Table(db, "t", 1, 0, columns=_cols("ts TIMESTAMP", "v INT"))
    scale = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[precision]
    topic = create(
        catalog,
        f"create topic x as select ts, v from {db}.t "
        f"where ts >= '2018-10-03 14:38:05.001' and ts < {1538577486 * scale}",
    )
    stamps = [1538577485 * scale + scale // 1000 * k for k in (0, 1, 2, 999, 1000)]
    schema = layout.batch_schema(_cols("ts TIMESTAMP", "v INT"), (), precision)
    batch = pa.Table.from_arrays(
        [pa.array(stamps, schema.field("ts").type), pa.array(range(5), pa.int32()),
         pa.array(["t"] * 5)], schema=schema,
    )  # fmt: skip
    con = duckdb.connect()
    con.register(layout.BATCH, batch)
    assert con.sql(topic.select_sql).to_arrow_table().column("v").to_pylist() == [1, 2, 3]


def test_event_window_is_a_stateful_topic() -> None:
    """EVENT_WINDOW's START WITH would parse as a hierarchical query; it is refused first,
    as TDengine refuses windows in topics."""
    with pytest.raises(TopicNotStateless) as err:
        parse(
            "create topic t as select ts from meters event_window start with v > 1 end with v < 1"
        )
    assert (err.value.line, err.value.column) == (1, 41)


def test_create_topic_remembers_the_schema_its_reads_ask_for(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = create(catalog, "create topic w as select ts, voltage * 2 AS v2 from power.meters")
    target = find_target(catalog, created.db, created.target or "")
    probed = schema_probe.Probe(layout.BATCH, target.batch_schema())
    try:
        expected = pa.schema(list(probed.run(created.select_sql)))
    finally:
        probed.close()

    def no_probe(*args: object) -> None:
        raise AssertionError("a read of a new topic made a probe")

    monkeypatch.setattr(schema_module, "Probe", no_probe)
    assert topic_schema(created, catalog) == expected  # from what CREATE TOPIC noted
