"""Values of an INSERT: conversion of every form to Arrow and Python, errors that name the
value, and properties (rendered rows parse back to the same values; the fast Arrow paths
agree with the value-by-value path)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqltopic.errors import InvalidValueError
from sqltopic.sql.insert import parse_insert
from sqltopic.sql.model import Column
from sqltopic.sql.scan import ValueRows
from sqltopic.sql.statements import Pos, Value
from sqltopic.sql.types import INTEGER_RANGES, ColumnType, Precision
from sqltopic.sql.values import convert_value, slow_column, to_arrow

NOW_US = 1_700_000_000_123_456  # 2023-11-14 22:13:20.123456 UTC
NOW_MS = NOW_US // 1_000
TODAY_MS = NOW_MS - NOW_MS % 86_400_000
TS = Column("ts", ColumnType("TIMESTAMP"))
# 2018-10-03 14:38:15 UTC in seconds.
T0 = 1_538_577_495
TICKS: dict[str, int] = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


START = Pos(1, 1)


def rows_of(values: str, base: Pos = START) -> ValueRows:
    """The rows of `INSERT INTO d1001 VALUES <values>`."""
    return parse_insert(f"INSERT INTO d1001 VALUES {values}", base).parts[0].rows


def column(spec: str) -> Column:
    return Column("c", ColumnType.parse(spec))


def convert_one(spec: str, token: str, precision: Precision = "ms") -> Any:
    """`token` in a column of type `spec` (after a key column), through `to_arrow`, after
    checking that the value-by-value path gives the same."""
    rows = rows_of(f"(1, {token})")
    cols = [TS, column(spec)]
    fast = to_arrow(rows, cols, precision, NOW_US, table="d1001").column(1)
    slow = slow_column(rows, 1, cols[1], precision, NOW_US, table="d1001")
    assert fast.equals(slow)
    if spec == "TIMESTAMP":
        return fast.cast(pa.int64())[0].as_py()
    return fast[0].as_py()


# --- conversions -------------------------------------------------------------------------

CONVERSIONS: list[tuple[str, str, Precision, Any]] = [
    # timestamps: integers, date-times (naive = UTC), NOW arithmetic
    ("TIMESTAMP", "1538548685000", "ms", 1_538_548_685_000),
    ("TIMESTAMP", "-1", "ms", -1),
    ("TIMESTAMP", "'1538548685000'", "ms", 1_538_548_685_000),
    ("TIMESTAMP", "'2018-10-03 14:38:15.000'", "ms", T0 * 1_000),
    ("TIMESTAMP", '"2018-10-03 14:38:15.5"', "ms", T0 * 1_000 + 500),
    ("TIMESTAMP", "'2018-10-03T14:38:15.123Z'", "ms", T0 * 1_000 + 123),
    ("TIMESTAMP", "'2018-10-03 14:38:15+08:00'", "ms", (T0 - 8 * 3_600) * 1_000),
    ("TIMESTAMP", "'2018-10-03 14:38:15.5-0130'", "ms", (T0 + 5_400) * 1_000 + 500),
    ("TIMESTAMP", "'2018-10-03'", "ms", (T0 - 14 * 3_600 - 38 * 60 - 15) * 1_000),
    ("TIMESTAMP", "'2018-10-03 14:38'", "ms", (T0 - 15) * 1_000),
    ("TIMESTAMP", "'2018-10-3 4:38:15'", "ms", (T0 - 10 * 3_600) * 1_000),
    ("TIMESTAMP", "'2018-10-03 14:38:15.123456789'", "ms", T0 * 1_000 + 123),
    ("TIMESTAMP", "'2018-10-03 14:38:15.123456789'", "us", T0 * 1_000_000 + 123_456),
    ("TIMESTAMP", "'2018-10-03 14:38:15.123456789'", "ns", T0 * 1_000_000_000 + 123_456_789),
    ("TIMESTAMP", "'2018-10-03 14:38:15.1'", "ns", T0 * 1_000_000_000 + 100_000_000),
    ("TIMESTAMP", "'0000-03-01'", "ms", -62_162_035_200_000),
    ("TIMESTAMP", "'1969-12-31 23:59:59.999'", "ms", -1),
    ("TIMESTAMP", "NOW", "ms", NOW_MS),
    ("TIMESTAMP", "NOW", "us", NOW_US),
    ("TIMESTAMP", "NOW", "ns", NOW_US * 1_000),
    ("TIMESTAMP", "now()", "ms", NOW_MS),
    ("TIMESTAMP", "'now'", "ms", NOW_MS),
    ("TIMESTAMP", "NOW + 1s", "ms", NOW_MS + 1_000),
    ("TIMESTAMP", "NOW - 10m", "ms", NOW_MS - 600_000),
    ("TIMESTAMP", "now+1a", "ms", NOW_MS + 1),
    ("TIMESTAMP", "NOW+1a", "us", NOW_US + 1_000),
    ("TIMESTAMP", "NOW+1b", "ms", NOW_MS),
    ("TIMESTAMP", "NOW+1b", "ns", NOW_US * 1_000 + 1),
    ("TIMESTAMP", "NOW + 7u", "us", NOW_US + 7),
    ("TIMESTAMP", "NOW+2h", "ms", NOW_MS + 7_200_000),
    ("TIMESTAMP", "NOW-1d", "ms", NOW_MS - 86_400_000),
    ("TIMESTAMP", "NOW+1w", "ms", NOW_MS + 604_800_000),
    ("TIMESTAMP", "NOW() + 1S", "ms", NOW_MS + 1_000),
    ("TIMESTAMP", "TODAY()", "ms", TODAY_MS),
    ("TIMESTAMP", "today + 1h", "ms", TODAY_MS + 3_600_000),
    ("TIMESTAMP", "'2018-10-03 14:38:15' + 1d", "ms", (T0 + 86_400) * 1_000),
    ("TIMESTAMP", "1538548685000+10a", "ms", 1_538_548_685_010),
    # integers: ranges, quoted numbers, decimals rounded half away from zero, hex, binary
    ("INT", "219", "ms", 219),
    ("INT", "-2147483648", "ms", -2_147_483_648),
    ("INT", "'42'", "ms", 42),
    ("INT", "+7", "ms", 7),
    ("INT", "007", "ms", 7),
    ("INT", "1.5", "ms", 2),
    ("INT", "-2.5", "ms", -3),
    ("INT", "2.49", "ms", 2),
    ("INT", "1e3", "ms", 1_000),
    ("INT", "0x10", "ms", 16),
    ("INT", "-0b11", "ms", -3),
    ("TINYINT", "-128", "ms", -128),
    ("TINYINT", "0x7F", "ms", 127),
    ("TINYINT UNSIGNED", "255", "ms", 255),
    ("SMALLINT UNSIGNED", "'65535'", "ms", 65_535),
    ("BIGINT", "9223372036854775807", "ms", 2**63 - 1),
    ("BIGINT", "-9223372036854775808", "ms", -(2**63)),
    ("BIGINT UNSIGNED", "18446744073709551615", "ms", 2**64 - 1),
    ("BIGINT UNSIGNED", "0xFFFFFFFFFFFFFFFF", "ms", 2**64 - 1),
    # floating point
    ("FLOAT", "10.3", "ms", pa.scalar(10.3, pa.float32()).as_py()),
    ("FLOAT", "'1.5'", "ms", 1.5),
    ("FLOAT", "-3.4028234663852886e38", "ms", -3.4028234663852886e38),
    ("FLOAT", "0x10", "ms", 16.0),
    ("FLOAT", "219", "ms", 219.0),
    ("DOUBLE", "1e308", "ms", 1e308),
    ("DOUBLE", "'2.5e-3'", "ms", 2.5e-3),
    ("DOUBLE", ".5", "ms", 0.5),
    ("DOUBLE", "5.", "ms", 5.0),
    # booleans
    ("BOOL", "true", "ms", True),
    ("BOOL", "FALSE", "ms", False),
    ("BOOL", "1", "ms", True),
    ("BOOL", "0", "ms", False),
    ("BOOL", "2", "ms", True),
    ("BOOL", "0.0", "ms", False),
    ("BOOL", "'true'", "ms", True),
    ("BOOL", '"False"', "ms", False),
    # strings: escapes, numbers and booleans as written, lengths in bytes or characters
    ("VARCHAR(5)", "'abcde'", "ms", "abcde"),
    ("VARCHAR(8)", "10.30", "ms", "10.30"),
    ("VARCHAR(8)", "TRUE", "ms", "TRUE"),
    ("VARCHAR(8)", "'it''s'", "ms", "it's"),
    ("VARCHAR(8)", '"say ""a"""', "ms", 'say "a"'),
    ("VARCHAR(8)", '"a\\"b"', "ms", 'a"b'),
    ("VARCHAR(8)", "'a\\'b'", "ms", "a'b"),
    ("VARCHAR(8)", "'a\\nb\\tc'", "ms", "a\nb\tc"),
    ("VARCHAR(8)", "'\\\\ \\% \\_'", "ms", "\\ \\% \\_"),
    ("VARCHAR(8)", "'\\q'", "ms", "q"),
    ("VARCHAR(8)", "'null'", "ms", "null"),
    ("VARCHAR(8)", "''", "ms", ""),
    ("BINARY(6)", "'äöü'", "ms", "äöü"),
    ("NCHAR(3)", "'äöü'", "ms", "äöü"),
    # NULL
    ("INT", "NULL", "ms", None),
    ("INT", "'null'", "ms", None),
    ("FLOAT", "null", "ms", None),
    ("BOOL", "'NULL'", "ms", None),
    ("VARCHAR(8)", "NULL", "ms", None),
    ("TIMESTAMP", "NULL", "ms", None),  # not the key here
]


