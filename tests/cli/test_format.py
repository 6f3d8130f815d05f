"""How the command line prints rows (cli_format) and progress (cli_progress)."""

from __future__ import annotations

import io
import json

import pyarrow as pa

from sqltopic.cli.format import CsvWriter, JsonLinesWriter, counted, json_values, table_lines
from sqltopic.cli.progress import Progress, line

TS_MS = 1_538_548_685_123


def test_tables_align_numbers_right_and_show_null() -> None:
    table = pa.table({
        "ts": pa.array([TS_MS, None], pa.timestamp("ms")),
        "current": pa.array([10.3, None], pa.float32()),
        "voltage": pa.array([219, 1234], pa.int32()),
        "location": ["北京", "a\nb"],
    })  # fmt: skip
    assert table_lines(table) == [
        "ts                      | current | voltage | location",
        "------------------------+---------+---------+---------",
        "2018-10-03 06:38:05.123 |    10.3 |     219 | 北京",
        "NULL                    |    NULL |    1234 | a\\nb",
    ]
    assert table_lines(pa.table({"n": pa.array([], pa.int64())})) == ["n", "-"]


def test_json_values_keep_precision_and_iso_timestamps() -> None:
    assert json_values(pa.array([TS_MS * 1_000_000 + 456_789, None], pa.timestamp("ns"))) == [
        "2018-10-03T06:38:05.123456789Z",
        None,
    ]
    utc = pa.array([TS_MS * 1000], pa.timestamp("us", tz="UTC"))
    assert json_values(utc) == ["2018-10-03T06:38:05.123000Z"]
    floats = pa.array([10.3, float("nan"), float("inf"), None], pa.float32())
    assert json_values(floats) == [10.3, None, None, None]
    assert json_values(pa.array([5, -7], pa.decimal128(38, 0))) == [5, -7]
    assert json_values(pa.array([True, None])) == [True, None]
    assert json_values(pa.array([b"ab", None], pa.binary())) == ["ab", None]


def test_jsonl_writes_one_object_per_row() -> None:
    out = io.StringIO()
    JsonLinesWriter(out).write(pa.table({"a": [1, 2], "b": ["x", None]}))
    assert [json.loads(row) for row in out.getvalue().splitlines()] == [
        {"a": 1, "b": "x"},
        {"a": 2, "b": None},
    ]


def test_csv_writes_a_header_when_the_columns_change() -> None:
    out = io.StringIO()
    writer = CsvWriter(out)
    ts = pa.array([TS_MS], pa.timestamp("ms"))
    writer.write(pa.table({"ts": ts, "s": ["a,b"]}))
    writer.write(pa.table({"ts": ts, "s": pa.array([None], pa.string())}))
    writer.write(pa.table({"n": [1]}))
    writer.write(pa.table({}))
    assert out.getvalue().splitlines() == [
        "ts,s",
        '2018-10-03T06:38:05.123Z,"a,b"',
        "2018-10-03T06:38:05.123Z,",
        "n",
        "1",
    ]


def test_counted_says_row_or_rows() -> None:
    assert [counted(n, "row") for n in (0, 1, 2, 1000)] == [
        "0 rows",
        "1 row",
        "2 rows",
        "1,000 rows",
    ]


def test_progress_draws_only_on_a_terminal() -> None:
    assert line(512 * 1024, 1024 * 1024, 1234) == (
        "[###############---------------]  50% 0.5/1.0 MiB 1,234 rows"
    )
    assert line(300, 2048, 1) == "[####--------------------------]  15% 0.3/2.0 KiB 1 row"
    out = io.StringIO()  # not a terminal
    progress = Progress(100, out)
    progress.update(50, 10, force=True)
    progress.close()
    assert out.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    progress = Progress(100, screen)
    progress.update(100, 10, force=True)
    progress.close()
    assert screen.getvalue() == "\r\x1b[K" + line(100, 100, 10) + "\n"
