"""INSERT parsing: every TDengine form, table-driven, and syntax errors with positions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sqltopic.errors import SqlSyntaxError, UnsupportedStatement
from sqltopic.sql.insert import Insert, InsertPart, parse_insert
from sqltopic.sql.parse import parse
from sqltopic.sql.statements import Pos, TableRef, Value

# The canonical 8-row multi-table INSERT of the connector examples (reference a.5).
CANONICAL_8_ROWS = """\
INSERT INTO d1001 USING meters TAGS('California.SanFrancisco', 2) VALUES ('2018-10-03 14:38:05.000', 10.30000, 219, 0.31000) ('2018-10-03 14:38:15.000', 12.60000, 218, 0.33000) ('2018-10-03 14:38:16.800', 12.30000, 221, 0.31000)
            d1002 USING meters TAGS('California.SanFrancisco', 3) VALUES ('2018-10-03 14:38:16.650', 10.30000, 218, 0.25000)
            d1003 USING meters TAGS('California.LosAngeles', 2) VALUES ('2018-10-03 14:38:05.500', 11.80000, 221, 0.28000) ('2018-10-03 14:38:16.600', 13.40000, 223, 0.29000)
            d1004 USING meters TAGS('California.LosAngeles', 3) VALUES ('2018-10-03 14:38:05.000', 10.80000, 223, 0.29000) ('2018-10-03 14:38:06.500', 11.50000, 221, 0.35000)"""  # noqa: E501

# The TMQ examples' INSERT (reference a.5).
TMQ_EXAMPLE = """\
INSERT INTO power.d1001 USING power.meters (groupid, location) TAGS(2, 'California.SanFrancisco')
    VALUES (NOW + 1a, 10.30000, 219, 0.31000) (NOW + 2a, 12.60000, 218, 0.33000) (NOW + 3a, 12.30000, 221, 0.31000)
  power.d1002 USING power.meters (groupid, location) TAGS(3, 'California.SanFrancisco') VALUES (NOW + 1a, 10.30000, 218, 0.25000)"""  # noqa: E501


@dataclass(frozen=True)
class Part:
    """What a test expects of one InsertPart (positions aside)."""

    table: str
    rows: list[tuple[str, ...]]
    using: str | None = None
    tag_names: tuple[str, ...] | None = None
    tags: tuple[tuple[str, str], ...] = ()  # (kind, text)
    columns: tuple[str, ...] | None = None


def _ref(text: str) -> TableRef:
    db, _, name = text.rpartition(".")
    return TableRef(db or None, name)


def _check(part: InsertPart, want: Part) -> None:
    assert part.table == _ref(want.table)
    assert part.using == (_ref(want.using) if want.using else None)
    assert part.tag_names == want.tag_names
    assert tuple((v.kind, v.text) for v in part.tag_values) == want.tags
    assert part.columns == want.columns
    assert [part.rows.row(i) for i in range(len(part.rows))] == want.rows


METERS_ROW = ("1538548685000", "10.3", "219", "0.31")

CASES: list[tuple[str, str, list[Part]]] = [
    (
        "whitespace-separated tuples",
        "INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31) "
        "('2018-10-03 14:38:15.000', 12.6, 218, 0.33)",
        [Part("d1001", [METERS_ROW, ("'2018-10-03 14:38:15.000'", "12.6", "218", "0.33")])],
    ),
    (
        "comma-separated tuples",
        "INSERT INTO d1001 VALUES (1538548685000,10.3,219,0.31),(1,2,3,4) , (5, 6, 7, 8)",
        [Part("d1001", [METERS_ROW, ("1", "2", "3", "4"), ("5", "6", "7", "8")])],
    ),
    (
        "lower-case keywords, names lower-cased",
        "insert into D1001 values (1538548685000, 10.3, 219, 0.31)",
        [Part("d1001", [METERS_ROW])],
    ),
    (
        "db.table",
        "INSERT INTO Power.D1001 VALUES (1538548685000, 10.3, 219, 0.31)",
        [Part("power.d1001", [METERS_ROW])],
    ),
    (
        "column list",
        "INSERT INTO d1001 (ts, current) VALUES (1538548685000, 10.3)",
        [Part("d1001", [("1538548685000", "10.3")], columns=("ts", "current"))],
    ),
    (
        "through the super table",
        "INSERT INTO meters (tbname, ts, current, voltage, phase, location, groupid) "
        "VALUES ('d1001', 1538548685000, 10.2, 220, 0.23, 'California.SanFrancisco', 2)",
        [
            Part(
                "meters",
                [
                    (
                        "'d1001'",
                        "1538548685000",
                        "10.2",
                        "220",
                        "0.23",
                        "'California.SanFrancisco'",
                        "2",
                    )
                ],
                columns=("tbname", "ts", "current", "voltage", "phase", "location", "groupid"),
            )
        ],
    ),
    (
        "multi-table with USING, tag names and NOW",
        "INSERT INTO d1002 USING meters TAGS ('California.SanFrancisco', 3) "
        "VALUES (NOW, 10.2, 220, 0.23)\n"
        "            d1003 USING meters (location) TAGS ('California.LosAngeles') "
        "VALUES (NOW + 1s, 11.5, 221, 0.35)",
        [
            Part(
                "d1002",
                [("NOW", "10.2", "220", "0.23")],
                using="meters",
                tags=(("string", "California.SanFrancisco"), ("number", "3")),
            ),
            Part(
                "d1003",
                [("NOW + 1s", "11.5", "221", "0.35")],
                using="meters",
                tag_names=("location",),
                tags=(("string", "California.LosAngeles"),),
            ),
        ],
    ),
    (
        "column list after TAGS",
        "INSERT INTO t1 USING st TAGS(1, NULL, true) (c1, c2) VALUES (NOW, 1) (NOW(), 2)",
        [
            Part(
                "t1",
                [("NOW", "1"), ("NOW()", "2")],
                using="st",
                tags=(("number", "1"), ("null", "NULL"), ("bool", "true")),
                columns=("c1", "c2"),
            )
        ],
    ),
    (
        "double-quoted strings and escapes",
        'INSERT INTO d1005 USING meters (location) TAGS ("Cal\\"ifornia") '
        'VALUES ("2018-10-04 14:38:07", \'it\'\'s\', "say ""hi""", \'a\\\'b\')',
        [
            Part(
                "d1005",
                [('"2018-10-04 14:38:07"', "'it''s'", '"say ""hi"""', "'a\\'b'")],
                using="meters",
                tag_names=("location",),
                tags=(("string", 'Cal"ifornia'),),
            )
        ],
    ),
    (
        "backtick identifiers",
        "INSERT INTO `Power`.`D 1001` USING `Meters` (`Location`) TAGS ('x') "
        "(`TS`, `c`) VALUES (1, 2)",
        [
            Part(
                "power.d 1001",
                [("1", "2")],
                using="meters",
                tag_names=("location",),
                tags=(("string", "x"),),
                columns=("ts", "c"),
            )
        ],
    ),
    (
        "NULL, booleans, signs, exponents, hex",
        "INSERT INTO t VALUES (NULL, null, TRUE, false, -12, +3.5, -.5e-3, 1E10, 0x1F, -0b101)",
        [
            Part(
                "t",
                [
                    (
                        "NULL",
                        "null",
                        "TRUE",
                        "false",
                        "-12",
                        "+3.5",
                        "-.5e-3",
                        "1E10",
                        "0x1F",
                        "-0b101",
                    )
                ],
            )
        ],
    ),
    (
        "NOW forms and units",
        "INSERT INTO t VALUES (NOW, now(), NOW ( ), NOW + 1s, NOW - 10m, now+1a, NOW+2b, "
        "NOW+3u, NOW+4h, NOW-5d, NOW+6w, TODAY(), today() + 1d, '2018-10-03' - 1d, "
        "1538548685000+10a)",
        [
            Part(
                "t",
                [
                    (
                        "NOW",
                        "now()",
                        "NOW ( )",
                        "NOW + 1s",
                        "NOW - 10m",
                        "now+1a",
                        "NOW+2b",
                        "NOW+3u",
                        "NOW+4h",
                        "NOW-5d",
                        "NOW+6w",
                        "TODAY()",
                        "today() + 1d",
                        "'2018-10-03' - 1d",
                        "1538548685000+10a",
                    )
                ],
            )
        ],
    ),
    (
        "newlines, comments and a trailing semicolon",
        "INSERT INTO d1001 -- the first meter\n"
        "VALUES\n  (1, 2)  -- row one\n  /* row two: */ (3,\n 4)\n;  ",
        [Part("d1001", [("1", "2"), ("3", "4")])],
    ),
    (
        "tags with NOW arithmetic and negative numbers",
        "INSERT INTO t USING st TAGS (NOW + 1s, -3, 'null', 1.5e3) VALUES (1)",
        [
            Part(
                "t",
                [("1",)],
                using="st",
                tags=(("now", "NOW+1s"), ("number", "-3"), ("string", "null"), ("number", "1.5e3")),
            )
        ],
    ),
    (
        "canonical 8-row",
        CANONICAL_8_ROWS,
        [
            Part(
                "d1001",
                [
                    ("'2018-10-03 14:38:05.000'", "10.30000", "219", "0.31000"),
                    ("'2018-10-03 14:38:15.000'", "12.60000", "218", "0.33000"),
                    ("'2018-10-03 14:38:16.800'", "12.30000", "221", "0.31000"),
                ],
                using="meters",
                tags=(("string", "California.SanFrancisco"), ("number", "2")),
            ),
            Part(
                "d1002",
                [("'2018-10-03 14:38:16.650'", "10.30000", "218", "0.25000")],
                using="meters",
                tags=(("string", "California.SanFrancisco"), ("number", "3")),
            ),
            Part(
                "d1003",
                [
                    ("'2018-10-03 14:38:05.500'", "11.80000", "221", "0.28000"),
                    ("'2018-10-03 14:38:16.600'", "13.40000", "223", "0.29000"),
                ],
                using="meters",
                tags=(("string", "California.LosAngeles"), ("number", "2")),
            ),
            Part(
                "d1004",
                [
                    ("'2018-10-03 14:38:05.000'", "10.80000", "223", "0.29000"),
                    ("'2018-10-03 14:38:06.500'", "11.50000", "221", "0.35000"),
                ],
                using="meters",
                tags=(("string", "California.LosAngeles"), ("number", "3")),
            ),
        ],
    ),
    (
        "TMQ example",
        TMQ_EXAMPLE,
        [
            Part(
                "power.d1001",
                [
                    ("NOW + 1a", "10.30000", "219", "0.31000"),
                    ("NOW + 2a", "12.60000", "218", "0.33000"),
                    ("NOW + 3a", "12.30000", "221", "0.31000"),
                ],
                using="power.meters",
                tag_names=("groupid", "location"),
                tags=(("number", "2"), ("string", "California.SanFrancisco")),
            ),
            Part(
                "power.d1002",
                [("NOW + 1a", "10.30000", "218", "0.25000")],
                using="power.meters",
                tag_names=("groupid", "location"),
                tags=(("number", "3"), ("string", "California.SanFrancisco")),
            ),
        ],
    ),
]


