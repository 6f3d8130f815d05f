"""Parameterized topics (sql/topic/params.py): where `?` may stand and the errors
elsewhere, the shared form, binding (conversions, errors, canonical keys), and the
partition of one evaluation among bindings, checked row for row against the topic
compiled with each binding's values written as literals, on both evaluation paths
(pyarrow, sql/topic/arrow_eval.py, and DuckDB, server/core/duck.py), over a batch with NULLs."""

from __future__ import annotations

import json
import math
import random
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from sqltopic.errors import ConfigError, InvalidTopicQuery, NotFoundError, SqlError
from sqltopic.sql import layout
from sqltopic.sql.catalog_store import CatalogStore
from sqltopic.sql.model import Catalog, Column, Database, Param, SuperTable, Table, Topic
from sqltopic.sql.parse import parse
from sqltopic.sql.statements import CreateTopic
from sqltopic.sql.topic import compile_tag_condition, compile_topic, partition, topic_schema
from sqltopic.sql.topic.arrow_eval import arrow_plan
from sqltopic.sql.topic.duck import connect, query
from sqltopic.sql.topic.params import HIDDEN_PREFIX, MAX_IN_VALUES, Binding, bind
from sqltopic.sql.topic.partition import Partitioner
from sqltopic.sql.types import ColumnType

# --- the catalog --------------------------------------------------------------------------


def _cols(*spec: str) -> tuple[Column, ...]:
    return tuple(Column(s.split()[0], ColumnType.parse(s.split(maxsplit=1)[1])) for s in spec)


COLUMNS = _cols(
    "ts TIMESTAMP",
    "current FLOAT",
    "voltage INT",
    "phase DOUBLE",
    "ok BOOL",
    "big BIGINT UNSIGNED",
    "note NCHAR(4)",
    "code VARCHAR(8)",
)
TAGS = _cols("location VARCHAR(16)", "groupid INT", "born TIMESTAMP")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    cat = Catalog()
    cat.databases["power"] = Database("power", (1, 2), "ms", {}, 0)
    cat.databases["other"] = Database("other", (3,), "ms", {}, 0)
    cat.stables[("power", "meters")] = SuperTable("power", "meters", COLUMNS, TAGS, 0)
    for name in ("d1", "d2", "d3"):
        cat.tables[("power", name)] = Table("power", name, 1, 0, stable="meters")
    cat.tables[("power", "ntb")] = Table("power", "ntb", 1, 0, columns=COLUMNS)
    return cat


def create(catalog: Catalog, sql: str, name: str = "t") -> Topic:
    stmt = parse(f"CREATE TOPIC {name} AS {sql}")[-1]
    assert isinstance(stmt, CreateTopic)
    return compile_topic(stmt, catalog, current_db="power", owner="root", now_us=7)


# --- where ? may stand --------------------------------------------------------------------

ACCEPTED: list[tuple[str, list[tuple[str, str, str]], str | None]] = [
    # (SELECT, parameters (name, kind, op), the WHERE left in the shared form)
    ("SELECT * FROM meters WHERE tbname = ?", [("tbname", "tbname", "=")], None),
    ("SELECT * FROM meters WHERE ? = location", [("location", "tag", "=")], None),
    ("SELECT ts FROM meters WHERE groupid IN (?)", [("groupid", "tag", "in")], None),
    (
        "SELECT ts, current FROM meters WHERE tbname = ? AND location = ? AND current > 10",
        [("tbname", "tbname", "="), ("location", "tag", "=")],
        '"current" > 10',
    ),
    (
        "SELECT ts FROM meters WHERE (voltage = ? AND current > 1) AND (ok OR phase < 2)",
        [("voltage", "column", "=")],
        '"current" > 1 AND ("ok" OR "phase" < 2)',
    ),
    ("SELECT ts FROM meters m WHERE m.TBNAME IN (?)", [("tbname", "tbname", "in")], None),
    ("SELECT ts FROM meters WHERE (ts = ?)", [("ts", "column", "=")], None),
    (
        "SELECT ts FROM ntb WHERE code = ? AND note IN (?)",
        [("code", "column", "="), ("note", "column", "in")],
        None,
    ),
    ("SELECT ts FROM d1 WHERE born = ?", [("born", "tag", "=")], None),
]