@pytest.mark.parametrize(
    ("spec", "token", "precision", "expected"),
    CONVERSIONS,
    ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CONVERSIONS],
)
def test_converts(spec: str, token: str, precision: Precision, expected: Any) -> None:
    assert convert_one(spec, token, precision) == expected


def test_arrow_types_follow_the_column_types() -> None:
    specs = [
        "TIMESTAMP", "BOOL", "TINYINT", "SMALLINT", "INT", "BIGINT", "TINYINT UNSIGNED",
        "SMALLINT UNSIGNED", "INT UNSIGNED", "BIGINT UNSIGNED", "FLOAT", "DOUBLE",
        "VARCHAR(4)", "NCHAR(4)",
    ]  # fmt: skip
    cols = [TS] + [Column(f"c{i}", ColumnType.parse(s)) for i, s in enumerate(specs)]
    values = ["1", "1", "true"] + ["1"] * 10 + ["'a'", "'b'"]
    for precision in ("ms", "us", "ns"):
        batch = to_arrow(rows_of(f"({', '.join(values)})"), cols, precision, 0, table="t")
        assert batch.schema.names == [c.name for c in cols]
        assert batch.schema.types == [c.type.arrow(precision) for c in cols]


def test_meters_rows_become_a_batch() -> None:
    meters = [
        TS,
        Column("current", ColumnType("FLOAT")),
        Column("voltage", ColumnType("INT")),
        Column("phase", ColumnType("FLOAT")),
    ]
    rows = rows_of("(1538548685000, 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, 218, 0.33)")
    batch = to_arrow(rows, meters, "ms", NOW_US, table="d1001")
    assert batch.column(0).cast(pa.int64()).to_pylist() == [1_538_548_685_000, T0 * 1_000]
    assert batch.column(2).to_pylist() == [219, 218]
    assert batch.column(1).type == pa.float32()