@pytest.mark.parametrize(("sql", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parses(sql: str, want: list[Part]) -> None:
    insert = parse_insert(sql, Pos(1, 1))
    assert isinstance(insert, Insert)
    assert insert.sql == sql
    assert len(insert.parts) == len(want)
    for part, expected in zip(insert.parts, want, strict=True):
        _check(part, expected)


def test_canonical_insert_has_8_rows() -> None:
    insert = parse_insert(CANONICAL_8_ROWS, Pos(1, 1))
    assert sum(len(p.rows) for p in insert.parts) == 8


def test_positions_of_parts_and_tags() -> None:
    insert = parse_insert(TMQ_EXAMPLE, Pos(5, 3))
    first, second = insert.parts
    assert first.pos == Pos(5, 15)  # the statement starts at line 5, column 3
    assert first.tag_values[1] == Value("string", "California.SanFrancisco", Pos(5, 74))
    assert second.pos == Pos(7, 3)
    assert second.tag_values[0].pos == Pos(7, 59)


def test_values_list_ends_at_the_next_table() -> None:
    sql = "INSERT INTO a VALUES (1, 'x) b VALUES (2)') b VALUES (3, 4)"
    a, b = parse_insert(sql, Pos(1, 1)).parts
    assert a.rows.row(0) == ("1", "'x) b VALUES (2)'")
    assert b.table == TableRef(None, "b")
    assert b.rows.row(0) == ("3", "4")


def test_a_long_values_list_with_slow_tuples_in_between() -> None:
    rows = [f"({i}, {i}.5, 'r{i}')" for i in range(300)]
    rows[100] = "/* comment */ (100, 100.5, 'r100')"  # not for the whole-tuple regex
    rows[200] = "(NOW+1s, 200.5, 'r200')"
    insert = parse_insert("INSERT INTO t VALUES " + " ".join(rows), Pos(1, 1))
    (part,) = insert.parts
    assert len(part.rows) == 300
    assert part.rows.columns[0][:3] == ("0", "1", "2")
    assert part.rows.row(100) == ("100", "100.5", "'r100'")
    assert part.rows.row(200) == ("NOW+1s", "200.5", "'r200'")
    assert part.rows.row(299) == ("299", "299.5", "'r299'")


@pytest.mark.parametrize("width", [1, 64, 65, 300])
def test_wide_and_narrow_tuples(width: int) -> None:
    rows = ["(" + ", ".join(f"{r}{c}" for c in range(width)) + ")" for r in range(5)]
    rows[2] = "-- a comment\n" + rows[2]
    (part,) = parse_insert("INSERT INTO t VALUES " + " ".join(rows), Pos(1, 1)).parts
    assert part.rows.width == width
    assert [part.rows.row(r)[-1] for r in range(5)] == [f"{r}{width - 1}" for r in range(5)]
    bad = [*rows[:3], "(" + ", ".join(["1"] * (width + 1)) + ")"]
    with pytest.raises(SqlSyntaxError, match=f"row 4 has {width + 1} values but row 1 has"):
        parse_insert("INSERT INTO t VALUES " + " ".join(bad), Pos(1, 1))


def test_parse_one_routes_insert_here_with_the_statement_position() -> None:
    statements = parse("USE power;\n  INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31)")
    insert = statements[1]
    assert isinstance(insert, Insert)
    assert insert.pos == Pos(2, 3)
    assert insert.parts[0].pos == Pos(2, 15)


# --- syntax errors -----------------------------------------------------------------------

ERRORS: list[tuple[str, str, str, tuple[int, int]]] = [
    (
        "unterminated string",
        "INSERT INTO d1001 VALUES (NOW, 'abc, 1)",
        "unterminated string in row 1",
        (1, 32),
    ),
    (
        "unterminated string in a later row",
        "INSERT INTO d1001 VALUES (1, 'a')\n (2, \"b)",
        "unterminated string in row 2",
        (2, 6),
    ),
    (
        "missing VALUES",
        "INSERT INTO d1001 (ts, c) (1, 2)",
        "expected VALUES (or USING, or a column list) after table d1001, got '('",
        (1, 27),
    ),
    ("nothing after the table", "INSERT INTO d1001", "got the end of the statement", (1, 18)),
    ("missing INTO", "INSERT d1001 VALUES (1)", "expected INTO after INSERT, got 'd1001'", (1, 8)),
    ("missing table", "INSERT INTO VALUES (1)", "expected a table name", (1, 13)),
    (
        "missing TAGS",
        "INSERT INTO d1 USING meters VALUES (1)",
        "expected TAGS after USING meters, got 'VALUES'",
        (1, 29),
    ),
    ("empty tuple", "INSERT INTO d1 VALUES ()", "expected value 1 of row 1", (1, 24)),
    (
        "unclosed tuple",
        "INSERT INTO d1 VALUES (1, 2",
        "expected , or ) after value 2 of row 1, got the end of the statement",
        (1, 28),
    ),
    (
        "missing comma",
        "INSERT INTO d1 VALUES (1, 2)\n(3 4)",
        "expected , or ) after value 1 of row 2, got '4'",
        (2, 4),
    ),
    (
        "not a value",
        "INSERT INTO d1 VALUES (1, abc)",
        "expected value 2 of row 1 (a number, a quoted string, NULL, true, false or NOW), "
        "got 'abc'",
        (1, 27),
    ),
    ("number glued to a word", "INSERT INTO d1 VALUES (12abc)", "got 'abc'", (1, 26)),
    (
        "a row of another width",
        "INSERT INTO d1 VALUES (1, 2) (3, 4)\n  (5)",
        "row 3 has 1 value but row 1 has 2 values",
        (2, 3),
    ),
    (
        "garbage after the rows",
        "INSERT INTO d1 VALUES (1, 2) , , (3, 4)",
        "expected a table name or the end of the statement after the rows of d1, got ','",
        (1, 30),
    ),
    ("bad tag list", "INSERT INTO d1 USING st TAGS 1 VALUES (1)", "expected ( to open", (1, 30)),
    ("empty column list", "INSERT INTO d1 () VALUES (1)", "expected a column name", (1, 17)),
    (
        "a column twice",
        "INSERT INTO d1 (ts, c, TS) VALUES (1, 2, 3)",
        "column ts appears twice in the column list",
        (1, 24),
    ),
    (
        "tag names and values disagree",
        "INSERT INTO d1 USING st (a, b) TAGS (1) VALUES (1)",
        "TAGS has 1 value but 2 tags are named",
        (1, 37),
    ),
    (
        "column list and rows disagree",
        "INSERT INTO d1 (ts, c) VALUES (1, 2, 3)",
        "row 1 has 3 values but the column list names 2 columns",
        (1, 31),
    ),
]


@pytest.mark.parametrize(
    ("sql", "message", "where"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_syntax_errors(sql: str, message: str, where: tuple[int, int]) -> None:
    with pytest.raises(SqlSyntaxError) as info:
        parse_insert(sql, Pos(1, 1))
    assert message in info.value.message
    assert (info.value.line, info.value.column) == where
    assert info.value.sql == sql


def test_error_positions_are_relative_to_the_whole_text() -> None:
    sql = "INSERT INTO d1 VALUES (1, 'x)"
    with pytest.raises(SqlSyntaxError) as info:
        parse_insert(sql, Pos(3, 10))  # the statement starts at line 3, column 10
    assert (info.value.line, info.value.column) == (3, 36)
    with pytest.raises(SqlSyntaxError) as info:
        parse_insert("INSERT INTO d1 VALUES\n  (1, ?)", Pos(3, 10))
    assert (info.value.line, info.value.column) == (4, 7)


@pytest.mark.parametrize("tail", ["SELECT * FROM d1002", "FILE '/tmp/d1001.csv'"])
def test_other_insert_forms_are_unsupported(tail: str) -> None:
    with pytest.raises(UnsupportedStatement, match="not supported; write the rows with VALUES"):
        parse_insert(f"INSERT INTO d1001 {tail}", Pos(1, 1))