@pytest.mark.parametrize(("sql", "params", "rest"), ACCEPTED)
def test_parameters_are_taken_out_of_the_where(
    catalog: Catalog, sql: str, params: list[tuple[str, str, str]], rest: str | None
) -> None:
    topic = create(catalog, sql)
    assert [(p.name, p.kind, p.op) for p in topic.params] == params
    hidden = ", ".join(f'"{p[0]}" AS "{HIDDEN_PREFIX}{p[0]}"' for p in params)
    assert f"{hidden} FROM " in topic.select_sql
    if rest is None:
        assert " WHERE " not in topic.select_sql
    else:
        assert topic.select_sql.endswith(f"WHERE {rest}")
    # the output is the topic's own, without the hidden columns
    assert [c.name for c in topic.output] == topic_schema(topic, catalog).names
    assert topic.output_schema == topic_schema(topic, catalog)
    assert not any(n.startswith(HIDDEN_PREFIX) for n in topic.output_schema.names)


def test_parameters_record_their_types_and_uses(catalog: Catalog) -> None:
    topic = create(catalog, "SELECT ts FROM meters WHERE location = ? AND born IN (?)")
    assert topic.params == (
        Param("location", "tag", ColumnType("VARCHAR", 16), "=", "ms"),
        Param("born", "tag", ColumnType("TIMESTAMP"), "in", "ms"),
    )
    assert topic.uses == ("ts", "location", "born")  # the tags the vnode must add
    assert topic.sql == "CREATE TOPIC t AS SELECT ts FROM meters WHERE location = ? AND born IN (?)"


REFUSED: list[tuple[str, type[SqlError], str, str]] = [
    # (text after CREATE TOPIC t AS, error, message part, where the error points)
    ("SELECT ts, ? FROM meters", InvalidTopicQuery, "is in the SELECT list", "?"),
    (
        "SELECT ts FROM meters WHERE tbname = ? OR groupid = 1",
        InvalidTopicQuery,
        "inside an OR",
        "?",
    ),
    ("SELECT ts FROM meters WHERE NOT tbname = ?", InvalidTopicQuery, "inside a NOT", "?"),
    ("SELECT ts FROM meters WHERE current > ?", InvalidTopicQuery, "only = and IN", "?"),
    ("SELECT ts FROM meters WHERE current <> ?", InvalidTopicQuery, "only = and IN", "?"),
    ("SELECT ts FROM meters WHERE code LIKE ?", InvalidTopicQuery, "only = and IN", "?"),
    (
        "SELECT ts FROM meters WHERE voltage BETWEEN ? AND 3",
        InvalidTopicQuery,
        "only = and IN",
        "?",
    ),
    (
        "SELECT ts FROM meters WHERE groupid IN (?, ?)",
        InvalidTopicQuery,
        "write groupid IN (?)",
        "?",
    ),
    ("SELECT ts FROM meters WHERE groupid IN (1, ?)", InvalidTopicQuery, "only item", "?"),
    ("SELECT ts FROM meters WHERE ? IN (1, 2)", InvalidTopicQuery, "IN's list", "?"),
    ("SELECT ts FROM meters WHERE abs(voltage) = ?", InvalidTopicQuery, "not with an expr", "?"),
    ("SELECT ts FROM meters WHERE ? = ?", InvalidTopicQuery, "another ?", "?"),
    ("SELECT ts FROM meters WHERE voltage + ? = 3", InvalidTopicQuery, "inside ", "?"),
    (
        "SELECT ts FROM meters WHERE tbname = ? AND TBNAME IN (?)",
        InvalidTopicQuery,
        "'tbname' has two parameters",
        "?)",
    ),
    (
        "SELECT ts FROM meters WHERE voltage = ? AND ? = voltage",
        InvalidTopicQuery,
        "two parameters",
        "? = voltage",
    ),
    ("SELECT ts FROM meters WHERE nothere = ?", NotFoundError, "does not exist", "nothere"),
    (
        "SELECT ts FROM meters WHERE voltage = :v",
        InvalidTopicQuery,
        "named parameter :v",
        "voltage = :v",
    ),
    ("STABLE meters WHERE location = ?", InvalidTopicQuery, "only in a query topic", "?"),
]