def test_double_extremes_take_the_fast_path_unchanged() -> None:
    rows = rows_of("(1, 1e308) (2, -1.7976931348623157e308) (3, 5e-324)")
    batch = to_arrow(rows, [TS, column("DOUBLE")], "ms", NOW_US, table="d1001")
    assert batch.column(1).to_pylist() == [1e308, -1.7976931348623157e308, 5e-324]


# --- errors ------------------------------------------------------------------------------

ERRORS: list[tuple[str, str, str]] = [
    ("INT", "'abc'", "value 'abc' for column c (INT) of table d1001, row 2: not an integer"),
    ("INT", "true", "value true for column c (INT) of table d1001, row 2: not an integer"),
    ("INT", "NOW", "not an integer"),
    ("INT", "2147483648", "out of range for INT (-2147483648..2147483647)"),
    ("TINYINT", "128", "value 128 for column c (TINYINT) of table d1001, row 2: out of range"),
    ("TINYINT", "-129", "out of range for TINYINT (-128..127)"),
    ("TINYINT", "0x80", "out of range for TINYINT (-128..127)"),
    ("TINYINT", "127.5", "out of range for TINYINT"),
    ("TINYINT UNSIGNED", "-1", "out of range for TINYINT UNSIGNED (0..255)"),
    ("BIGINT", "1e30", "out of range"),
    ("BIGINT", "1e999999999", "out of range"),
    ("FLOAT", "1e39", "value 1e39 for column c (FLOAT) of table d1001, row 2: out of range"),
    ("FLOAT", "'x1'", "not a number"),
    ("DOUBLE", "1e400", "out of range for DOUBLE"),
    ("BOOL", "'yes'", "value 'yes' for column c (BOOL) of table d1001, row 2: not a boolean"),
    ("VARCHAR(4)", "'äää'", "value 'äää' for column c (VARCHAR(4)) of table d1001, row 2: "),
    ("VARCHAR(4)", "'äää'", "too long: 6 bytes, VARCHAR(4) holds at most 4"),
    ("NCHAR(2)", "'äää'", "too long: 3 characters, NCHAR(2) holds at most 2"),
    ("VARCHAR(4)", "12345", "too long: 5 bytes"),
    ("VARCHAR(8)", "NOW + 1s", "a time expression is not a string; quote it"),
    ("TIMESTAMP", "'2018-13-01 00:00:00'", "not a valid date-time"),
    ("TIMESTAMP", "'2018-02-29'", "not a valid date-time"),
    ("TIMESTAMP", "'2018-10-03 24:00:00'", "not a valid date-time"),
    ("TIMESTAMP", "'2018-10-03 14:38:15+25:00'", "not a valid time zone offset"),
    ("TIMESTAMP", "'yesterday'", "value 'yesterday' for column c (TIMESTAMP) of table d1001"),
    ("TIMESTAMP", "'yesterday'", "not a timestamp (use an integer in the database precision"),
    ("TIMESTAMP", "'2018/10/03'", "not a timestamp"),
    ("TIMESTAMP", "1.5", "not a timestamp"),
    ("TIMESTAMP", "0x10", "not a timestamp"),
    ("TIMESTAMP", "true", "not a timestamp"),
    ("TIMESTAMP", "true + 1s", "value true + 1s for column c (TIMESTAMP) of table d1001, row 2"),
    ("TIMESTAMP", "NULL - 1s", "not a timestamp"),
    ("TIMESTAMP", "NOW + 1y", "unknown time unit 'y'; use b, u, a, s, m, h, d or w"),
    ("TIMESTAMP", "9223372036854775808", "out of range for TIMESTAMP"),
    ("TIMESTAMP", "NOW + 9999999999999w", "out of range for TIMESTAMP"),
]


