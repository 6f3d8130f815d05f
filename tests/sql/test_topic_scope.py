"""table_condition: which conjuncts of a compiled WHERE decide per table, and row_select: the
rest, which decides each row of a table that passed them (table-driven)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from sqltopic.sql.topic.scope import row_select, simple_mask, simple_predicate, table_condition

TABLE_COLUMNS = frozenset({"tbname", "location", "groupid"})
SELECT = 'SELECT "ts" AS "ts" FROM "__batch"'

CASES = [
    ("no where", "", None),
    ("tbname list", "WHERE \"tbname\" IN ('a', 'b')", "(\"tbname\" IN ('a', 'b'))"),
    ("data column only", 'WHERE "current" > 1', None),
    (
        "mixed conjuncts keep the per-table ones",
        'WHERE "tbname" = \'a\' AND "current" > 1 AND "groupid" BETWEEN 1 AND 3',
        '("tbname" = \'a\') AND ("groupid" BETWEEN 1 AND 3)',
    ),
    ("an OR with a data column decides nothing", 'WHERE "tbname" = \'a\' OR "current" > 1', None),
    (
        "an OR of tags is one conjunct",
        'WHERE ("location" = \'x\' OR "groupid" = 2) AND "current" > 1',
        '("location" = \'x\' OR "groupid" = 2)',
    ),
    ("a function may depend on the clock", 'WHERE "groupid" < EPOCH_MS(NOW())', None),
    ("a constant alone decides nothing", "WHERE 1 = 1", None),
    ("nulls and negation", 'WHERE NOT "location" IS NULL', '(NOT "location" IS NULL)'),
    ("a cast of a tag", 'WHERE CAST("groupid" AS BIGINT) = 3', '(CAST("groupid" AS BIGINT) = 3)'),
]


@pytest.mark.parametrize(("where", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_table_condition(where: str, expected: str | None) -> None:
    assert table_condition(f"{SELECT} {where}".strip(), TABLE_COLUMNS) == expected


ROWS = [
    ("no where", "", ""),
    ("tbname list: no row condition left", "WHERE \"tbname\" IN ('a', 'b')", ""),
    ("data column only: unchanged", 'WHERE "current" > 1', 'WHERE "current" > 1'),
    (
        "mixed conjuncts keep the data ones",
        'WHERE "tbname" = \'a\' AND "current" > 1 AND "groupid" BETWEEN 1 AND 3',
        'WHERE ("current" > 1)',
    ),
    (
        "an OR with a data column stays whole",
        'WHERE "tbname" = \'a\' OR "current" > 1',
        'WHERE "tbname" = \'a\' OR "current" > 1',
    ),
    (
        "an OR of tags goes, the data OR stays",
        'WHERE ("location" = \'x\' OR "groupid" = 2) AND ("current" > 1 OR "v" < 0)',
        'WHERE ("current" > 1 OR "v" < 0)',
    ),
    (
        "a function stays",
        'WHERE "groupid" < EPOCH_MS(NOW()) AND "tbname" = \'a\'',
        'WHERE ("groupid" < EPOCH_MS(NOW()))',
    ),
]


@pytest.mark.parametrize(("where", "expected"), [c[1:] for c in ROWS], ids=[c[0] for c in ROWS])
def test_row_select(where: str, expected: str) -> None:
    assert row_select(f"{SELECT} {where}".strip(), TABLE_COLUMNS) == f"{SELECT} {expected}".strip()


TAGS = pa.table(
    {
        "tbname": ["a", "b", "c", "d", "e"],
        "location": ["x", "y", None, "x", "z"],
        "groupid": pa.array([1, 2, 3, None, 100], pa.int8()),
    }
)
SIMPLE = [
    "(\"tbname\" IN ('a', 'c'))",
    "(\"location\" = 'x')",
    "(\"location\" IN ('x', 'z')) AND (\"groupid\" = 1)",
    '("location" = \'x\' OR "groupid" = 2)',
    '("location" = \'q\' OR "groupid" IN (3, 100))',
    "(\"tbname\" = 'e') AND (\"location\" IN ('z'))",
]
NOT_SIMPLE = [
    '("groupid" > 1)',  # a range: DuckDB decides
    '("groupid" = 1000)',  # out of TINYINT's range
    "(\"groupid\" = '1')",  # a string for an integer column
    '(NOT "location" IS NULL)',
    '("missing" = 1)',
]


@pytest.mark.parametrize("condition", SIMPLE)
def test_a_simple_condition_keeps_what_duckdb_keeps(condition: str) -> None:
    mask = simple_mask(condition, TAGS)
    assert mask is not None
    con = duckdb.connect()
    con.register("t", TAGS)
    expected = [r[0] for r in con.sql(f'SELECT "tbname" FROM t WHERE {condition}').fetchall()]
    assert TAGS.column("tbname").filter(mask).to_pylist() == expected


@pytest.mark.parametrize("condition", NOT_SIMPLE)
def test_other_conditions_are_left_to_duckdb(condition: str) -> None:
    assert simple_mask(condition, TAGS) is None


@pytest.mark.parametrize("condition", SIMPLE)
def test_a_simple_predicate_decides_each_row_as_duckdb_in_three_values(condition: str) -> None:
    """One row at a time (what a catalog change's added children get): TRUE, FALSE and
    NULL exactly as DuckDB's value of the condition."""
    predicate = simple_predicate(condition, TAGS.schema)
    assert predicate is not None
    con = duckdb.connect()
    con.register("t", TAGS)
    expected = [r[0] for r in con.sql(f"SELECT ({condition}) FROM t").fetchall()]
    assert [predicate(row) for row in TAGS.to_pylist()] == expected


@pytest.mark.parametrize("condition", NOT_SIMPLE)
def test_other_conditions_have_no_predicate(condition: str) -> None:
    assert simple_predicate(condition, TAGS.schema) is None