@pytest.mark.parametrize(("sql", "error", "part", "marker"), REFUSED)
def test_misplaced_parameters_are_refused_where_written(
    catalog: Catalog, sql: str, error: type[SqlError], part: str, marker: str
) -> None:
    text = f"CREATE TOPIC t AS {sql}"
    with pytest.raises(SqlError) as info:
        create(catalog, sql)
    assert type(info.value) is error
    assert part in info.value.message
    column = text.index(marker) + 1  # the first occurrence
    assert (info.value.line, info.value.column) == (1, column), info.value.message


def test_a_parameter_in_a_grant_condition_is_refused(catalog: Catalog) -> None:
    stmt = parse("CREATE TOPIC t AS SELECT ts FROM meters")[0]
    cond = parse("CREATE TOPIC t AS STABLE meters WHERE groupid = ?")[0]
    assert isinstance(cond, CreateTopic)
    assert cond.where is not None
    with pytest.raises(InvalidTopicQuery, match="only in a query topic"):
        compile_tag_condition(stmt, catalog, "power", "meters", cond.where)


# --- binding ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def every(catalog: Catalog) -> Topic:
    """A topic with a parameter of every kind of type."""
    return create(
        catalog,
        "SELECT ts, current FROM meters WHERE tbname = ? AND location = ? AND groupid IN (?) "
        "AND current = ? AND ok = ? AND big = ? AND note = ? AND born IN (?)",
    )


GOOD = {
    "tbname": "d1",
    "location": "x",
    "groupid": [1],
    "current": 0.5,
    "ok": True,
    "big": 1,
    "note": "ab",
    "born": [0],
}

CONVERTED: list[tuple[str, Any, Any]] = [
    # (parameter, value given, canonical value(s))
    ("tbname", "D1", ("d1",)),  # table names are lower-case
    ("location", "SF", ("SF",)),  # tag values are not
    ("groupid", [3, "2", 3.0, 2], (2, 3)),  # sorted, distinct, ints
    ("groupid", (-(2**31),), (-(2**31),)),
    ("current", 1, (1.0,)),
    ("current", "0.25", (0.25,)),
    ("current", -0.0, (0.0,)),
    ("ok", "FALSE", (False,)),
    ("big", 2**64 - 1, (2**64 - 1,)),
    ("big", " 7 ", (7,)),
    ("note", "éééé", ("éééé",)),  # NCHAR counts characters
    ("born", ["1970-01-01 00:00:01", "1970-01-01T01:00:00+01:00", 5], (0, 5, 1000)),
    ("born", {"2018-10-03 14:38:05.5Z"}, (1538577485500,)),
]


@pytest.mark.parametrize(("name", "value", "expected"), CONVERTED)
def test_values_convert_to_their_columns_types(
    every: Topic, name: str, value: Any, expected: tuple[Any, ...]
) -> None:
    binding = bind(every, {**GOOD, name: value})
    got = binding.values[[p.name for p in every.params].index(name)]
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]


OMIT = object()  # a parameter left out