@pytest.mark.parametrize(("spec", "token", "message"), ERRORS, ids=[e[0] + e[1] for e in ERRORS])
def test_value_errors_name_value_column_table_row_and_place(
    spec: str, token: str, message: str
) -> None:
    rows = rows_of(f"\n  (1538548685000, 1)\n  (1538548686000, {token})", Pos(2, 5))
    cols = [TS, column(spec)]
    with pytest.raises(InvalidValueError) as info:
        to_arrow(rows, cols, "ms", NOW_US, table="d1001")
    assert message in info.value.message
    assert (info.value.line, info.value.column) == (4, 19)  # row 2 is line 2 of the text


def test_null_primary_timestamp() -> None:
    rows = rows_of("(1, 2) (NULL, 3)")
    with pytest.raises(InvalidValueError) as info:
        to_arrow(rows, [TS, column("INT")], "ms", NOW_US, table="d1001")
    assert info.value.message == (
        "value NULL for column ts (TIMESTAMP) of table d1001, row 2: "
        "the primary timestamp cannot be NULL"
    )
    assert (info.value.line, info.value.column) == (1, 34)


def test_the_key_may_be_named() -> None:
    rows = rows_of("(2, NULL)")
    cols = [column("INT"), Column("ts", ColumnType("TIMESTAMP"))]
    with pytest.raises(InvalidValueError, match="primary timestamp cannot be NULL"):
        to_arrow(rows, cols, "ms", NOW_US, table="d1001", key="ts")
    assert to_arrow(rows, cols, "ms", NOW_US, table="d1001").column(1).null_count == 1


def test_a_row_of_the_wrong_width() -> None:
    rows = rows_of("(1538548685000, 1) (1538548686000, 2)")
    cols = [TS, column("INT"), column("FLOAT")]
    with pytest.raises(InvalidValueError) as info:
        to_arrow(rows, cols, "ms", NOW_US, table="d1001")
    assert info.value.message == (
        "row 1 of table d1001 has 2 values but 3 columns (ts, c, c) are to be filled"
    )
    assert (info.value.line, info.value.column) == (1, 27)


