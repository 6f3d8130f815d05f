"""TDengine's documented Python query example, and the taospy SQL calls around it, run on
sqltopic with the import changed: the code between the two `----- vendored` lines is
https://github.com/taosdata/TDengine/blob/14f1f3c4bd86bbb80252101e32664791b42354be/docs/examples/python/query_native.py
(the "Native Connection" query of TDengine's developer guide, which prints
`result.fields` and then `result.fetch_all()`), unchanged except:

* `import taos` -> `import sqltopic.taos as taos`;
* its module-level code is the body of `example_main()`, so that the test runs it (and
  importing this file connects to nothing). Its `taos.connect(host="localhost",
  port=6030, ...)` literals stay: the test points `sqltopic.taos.connect` at the test
  server's port instead (`_at`).

The other tests are taospy's calls the reviewer found missing or broken: nanosecond
timestamps as ints (taos-connector-python `taos/field.py`, `_convert_nanosecond_to_datetime`,
and `tests/test_tmq.py` `tmq_consumer_with_precision('ns')`), a timestamp `datetime`
cannot hold as None, `conn.cursor()`, and `except taos.Error`.
"""

# The vendored code keeps its own import (`import sqltopic.taos as taos`, mid-file):
# ruff: noqa: PLR0402, I001
# mypy: allow-untyped-defs, allow-untyped-calls

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from sqltopic.client import Connection
from sqltopic.errors import AuthenticationFailed, SqlError
from tests.client.support import DEADLINE_S, METERS
from tests.live_server import ServerProcess

# ----- vendored from TDengine docs/examples/python/query_native.py@14f1f3c4 -----
# fmt: off
import sqltopic.taos as taos  # was: import taos

def example_main():  # was: module-level code
    conn = None
    try:
        conn = taos.connect(host="localhost",
                            port=6030,
                            user="root",
                            password="taosdata")

        result = conn.query("SELECT ts, current, location FROM power.meters limit 100")
        print(result)
        # Get fields from result
        fields = result.fields
        for field in fields:
            print(field)

        # Get data from result as list of tuple
        data = result.fetch_all()
        for row in data:
            print(row)

    except Exception as err:
        print(f"Failed to query data from power.meters, err:{err}")
    finally:
        if conn:
            conn.close()
# fmt: on
# ----- vendored end -----

MAX_INT64 = 9_223_372_036_854_775_807
NS_VALUES = [1_626_006_833_639_000_000, 1_626_006_833_639_000_001]


def _at(server: ServerProcess) -> Callable[..., taos.TaosConnection]:
    """`taos.connect` with the port of the test server in place of the one given."""
    connect = taos.connect

    def redirected(**kwargs: Any) -> taos.TaosConnection:
        return connect(**(kwargs | {"host": "127.0.0.1", "port": server.port}))

    return redirected


def test_the_documented_query_example_runs_on_sqltopic(
    live_power: Connection,
    server: ServerProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(taos, "connect", _at(server))
    example_main()  # no rows yet: the query works and prints the fields only
    out = capsys.readouterr().out
    assert "Failed" not in out, out
    live_power.execute(METERS)
    example_main()
    lines = capsys.readouterr().out.splitlines()
    assert "Failed" not in "\n".join(lines)
    # taospy prints a TaosField as {name: ..., type: ..., bytes: ...}; VARCHAR's bytes
    # is the longest value here (sqltopic does not carry the declared length)
    assert lines[1:4] == [
        "{name: ts, type: 9, bytes: 8}",
        "{name: current, type: 6, bytes: 4}",
        f"{{name: location, type: 8, bytes: {len('California.SanFrancisco')}}}",
    ]
    row = r"\(datetime\.datetime\([^)]*\), ([\d.]+), '([^']*)'\)"
    rows = [re.fullmatch(row, line) for line in lines[4:]]
    assert all(rows), lines
    assert len(rows) == 8, lines
    assert sorted(round(float(m.group(1)), 1) for m in rows if m) == [
        10.3, 10.3, 10.8, 11.5, 11.8, 12.3, 12.6, 13.4,
    ]  # fmt: skip


def test_nanoseconds_as_ints_and_unrepresentable_timestamps_as_none(
    conn: Connection, server: ServerProcess
) -> None:
    conn.execute(
        "CREATE DATABASE dns PRECISION 'ns'; CREATE TABLE dns.t (ts TIMESTAMP, v INT);"
        "CREATE TOPIC tns AS SELECT ts, v FROM dns.t;"
        "CREATE DATABASE dms; CREATE TABLE dms.t (ts TIMESTAMP, v INT, far TIMESTAMP);"
        "CREATE TOPIC tms AS SELECT ts, far FROM dms.t"
    )
    conn.execute(f"INSERT INTO dns.t VALUES ({NS_VALUES[0]}, 1) ({NS_VALUES[1]}, 2)")
    conn.execute(f"INSERT INTO dms.t VALUES (1538548685000, 1, {MAX_INT64})")
    sql = taos.connect(port=server.port)
    # taospy: a nanosecond TIMESTAMP is the int, whatever its value
    assert sql.query("select ts from dns.t").fetch_all() == [(v,) for v in NS_VALUES]
    assert sql.query("select ts, far from dms.t").fetch_all() == [
        (datetime(2018, 10, 3, 6, 38, 5), None),
    ]  # fmt: skip
    sql.close()
    consumer = taos.Consumer({
        "group.id": "1", "td.connect.port": str(server.port), "auto.offset.reset": "earliest",
        "msg.with.table.name": "true",
    })  # fmt: skip
    try:
        consumer.subscribe(["tns", "tms"])
        rows: dict[str, list[tuple[Any, ...]]] = {"tns": [], "tms": []}
        deadline = time.monotonic() + DEADLINE_S
        while len(rows["tns"]) < 2 or not rows["tms"]:
            assert time.monotonic() < deadline, rows
            res = consumer.poll(1)
            if res is not None:
                for block in res.value() or []:
                    rows[res.topic()] += block.fetchall()
        assert sorted(rows["tns"]) == [(NS_VALUES[0], 1), (NS_VALUES[1], 2)]
        assert all(type(ts) is int for ts, _ in rows["tns"])
        assert rows["tms"] == [(datetime(2018, 10, 3, 6, 38, 5), None)]
    finally:
        consumer.close()


def test_cursor_and_taos_error(live_power: Connection, server: ServerProcess) -> None:
    conn = taos.connect(port=server.port, database="power")
    try:
        cursor = conn.cursor()
        # reference_cursor.py's calls, as taospy's TaosCursor offers them
        assert cursor.execute(METERS) == cursor.rowcount == 8
        cursor.execute("SELECT * FROM power.meters LIMIT 3")
        assert cursor.rowcount == 3
        names = [meta[0] for meta in cursor.description]
        assert names == ["ts", "current", "voltage", "phase", "location", "groupid"]
        first = cursor.fetchone()
        assert first is not None
        assert isinstance(first[0], datetime)
        assert len(cursor.fetchall()) == 2
        cursor.close()
        # a failed statement: taospy's ProgrammingError, a taos.Error, still sqltopic's
        for run in (conn.execute, conn.query, conn.cursor().execute):
            with pytest.raises(taos.Error) as info:
                run("SELECT nope FROM meters")
            assert isinstance(info.value, taos.ProgrammingError)
            assert isinstance(info.value, SqlError)
            assert str(info.value).startswith("[0xffff]: ")
    finally:
        conn.close()
    with pytest.raises(taos.ConnectionError) as login:
        taos.connect(port=server.port, password="wrong")
    assert isinstance(login.value, AuthenticationFailed)