BAD: list[tuple[dict[str, Any], str]] = [
    # (changes to GOOD, OMIT to leave one out; message part)
    ({"tbname": b"d1"}, "'tbname' of topic 't' (the table name of type VARCHAR(192), tbname = ?)"),
    ({"voltage": 3}, "topic 't' has no parameter 'voltage': its parameters are tbname"),
    ({"TBNAME": "d2"}, "parameter 'TBNAME' of topic 't' is given twice"),
    ({"groupid": 3}, "'groupid' of topic 't' (a tag of type INT, groupid IN (?)): 3 is not a list"),
    ({"groupid": []}, "[] is not a list of 1 to 1000 values"),
    ({"groupid": list(range(MAX_IN_VALUES + 1))}, "is not a list of 1 to 1000 values"),
    ({"groupid": ["x"]}, "'x' is not an integer in -2147483648..2147483647"),
    ({"groupid": [2**31]}, "2147483648 is not an integer in"),
    ({"groupid": [True]}, "True is not an integer"),
    ({"groupid": [1.5]}, "1.5 is not an integer"),
    ({"tbname": ["d1"]}, "['d1'] is not one value (tbname = ? binds one; IN (?) binds lists)"),
    ({"tbname": 1}, "1 is not a string"),
    ({"location": "x" * 17}, "is not at most 16 bytes long"),
    ({"note": "abcde"}, "is not at most 4 characters long"),
    ({"current": "abc"}, "'abc' is not a finite number"),
    ({"current": float("nan")}, "nan is not a finite number"),
    ({"current": 10**400}, "is not a finite number"),
    ({"current": False}, "False is not a finite number"),
    ({"ok": 1}, "(a column of type BOOL, ok = ?): 1 is not a boolean"),
    ({"big": -1}, "-1 is not an integer in 0..18446744073709551615"),
    (
        {"born": ["yesterday"]},
        "'yesterday' is not a timestamp: an integer in the database precision (ms) or a date-time",
    ),
    ({"born": [2**63]}, "is not a timestamp"),
    ({"location": OMIT}, "needs a value for parameter 'location' (a tag of type VARCHAR(16)"),
    ({"location": None}, "None is not a value: NULL never equals anything"),
]


@pytest.mark.parametrize(("change", "part"), BAD)
def test_binding_errors_name_the_parameter_its_type_and_the_value(
    every: Topic, change: dict[str, Any], part: str
) -> None:
    params = {k: v for k, v in {**GOOD, **change}.items() if v is not OMIT}
    with pytest.raises(ConfigError) as info:
        bind(every, params)
    assert part in str(info.value)


def test_binding_needs_a_mapping_and_a_topic_without_parameters_binds_nothing(
    catalog: Catalog, every: Topic
) -> None:
    with pytest.raises(ConfigError, match="a mapping of name to value, not list"):
        bind(every, [("tbname", "d1")])  # type: ignore[arg-type]
    plain = create(catalog, "SELECT ts FROM meters WHERE tbname = 'd1'")
    assert bind(plain, {}).key == "{}"
    with pytest.raises(ConfigError, match="has no parameter 'tbname': it has no parameters"):
        bind(plain, {"tbname": "d1"})


def test_the_key_is_canonical_and_reads_back(every: Topic) -> None:
    a = bind(every, {**GOOD, "groupid": [3, 1, 3], "born": ["1970-01-01 00:00:00.002", 1]})
    b = bind(every, {k.upper(): v for k, v in {**GOOD, "groupid": (1, 3), "born": [2, 1]}.items()})
    assert a == b
    assert a.key == (
        '{"big":1,"born":[1,2],"current":0.5,"groupid":[1,3],"location":"x","note":"ab",'
        '"ok":true,"tbname":"d1"}'
    )
    assert Binding.from_key(every, a.key) == a
    assert a.as_params()["groupid"] == [1, 3]


@pytest.mark.parametrize(
    ("key", "part"),
    [
        ("[1]", "is not a JSON object of parameter values"),
        ("{oops", "is not a JSON object"),
        ('{"tbname": "d1"}', "needs a value for parameter 'location'"),
        (
            json.dumps({**GOOD, "tbname": "D1"}, sort_keys=True, separators=(",", ":")),
            "is not canonical",
        ),
        (json.dumps(GOOD), "is not canonical"),
        ("x" * 70_000, "a string of at most 65536 bytes"),
        ("[" * 60_000, "is not a JSON object"),
    ],
)
def test_a_bad_key_is_refused(every: Topic, key: str, part: str) -> None:
    with pytest.raises(ConfigError) as info:
        Binding.from_key(every, key)
    assert part in str(info.value)


# --- the partition, against the topic with literals -----------------------------------------