# --- tag values --------------------------------------------------------------------------

TAGS: list[tuple[Value, str, Any]] = [
    (Value("string", "California.SanFrancisco"), "VARCHAR(64)", "California.SanFrancisco"),
    (Value("number", "2"), "INT", 2),
    (Value("number", "-3"), "TINYINT", -3),
    (Value("string", "7"), "INT", 7),
    (Value("number", "1.5e3"), "DOUBLE", 1_500.0),
    (Value("bool", "true"), "BOOL", True),
    (Value("null", "NULL"), "INT", None),
    (Value("null", "NULL"), "TIMESTAMP", None),  # a tag is never the primary key
    (Value("string", "null"), "INT", None),
    (Value("now", "NOW"), "TIMESTAMP", NOW_MS),
    (Value("now", "NOW+1s"), "TIMESTAMP", NOW_MS + 1_000),
    (Value("string", "2018-10-03 14:38:15"), "TIMESTAMP", T0 * 1_000),
    (Value("number", "10.30"), "NCHAR(8)", "10.30"),
]


@pytest.mark.parametrize(("value", "spec", "expected"), TAGS, ids=[str(t[0]) for t in TAGS])
def test_tag_values(value: Value, spec: str, expected: Any) -> None:
    tag = Column("t", ColumnType.parse(spec))
    assert convert_value(value, tag, "ms", NOW_US) == expected


def test_tag_values_parsed_from_an_insert() -> None:
    sql = "INSERT INTO d1 USING st TAGS ('x''y', -3, NOW + 1s, NULL) VALUES (1)"
    values = parse_insert(sql, Pos(1, 1)).parts[0].tag_values
    specs = ["VARCHAR(4)", "SMALLINT", "TIMESTAMP", "DOUBLE"]
    got = [
        convert_value(v, Column("t", ColumnType.parse(s)), "us", NOW_US)
        for v, s in zip(values, specs, strict=True)
    ]
    assert got == ["x'y", -3, NOW_US + 1_000_000, None]


def test_tag_value_errors_name_value_tag_table_and_place() -> None:
    value = Value("string", "California.SanFrancisco", Pos(3, 40))
    tag = Column("location", ColumnType("VARCHAR", 8))
    with pytest.raises(InvalidValueError) as info:
        convert_value(value, tag, "ms", NOW_US, table="d1001")
    assert info.value.message == (
        "value 'California.SanFrancisco' for tag location (VARCHAR(8)) of table d1001: "
        "too long: 23 bytes, VARCHAR(8) holds at most 8"
    )
    assert (info.value.line, info.value.column) == (3, 40)
    with pytest.raises(InvalidValueError, match="value 'abc' for tag g \\(INT\\): not an integer"):
        convert_value(Value("string", "abc"), Column("g", ColumnType("INT")), "ms", NOW_US)


# --- properties --------------------------------------------------------------------------

# Timestamps from 1900 to 2200: inside what every precision holds in 64 bits.
FIRST_SECOND, LAST_SECOND = -2_208_988_800, 7_258_118_400
SPECS = [
    "BOOL", "TINYINT", "SMALLINT", "INT", "BIGINT", "TINYINT UNSIGNED", "SMALLINT UNSIGNED",
    "INT UNSIGNED", "BIGINT UNSIGNED", "FLOAT", "DOUBLE", "VARCHAR", "NCHAR",
]  # fmt: skip
_ESCAPED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Characters likeliest to break a scanner, mixed into random text.
_TRICKY = st.sampled_from(list("'\"\\\n\t\r%_x,() `;-/*ä€𝄞"))
text_st = st.text(st.one_of(_TRICKY, st.characters(codec="utf-8")), max_size=12)


@st.composite
def string_sql(draw: st.DrawFn, text: str) -> str:
    """`text` as a quoted string, each quote or control character written one of the ways
    TDengine reads back."""
    quote = draw(st.sampled_from(["'", '"']))
    out = [quote]
    for char in text:
        if char == quote:
            out.append(draw(st.sampled_from([quote * 2, "\\" + quote])))
        elif char == "\\":
            out.append("\\\\")
        elif char in _ESCAPED:
            out.append(draw(st.sampled_from([char, _ESCAPED[char]])))
        elif char in "'\"":
            out.append(draw(st.sampled_from([char, "\\" + char])))
        else:
            out.append(char)
    return "".join(out) + quote


