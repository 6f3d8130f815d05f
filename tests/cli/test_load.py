"""End-to-end: `sqltopic load` streams CSV files into tables of a real server."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from sqltopic.client import Connection
from tests.cli.support import run_on
from tests.live_server import ServerProcess

HEADER = "tbname,ts,current,voltage,phase,location,groupid\n"
TS0 = 1_538_548_685_000
INT_RANGE = "expected an integer in -2147483648..2147483647"


def _meter_lines(count: int) -> tuple[str, list[tuple[object, ...]]]:
    """CSV lines for `count` rows over three meters, and the rows a SELECT returns."""
    lines: list[str] = []
    rows: list[tuple[object, ...]] = []
    for i in range(count):
        table, ts = f"d{1001 + i % 3}", TS0 + i * 1000
        voltage = None if i % 5 == 4 else 215 + i % 10
        # integers, naive date-times (UTC) and ones with an offset, in turn
        when = [str(ts), f"2018-10-03 06:38:{5 + i:02d}.000", f"2018-10-03T14:38:{5 + i:02d}+08:00"]
        lines.append(
            f"{table},{when[i % 3]},{10 + i / 4},{'' if voltage is None else voltage},"
            f"0.5,California.Place{i % 3},{i % 3}\n"
        )
        rows.append((table, ts, 10 + i / 4, voltage, 0.5, f"California.Place{i % 3}", i % 3))
    return "".join(lines), rows


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    """The rows, timestamps as integers in the database precision."""
    columns = [
        (c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c).to_pylist()
        for c in table.columns
    ]
    return list(zip(*columns, strict=True))


def _select(conn: Connection) -> list[tuple[object, ...]]:
    return _rows(
        conn.query(
            "SELECT tbname, ts, current, voltage, phase, location, groupid "
            "FROM power.meters ORDER BY ts"
        )
    )


def test_load_then_select_gives_the_rows_back(
    live_power: Connection, server: ServerProcess, tmp_path: Path
) -> None:
    body, expected = _meter_lines(25)
    path = tmp_path / "meters.csv"
    path.write_text(HEADER + body)
    done = run_on(server, "load", str(path), "--table", "power.meters", "--batch-rows", "7")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"loaded 25 rows into power\.meters in [\d.]+ s \([\d,]+ rows/s\)\n", done.stdout
    )
    assert done.stderr == ""  # no progress bar: stderr is no terminal
    assert _select(live_power) == expected
    child = tmp_path / "child.csv"
    child.write_text("VOLTAGE,ts\n230,1538548800000\nNULL,1538548801000\n")
    again = run_on(server, "load", str(child), "--table", "power.d1002")
    assert again.returncode == 0, again.stderr
    assert live_power.execute(
        "SELECT voltage, current FROM power.d1002 WHERE ts >= '2018-10-03 06:40:00' ORDER BY ts"
    ).rows == [(230, None), (None, None)]


def test_a_bad_value_names_its_line_and_column_and_earlier_batches_stay(
    live_power: Connection, server: ServerProcess, tmp_path: Path
) -> None:
    body, expected = _meter_lines(10)
    lines = body.splitlines(keepends=True)
    lines[7] = lines[7].replace(",California", "x,California", 1).replace(",0.5x", ",high")
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + "".join(lines))
    done = run_on(server, "load", str(path), "--table", "power.meters", "--batch-rows", "3")
    assert done.returncode == 1
    assert done.stderr == (
        f"sqltopic: {path} line 9, column phase: 'high' is not a valid FLOAT; expected a "
        "number within ±3.4028235e38; 6 rows before line 8 loaded\n"
    )
    assert done.stdout == ""
    assert _select(live_power) == expected[:6]


CASE_HEADER = "tbname,ts,voltage,location\n"
ERRORS = [
    # (table, CSV text, the error after "sqltopic: FILE")
    ("meters", "ts,volts\n", " line 1: 'volts' is not a column of power.meters (it has ts, "
     "current, voltage, phase, location, groupid, tbname)"),
    ("meters", "ts,voltage\n1,2\n", " line 1: loading into super table power.meters needs a "
     "tbname column (each row's child table), and tag columns to create new ones"),
    ("meters", "tbname,voltage\n", " line 1: the timestamp column ts is missing"),
    ("meters", "tbname,ts,TS\n", " line 1: column 'TS' appears twice"),
    ("d1001", "ts,location\n", " line 1: 'location' is a tag of child table power.d1001; load "
     "through its super table (with a tbname column) to set tags"),
    ("meters", CASE_HEADER + "d1,1,2,x\nd1,2,3\n", " line 3: 3 fields where the header has 4: "
     "'d1,2,3'; nothing was loaded"),
    ("meters", CASE_HEADER + "d1,1,2,x\n\n", " line 3, column ts: an empty field (NULL) is not "
     "a valid TIMESTAMP; expected an integer in the database precision (ms) or a date-time "
     "such as 2018-10-03 14:38:05.000 (UTC unless it ends in Z or ±HH:MM); nothing was loaded"),
    ("meters", CASE_HEADER + "d1,2018-02-30,2,x\n", " line 2, column ts: '2018-02-30' is not a "
     "valid TIMESTAMP"),
    ("meters", CASE_HEADER + "d1,1,2147483648,x\n", f" line 2, column voltage: '2147483648' is "
     f"not a valid INT; {INT_RANGE}; nothing was loaded"),
    ("meters", CASE_HEADER + f"d1,1,1,{'x' * 65}\n", f" line 2, column location: '{'x' * 65}' is "
     "not a valid VARCHAR(64); expected at most 64 bytes; nothing was loaded"),
    ("meters", "tbname,ts\nd9,1\n", " line 2: table power.d9 does not exist; give its tag "
     "columns to create it; nothing was loaded"),
]  # fmt: skip


def test_load_errors_are_one_line_naming_the_place(
    live_power: Connection, server: ServerProcess, tmp_path: Path
) -> None:
    live_power.execute("CREATE TABLE d1001 USING meters TAGS ('x', 1)")
    for i, (table, text, error) in enumerate(ERRORS):
        path = tmp_path / f"case{i}.csv"
        path.write_text(text)
        done = run_on(server, "load", str(path), "--table", f"power.{table}")
        assert done.returncode == 1, (text, done.stdout)
        assert done.stderr.startswith(f"sqltopic: {path}{error}"), done.stderr
        assert done.stderr.count("\n") == 1
    assert live_power.execute("SELECT count(*) FROM meters").rows == [(0,)]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--table", "meters"],
            "--table 'meters': give the table as DATABASE.TABLE, e.g. power.meters",
        ),
        (["--table", "power.nope"], "--table power.nope: table power.nope does not exist"),
    ],
)
def test_load_refuses_a_bad_table(
    live_power: Connection, server: ServerProcess, tmp_path: Path, args: list[str], error: str
) -> None:
    path = tmp_path / "m.csv"
    path.write_text(HEADER)
    done = run_on(server, "load", str(path), *args)
    assert (done.returncode, done.stderr) == (1, f"sqltopic: {error}\n")


def test_load_converts_every_type_in_the_database_precision(
    conn: Connection, server: ServerProcess, tmp_path: Path
) -> None:
    conn.execute(
        "CREATE DATABASE u PRECISION 'us';"
        "CREATE TABLE u.t (ts TIMESTAMP, b BOOL, n NCHAR(2), d DOUBLE, ti TINYINT UNSIGNED, "
        "bi BIGINT)"
    )
    path = tmp_path / "types.csv"
    path.write_text(
        "ts,b,n,d,ti,bi\n"
        "2018-10-03 06:38:05.123456789,TRUE,北京,1e300,255,-9223372036854775808\n"
        '1538548685000001,0,"",-0.5,0,\n'
        "2018-10-03T06:38:05.5Z,false,null,,1,7\n"
    )
    done = run_on(server, "load", str(path), "--table", "u.t")
    assert done.returncode == 0, done.stderr
    rows = _rows(conn.query("SELECT ts, b, n, d, ti, bi FROM u.t ORDER BY ts"))
    assert rows == [
        (1_538_548_685_000_001, False, "", -0.5, 0, None),
        (1_538_548_685_123_456, True, "北京", 1e300, 255, -9_223_372_036_854_775_808),
        (1_538_548_685_500_000, False, None, None, 1, 7),
    ]