def _batch() -> pa.Table:
    """A batch as a vnode builds it: three entries (d1, d2, d3), tags and tbname as
    dictionary-encoded constants per entry, NULLs in every column and tag."""
    names = [c.name for c in COLUMNS]
    values: list[tuple[Any, ...]] = [
        # ts, current, voltage, phase, ok, big, note, code
        (0, 0.5, 1, 0.1, True, 1, "ab", "a"),
        (1, None, 2, None, False, None, None, "b"),
        (2, -0.0, None, -0.0, None, 2**64 - 1, "ab", None),
        (3, 0.1, 1, 0.1, True, 7, "cd", "a"),
        (4, 11.0, 3, 2.5, False, 1, "éé", "c"),
        (5, 16_777_216.0, 2, 1.0, True, 7, "ab", "b"),
        (6, 12.5, 1, 0.0, True, 1, "cd", "a"),
        (7, 0.5, -5, 3.0, None, None, "ab", "c"),
    ]
    rows = [dict(zip(names, row, strict=True)) for row in values]
    owners = [("d1", ("x", 1, 0)), ("d2", ("y", None, 1000)), ("d3", (None, 2, None))]
    sizes = [3, 2, 3]
    schema = layout.batch_schema(COLUMNS, TAGS, "ms")
    chunks: list[pa.RecordBatch] = []
    start = 0
    for (name, tags), size in zip(owners, sizes, strict=True):
        part = rows[start : start + size]
        start += size
        arrays: list[pa.Array] = [
            pa.array([r[c.name] for r in part], schema.field(c.name).type) for c in COLUMNS
        ]
        for tag, value in zip(TAGS, (*tags, name), strict=False):
            arrays.append(_constant(value, schema.field(tag.name).type, size))
        arrays.append(_constant(name, pa.string(), size))
        fields = [pa.field(f.name, a.type) for f, a in zip(schema, arrays, strict=True)]
        chunks.append(pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields)))
    return pa.Table.from_batches(chunks)


def _constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([value], type_))


BATCH = _batch()


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return repr(value) if "e" in repr(value) or "." in repr(value) else f"{value}.0"
    return str(value)


def _with_literals(sql: str, topic: Topic, binding: Binding) -> str:
    """`sql` with each ? replaced by its binding's values, as literals."""
    pieces = sql.split("?")
    out = pieces[0]
    for _param, values, piece in zip(topic.params, binding.values, pieces[1:], strict=True):
        out += ", ".join(_literal(v) for v in values) + piece
    return out


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    def norm(v: Any) -> Any:
        return "nan" if isinstance(v, float) and math.isnan(v) else v

    return [{k: norm(v) for k, v in r.items()} for r in table.to_pylist()]


@pytest.fixture(scope="module")
def duck() -> duckdb.DuckDBPyConnection:
    return connect(threads=1)


# (SELECT with ?, the bindings' parameters)
CASES: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "SELECT * FROM meters WHERE tbname = ?",
        [{"tbname": "d1"}, {"tbname": "D3"}, {"tbname": "d9"}, {"tbname": "d1"}],
    ),
    (
        "SELECT ts, current, location FROM meters WHERE location = ? AND current > 0.2",
        [{"location": "x"}, {"location": "y"}, {"location": ""}],
    ),
    (
        "SELECT ts, voltage FROM meters WHERE groupid IN (?) AND tbname = ?",
        [
            {"groupid": [1, 2], "tbname": "d1"},
            {"groupid": [2], "tbname": "d3"},
            {"groupid": [1], "tbname": "d3"},
            {"groupid": [2, 1], "tbname": "d1"},
        ],
    ),
    (
        "SELECT ts, code FROM meters WHERE current = ?",
        [
            {"current": 0.5},
            {"current": 0},
            {"current": 0.1},
            {"current": 16_777_217},
            {"current": "12.5"},
        ],
    ),
    (
        "SELECT ts, note FROM meters WHERE phase IN (?)",
        [{"phase": [0.1, 0.0]}, {"phase": [3]}, {"phase": [2.5, 1, 0.1]}],
    ),
    (
        "SELECT ts, ok FROM meters WHERE ok = ? AND voltage IN (?)",
        [
            {"ok": True, "voltage": [1, 2]},
            {"ok": "false", "voltage": [2, 3, -5]},
            {"ok": True, "voltage": [1]},
        ],
    ),
    (
        "SELECT ts, big FROM meters WHERE big IN (?)",
        [{"big": [2**64 - 1, 1]}, {"big": [7]}, {"big": [0]}],
    ),
    (
        "SELECT ts, note, code FROM meters WHERE note = ? AND code = ?",
        [
            {"note": "ab", "code": "a"},
            {"note": "cd", "code": "a"},
            {"note": "éé", "code": "c"},
            {"note": "ab", "code": "c"},
        ],
    ),
    (
        "SELECT ts, born FROM meters WHERE born IN (?) AND ts = ?",
        [
            {"born": [0, 1000], "ts": 4},
            {"born": ["1970-01-01 00:00:01"], "ts": "1970-01-01 00:00:00.003"},
            {"born": [0], "ts": 0},
        ],
    ),
    (
        "SELECT ts, voltage * 2 AS twice FROM meters WHERE voltage IN (?) AND location = ?",
        [{"voltage": [1, 2], "location": "x"}, {"voltage": [1], "location": "y"}],
    ),
]