@st.composite
def timestamp_sql(draw: st.DrawFn, value: int, precision: Precision) -> str:
    """A timestamp as an integer or a quoted date-time (in any zone)."""
    form = draw(st.sampled_from(["integer", "quoted integer", "date-time"]))
    if form != "date-time":
        return str(value) if form == "integer" else f"'{value}'"
    seconds, fraction = divmod(value, TICKS[precision])
    offset = draw(st.sampled_from([None, 0, *range(-14 * 60, 14 * 60 + 1, 45)]))
    local = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds + (offset or 0) * 60)
    digits = f"{fraction:0{len(str(TICKS[precision])) - 1}d}"
    if draw(st.booleans()):
        digits = digits.rstrip("0")
    sep = draw(st.sampled_from([" ", "T"]))
    text = f"{local:%Y-%m-%d}{sep}{local:%H:%M:%S}" + (f".{digits}" if digits else "")
    return string_sql_plain(text + _zone(offset, draw(st.booleans())))


def string_sql_plain(text: str) -> str:
    return f"'{text}'"


def _zone(offset: int | None, colon: bool) -> str:
    if offset is None:
        return ""
    if offset == 0 and colon:
        return "Z"
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"


@st.composite
def integer_sql(draw: st.DrawFn, value: int) -> str:
    form = draw(st.sampled_from(["plain", "hex", "quoted", "decimal", "exponent", "zeros"]))
    sign = "-" if value < 0 else ""
    return {
        "plain": str(value),
        "hex": f"{sign}{hex(abs(value))}",
        "quoted": f"'{value}'",
        "decimal": f"{value}.{draw(st.sampled_from(['0', '', '4', '49']))}",
        "exponent": f"{value}e0",
        "zeros": f"{sign}00{abs(value)}",
    }[form]


@st.composite
def typed_value(draw: st.DrawFn, spec: ColumnType, precision: Precision) -> tuple[Any, str]:
    """A value of type `spec` (None for NULL) and one way to write it."""
    if draw(st.integers(0, 9)) == 0:
        return None, draw(st.sampled_from(["NULL", "null", "Null"]))
    name = spec.name
    if name == "BOOL":
        flag = draw(st.booleans())
        forms = ["true", "TRUE", "1", "'true'", "2", "-1.5"] if flag else ["false", "0", "'False'"]
        return flag, draw(st.sampled_from(forms))
    if name in INTEGER_RANGES:
        integer = draw(st.integers(*INTEGER_RANGES[name]))
        return integer, draw(integer_sql(integer))
    if name in ("FLOAT", "DOUBLE"):
        width: Literal[32, 64] = 32 if name == "FLOAT" else 64
        real = draw(st.floats(width=width, allow_infinity=False, allow_nan=False))
        return real, draw(st.sampled_from([repr(real), f"'{real!r}'", f"{real:.17e}"]))
    limit = spec.length or 0
    text = draw(text_st)
    while len(text if name == "NCHAR" else text.encode()) > limit:
        text = text[:-1]
    return text, draw(string_sql(text))


@st.composite
def tables(draw: st.DrawFn) -> tuple[Precision, list[Column], list[list[tuple[Any, str]]]]:
    precision: Precision = draw(st.sampled_from(["ms", "us", "ns"]))
    specs = draw(st.lists(st.sampled_from(SPECS), max_size=5))
    types = [
        ColumnType(s, draw(st.integers(1, 12))) if s in ("VARCHAR", "NCHAR") else ColumnType(s)  # type: ignore[arg-type]
        for s in specs
    ]
    columns = [TS] + [Column(f"c{i}", t) for i, t in enumerate(types)]
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        tick = TICKS[precision]
        ts = draw(st.integers(FIRST_SECOND * tick, LAST_SECOND * tick))
        row = [(ts, draw(timestamp_sql(ts, precision)))]
        row += [draw(typed_value(t, precision)) for t in types]
        rows.append(row)
    return precision, columns, rows