@pytest.mark.parametrize(("sql", "bound"), CASES)
def test_each_binding_gets_the_rows_of_the_topic_with_its_literals(
    catalog: Catalog,
    duck: duckdb.DuckDBPyConnection,
    monkeypatch: pytest.MonkeyPatch,
    sql: str,
    bound: list[dict[str, Any]],
) -> None:
    topic = create(catalog, sql)
    bindings = [bind(topic, params) for params in bound]
    wanted = [_literal_rows(catalog, duck, sql, topic, b) for b in bindings]
    results = {"duckdb": query(duck, topic.select_sql, layout.BATCH, BATCH)}
    shared_arrow = arrow_plan(topic.select_sql)
    if shared_arrow is not None:
        by_arrow = shared_arrow.run(BATCH)
        assert by_arrow is not None  # this batch has no NaN in a compared column
        results["arrow"] = by_arrow
    for lookup in ("dict", "vectorised"):
        # vectorised: as with more distinct values than Python looks up
        monkeypatch.setattr(partition, "PY_LOOKUP_MAX", 256 if lookup == "dict" else 0)
        partitioner = Partitioner(topic, bindings)
        for path, result in results.items():
            got = partitioner.split(result)
            assert any(got.values()), "the case should deliver rows to some binding"
            for i, want in enumerate(wanted):
                where = (lookup, path, bindings[i].key)
                if not want:
                    assert i not in got, where
                    continue
                assert got[i].schema == topic.output_schema, where
                assert _rows(got[i]) == want, where


def _literal_rows(
    catalog: Catalog, duck: duckdb.DuckDBPyConnection, sql: str, topic: Topic, binding: Binding
) -> list[dict[str, Any]]:
    """The rows of the topic with the binding's values written as literals (DuckDB, and
    pyarrow the same when it can run it)."""
    literal = create(catalog, _with_literals(sql, topic, binding), name="lit")
    assert not literal.params
    want = query(duck, literal.select_sql, layout.BATCH, BATCH).cast(topic.output_schema)
    plan = arrow_plan(literal.select_sql)
    by_arrow = plan.run(BATCH) if plan is not None else None
    if by_arrow is not None:
        assert _rows(by_arrow.cast(topic.output_schema)) == _rows(want)
    return _rows(want)


def test_simple_topics_keep_the_pyarrow_path(catalog: Catalog) -> None:
    topic = create(catalog, "SELECT ts, current FROM meters WHERE tbname = ? AND current > 1")
    assert arrow_plan(topic.select_sql) is not None