@st.composite
def statement(draw: st.DrawFn, rows: list[list[tuple[Any, str]]]) -> str:
    tuples = []
    for row in rows:
        comma = draw(st.sampled_from([",", ", ", " ,", " , ", ",\n  "]))
        tuples.append("(" + comma.join(text for _, text in row) + ")")
    out = "INSERT INTO t VALUES " + tuples[0]
    for t in tuples[1:]:
        out += draw(st.sampled_from([" ", "\n", ",", ", ", "", " -- row\n", " /* row */ "])) + t
    return out


def _column_values(batch: pa.RecordBatch, index: int) -> list[Any]:
    array = batch.column(index)
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.int64())
    return list(array.to_pylist())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(), data=st.data())
def test_rendered_rows_parse_back_to_the_same_values(
    table: tuple[Precision, list[Column], list[list[tuple[Any, str]]]], data: st.DataObject
) -> None:
    precision, columns, rows = table
    sql = data.draw(statement(rows))
    (part,) = parse_insert(sql, Pos(1, 1)).parts
    assert len(part.rows) == len(rows)
    batch = to_arrow(part.rows, columns, precision, NOW_US, table="t")
    for index in range(len(columns)):
        assert _column_values(batch, index) == [row[index][0] for row in rows]


# Tokens of every form each column type meets, valid or not, for the fast/slow agreement.
_DATE_TEXT = st.builds(
    lambda d, sep, t, frac, zone: f"'{d}{sep}{t}{frac}{zone}'",
    st.sampled_from(["2018-10-03", "1969-12-31", "0000-02-29", "2018-02-30", "2018-1-3"]),
    st.sampled_from([" ", "T", "t"]),
    st.sampled_from(["14", "14:38", "14:38:15", "23:59:59", "4:38:15"]),
    st.sampled_from(["", ".", ".1", ".123", ".123456", ".123456789", ".1234567891"]),
    st.sampled_from(["", "Z", "+08:00", "-0130"]),
)
_NUMBERS = st.one_of(
    st.integers(-(2**65), 2**65).map(str),
    st.integers(0, 2**66).map(hex),
    st.sampled_from(["0x80", "0xFF", "-0x10", "0b101", "+5", "007", "-0", "1.5", "2.5", "-.5"]),
    st.sampled_from(["1e3", "1E39", "1e400", "3.4028235e38", "0", "1", "2"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
_WORDS = st.sampled_from(
    ["NULL", "null", "true", "FALSE", "'true'", "'null'", "NOW", "now()", "NOW + 1s", "NOW-2w"]
)
_STRINGS = text_st.flatmap(string_sql)
_QUOTED_NUMBERS = _NUMBERS.map(lambda n: f"'{n}'")
_BOOLS = st.sampled_from(["true", "FALSE", "1", "0", "2", "'true'"])
# Columns of one family of forms reach the fast paths; mixed ones the slow path.
_FAMILIES = [_NUMBERS, _WORDS, _DATE_TEXT, _QUOTED_NUMBERS, _STRINGS, _BOOLS]
column_tokens_st = st.sampled_from(
    [
        *_FAMILIES,
        *(st.one_of(f, st.just("NULL")) for f in _FAMILIES),
        st.one_of(*_FAMILIES),
    ]
).flatmap(lambda family: st.lists(family, min_size=1, max_size=6))


@settings(max_examples=300, deadline=None)
@given(
    spec=st.sampled_from([*SPECS, "TIMESTAMP"]),
    precision=st.sampled_from(["ms", "us", "ns"]),
    tokens=column_tokens_st,
    repeat=st.integers(1, 3),
)
def test_fast_paths_agree_with_the_value_by_value_path(
    spec: str, precision: Precision, tokens: list[str], repeat: int
) -> None:
    tokens = tokens * repeat  # the same forms across a whole column
    length = 6 if spec in ("VARCHAR", "NCHAR") else None
    col = Column("c", ColumnType(spec, length))  # type: ignore[arg-type]
    rows = rows_of(" ".join(f"(1, {t})" for t in tokens))
    cols = [TS, col]
    try:
        fast: Any = to_arrow(rows, cols, precision, NOW_US, table="t").column(1)
    except InvalidValueError as err:
        fast = err.message
    try:
        slow: Any = slow_column(rows, 1, col, precision, NOW_US, table="t")
    except InvalidValueError as err:
        slow = err.message
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
    else:
        assert fast.equals(slow), (fast, slow)