@pytest.mark.parametrize("seed", range(20))
def test_random_bindings_match_a_row_by_row_reference(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random batches (NULLs, tags in dictionary chunks of several values) and random,
    overlapping bindings of three parameters: each binding gets exactly the rows whose
    values it bound, in order (the reference is a Python loop per row and binding)."""
    rng = random.Random(seed)
    if seed % 2:
        monkeypatch.setattr(partition, "PY_LOOKUP_MAX", 0)
    topic = create(
        catalog,
        "SELECT ts, voltage FROM meters WHERE groupid IN (?) AND code = ? AND tbname IN (?)",
    )

    def chunk(n: int) -> pa.Array:
        # one value (a vnode's constant; in every chunk for half the seeds) or several;
        # NULL as a value and as an index
        size = 1 if seed % 4 < 2 else rng.randint(1, 3)
        dictionary = pa.array(rng.sample(GROUPS, size), pa.int32())
        at = [rng.choice([None, *range(len(dictionary))]) for _ in range(n)]
        return pa.DictionaryArray.from_arrays(pa.array(at, pa.int32()), dictionary)

    sizes = [rng.randint(0, 9) for _ in range(rng.randint(1, 6))]
    rows = sum(sizes)
    result = pa.table({
        "ts": pa.array(range(rows), pa.timestamp("ms")),
        "voltage": pa.array(range(rows), pa.int32()),
        f"{HIDDEN_PREFIX}groupid": pa.chunked_array([chunk(n) for n in sizes], chunk(0).type),
        f"{HIDDEN_PREFIX}code": pa.array([rng.choice(CODES) for _ in range(rows)]),
        f"{HIDDEN_PREFIX}tbname": pa.array([rng.choice(NAMES) for _ in range(rows)]),
    })  # fmt: skip
    bound = _random_bound(rng)
    got = Partitioner(topic, [bind(topic, b) for b in bound]).split(result)
    columns = [
        result.column(f"{HIDDEN_PREFIX}{n}").to_pylist() for n in ("groupid", "code", "tbname")
    ]
    _assert_each_gets_its_rows(got, bound, list(zip(*columns, strict=True)), seed)


@pytest.mark.parametrize("seed", range(20))
def test_a_vnodes_result_split_by_runs_matches_a_row_by_row_reference(
    catalog: Catalog, seed: int
) -> None:
    """A vnode's result (every parameter one constant per chunk, an INT and a VARCHAR tag
    and tbname, NULL constants among them, empty chunks) is split run by run; random,
    overlapping bindings each get exactly the rows whose values they bound, in order."""
    rng = random.Random(seed)
    topic = create(
        catalog,
        "SELECT ts, voltage FROM meters WHERE groupid IN (?) AND code = ? AND tbname IN (?)",
    )
    sizes = [rng.randint(0, 9) for _ in range(rng.randint(1, 12))]
    runs = [(rng.choice(GROUPS), rng.choice(CODES), rng.choice(NAMES)) for _ in sizes]
    rows = sum(sizes)

    def constants(at: int, kind: pa.DataType) -> pa.ChunkedArray:
        chunks = [pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()),
                                                 pa.array([run[at]], kind))
                  for run, n in zip(runs, sizes, strict=True)]  # fmt: skip
        return pa.chunked_array(chunks, pa.dictionary(pa.int32(), kind))

    result = pa.table({
        "ts": pa.array(range(rows), pa.timestamp("ms")),
        "voltage": pa.array(range(rows), pa.int32()),
        f"{HIDDEN_PREFIX}groupid": constants(0, pa.int32()),
        f"{HIDDEN_PREFIX}code": constants(1, pa.string()),
        f"{HIDDEN_PREFIX}tbname": constants(2, pa.string()),
    })  # fmt: skip
    bound = _random_bound(rng)
    partitioner = Partitioner(topic, [bind(topic, b) for b in bound])
    got = partitioner._by_runs(result)
    assert got is not None  # a vnode's result: split by runs
    assert got == partitioner.split(result)
    per_row = [run for run, n in zip(runs, sizes, strict=True) for _ in range(n)]
    _assert_each_gets_its_rows(got, bound, per_row, seed)


# The values of the random tests' parameters: groupid, code and tbname, NULL among them.
GROUPS: list[int | None] = [None, 1, 2, 3]
CODES: list[str | None] = [None, "a", "b", "é"]
NAMES = ["d1", "d2", "d3", "d4"]


def _random_bound(rng: random.Random) -> list[dict[str, Any]]:
    """1 to 12 random, overlapping bindings of groupid IN (?), code = ? and tbname IN (?)."""
    return [
        {
            "groupid": rng.sample(GROUPS[1:], rng.randint(1, 3)),
            "code": rng.choice(CODES[1:]),
            "tbname": rng.sample(NAMES, rng.randint(1, 4)),
        }
        for _ in range(rng.randint(1, 12))
    ]


def _assert_each_gets_its_rows(
    got: dict[int, pa.Table], bound: list[dict[str, Any]], per_row: list[tuple[Any, ...]],
    seed: int,
) -> None:  # fmt: skip
    """Binding i got exactly the rows (their `voltage` is their index) whose (groupid,
    code, tbname) in `per_row` it bound, in order: a Python loop per row and binding."""
    for i, b in enumerate(bound):
        want = [
            r for r, (group, code, name) in enumerate(per_row)
            if group in b["groupid"] and code == b["code"] and name in b["tbname"]
        ]  # fmt: skip
        assert (got[i].column("voltage").to_pylist() if i in got else []) == want, (seed, i)


def test_many_bindings_each_get_exactly_their_rows(catalog: Catalog) -> None:
    """2,000 bindings of tbname IN (?) over one batch of 2,000 tables: rows of table k go
    to binding k (its own table) and to binding k+1 (its neighbour's)."""
    topic = create(catalog, "SELECT ts, voltage FROM meters WHERE tbname IN (?)")
    tables = 2_000
    bindings = [bind(topic, {"tbname": [f"t{k}", f"t{k - 1}"]}) for k in range(tables)]
    names = pa.array([f"t{k // 2}" for k in range(2 * tables)])
    result = pa.table(
        {
            "ts": pa.array(range(2 * tables), pa.timestamp("ms")),
            "voltage": pa.array(range(2 * tables), pa.int32()),
            f"{HIDDEN_PREFIX}tbname": names.dictionary_encode(),
        }
    )
    got = Partitioner(topic, bindings).split(result)
    assert sorted(got) == list(range(tables))
    for k, rows in got.items():
        own = [2 * k, 2 * k + 1]
        prior = [2 * (k - 1), 2 * (k - 1) + 1] if k > 0 else []
        assert rows.column("voltage").to_pylist() == prior + own


def test_a_result_without_hidden_columns_is_an_error(catalog: Catalog) -> None:
    topic = create(catalog, "SELECT ts FROM meters WHERE tbname = ?")
    partitioner = Partitioner(topic, [bind(topic, {"tbname": "d1"})])
    with pytest.raises(ValueError, match="evaluate topic 't''s select_sql"):
        partitioner.split(pa.table({"ts": pa.array([1], pa.timestamp("ms"))}))
    assert partitioner.split(BATCH.slice(0, 0).select(["ts"])) == {}
    assert Partitioner(topic, []).split(BATCH) == {}
    other = create(catalog, "SELECT ts FROM meters WHERE location = ?", name="o")
    with pytest.raises(ValueError, match="is not one of topic 't'"):
        Partitioner(topic, [bind(other, {"location": "x"})])


# --- the catalog on disk ------------------------------------------------------------------


def test_parameters_persist_and_older_topics_load(catalog: Catalog, tmp_path: Path) -> None:
    topic = create(catalog, "SELECT ts FROM meters WHERE groupid IN (?) AND born = ?")
    plain = create(catalog, "SELECT ts FROM meters", name="plain")
    cat = Catalog(databases=dict(catalog.databases), stables=dict(catalog.stables))
    cat.topics = {"t": topic, "plain": plain}
    store = CatalogStore(tmp_path / "catalog.sqlite")
    store.commit(cat, [("topic", "", "t"), ("topic", "", "plain")])
    with closing(sqlite3.connect(tmp_path / "catalog.sqlite")) as raw:
        bodies = dict(raw.execute("SELECT key, body FROM objects").fetchall())
    assert "params" not in json.loads(bodies["plain"])  # as an older server wrote it
    loaded, _ = store.load()
    store.close()
    assert loaded.topics["t"] == topic
    assert loaded.topics["plain"] == plain
    assert loaded.topics["t"].params[1] == Param("born", "tag", ColumnType("TIMESTAMP"), "=", "ms")


def test_select_sql_names_every_parameter_column_once(catalog: Catalog) -> None:
    topic = create(catalog, "SELECT tbname, location FROM meters WHERE tbname = ? AND location = ?")
    assert re.findall(r'AS "(__param_\w+)"', topic.select_sql) == [
        "__param_tbname",
        "__param_location",
    ]
