"""TDengine's scalar functions in real topics on a real server: the examples of TDengine's
function reference and a subscription test of TDengine's own, consumed by a real
consumer, against expected rows worked out here by hand or in plain Python.

Sources (taosdata/TDengine):
* DOC = docs/en/14-reference/03-taos-sql/22-function.md
  (https://docs.tdengine.com/tdengine-reference/sql-manual/functions/): the `taos>`
  examples of each function; where they depend on the client's time zone, the server's
  is UTC.
* TMQ = tests/system-test/7-tmq/tmqConsFromTsdb-1ctb-funcNFilter.py (tmqCase1's topic),
  over tmqCommon.py's schema (stb: c1 int, c2 bigint, c3 double, c4 binary(32),
  c5 nchar(32), c6 timestamp; tags t0..t4, t4 'shanghai').
* ISSUE: the forms of issue 13 that sqltopic refused before (to_iso8601, greatest,
  least, truncate, now, today, timetruncate, timediff, durations, NOW in WHERE).

One server and one consumer for the module: every topic is created first, then one
consumer reads them all; each SELECT is also run ad hoc, with the same results.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from tests.client.support import config, drain
from tests.live_server import ServerProcess

START_TS = 1640966400000  # 2022-01-01 00:00:00.000 UTC, tmqCommon's startTs
ROWS = 24
SCHEMA = (
    "(ts timestamp, c1 int, c2 bigint, c3 double, c4 binary(32), c5 nchar(32), c6 timestamp) "
    "tags (t0 int, t1 bigint, t2 double, t3 binary(32), t4 nchar(32))"
)


def _row(i: int) -> tuple[Any, ...]:
    """Row i of ctb0: values chosen so that functions meet signs, zero and fractions."""
    ts = START_TS + i * 997
    return (ts, i - 6, (i - 6) * 1000, i * 1.25 - 7.3, f"b{i}", f"北京{i}", ts + i * 1234)


DATA = [_row(i) for i in range(ROWS)]


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _iso(ms: int, zone: str) -> str:
    """TO_ISO8601 in ms precision (ticks >= 0 here), the zone as written."""
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}" + zone


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


# (case id with its source, the topic's SELECT (table `ctb0`, or `one`: a single row),
#  the rows expected, in order)
DOC_ROW = [("one",)]
CASES: list[tuple[str, str, list[tuple[Any, ...]]]] = [
    (
        "DOC-substring",
        "select substring('tdengine', 0), substring('tdengine', 3), substring('tdengine', 3,3),"
        " substring('tdengine', -3,3), substring('tdengine', -3,-3) from one",
        [("", "engine", "eng", "ine", "")],
    ),
    (
        "DOC-substring_index",
        "select substring_index('www.tdengine.com','.',2), "
        "substring_index('www.tdengine.com','.',-2) from one",
        [("www.tdengine", "tdengine.com")],
    ),
    (
        "DOC-trim",
        "select trim('        a         '), trim(leading from '        a         '), "
        "trim(leading 'b' from 'bbbbbbbba         '), trim(both 'b' from 'bbbbbabbbbbb') "
        "from one",
        [("a", "a         ", "a         ", "a")],
    ),
    (
        "DOC-strings",
        "select char_length('Hello world'), char_length('你好 世界'), ascii('testascii'), "
        "position('a' in 'cba'), position('' in 'cba'), position('d' in 'cba'), "
        "replace('aabbccAABBCC', 'AA', 'DD'), repeat('abc',5), repeat('abc',-1) from one",
        [(11, 5, 116, 3, 1, 0, "aabbccDDBBCC", "abcabcabcabcabc", "")],
    ),
    (
        "DOC-char-to_base64",
        'select char(77), char(77,77), char(77 * 256 + 77), char(77,NULL,77), to_base64(""), '
        'to_base64("Hello, world!"), to_base64("你好 世界") from one',
        [("M", "MM", "MM", "MM", "", "SGVsbG8sIHdvcmxkIQ==", "5L2g5aW9IOS4lueVjA==")],
    ),
    (
        "DOC-math",
        "select round(8888.88), round(8888.88,-1), truncate(8888.88, 0), "
        "truncate(8888.88, -1), exp(2), ln(10), mod(10,3), mod(1,0), sign(-1), sign(0), "
        "degrees(pi()), radians(180), pi() from one",
        [
            (
                8889.0,
                8890.0,
                8888.0,
                8880.0,
                math.exp(2),
                math.log(10),
                1,
                None,
                -1,
                0,
                180.0,
                math.pi,
                math.pi,
            )
        ],
    ),
    (
        "DOC-time",
        "select timediff('2022-01-01 08:00:00', '2022-01-01 08:00:01', 1s), "
        "timediff('2022-01-01 08:00:01', '2022-01-01 08:00:00', 1s), "
        "weekofyear('2000-01-01'), week('2000-01-01', 0), week('2000-01-01', 1), "
        "week('2000-01-01', 2), week('2000-01-01', 3), weekday('2000-01-01'), "
        "dayofweek('2000-01-01'), timetruncate('2020-01-01 23:00:00', 1d, 0), "
        "timetruncate('2020-01-01 23:00:00', 1d, 1), to_iso8601(1, '+00:00'), timezone() "
        "from one",
        [
            (
                -1,
                1,
                52,  # weekofyear
                0,  # week, mode 0
                0,  # mode 1
                52,  # mode 2
                52,  # mode 3
                5,  # weekday
                7,  # dayofweek
                datetime(2020, 1, 1),
                datetime(2020, 1, 1),
                "1970-01-01T00:00:00.001+00:00",
                "UTC (UTC, +0000)",
            )
        ],
    ),
    (
        "TMQ-tmqConsFromTsdb-1ctb-funcNFilter",
        f"select ts, acos(c1), ceil(pow(c1,3)) from stb where (sin(c2) >= 0) and "
        f"(c1 % 4 == 0) and (ts >= {START_TS + 9379}) and (t4 like 'shanghai')",
        [
            (_ts(r[0]), math.acos(r[1]) if -1 <= r[1] <= 1 else None, float(math.ceil(r[1] ** 3)))
            for r in DATA
            if math.sin(r[2]) >= 0 and r[1] % 4 == 0 and r[0] >= START_TS + 9379
        ],
    ),
    (
        "ISSUE-functions",
        "select to_iso8601(ts, '+00:00'), greatest(c1, c2), least(c1, c2), truncate(c3, 0), "
        "timetruncate(c6, 1s), timediff(c6, ts, 1s) from ctb0",
        [
            (
                _iso(ts, "+00:00"),
                max(c1, c2),
                min(c1, c2),
                float(math.trunc(c3)),
                _ts(c6 - c6 % 1000),
                _c_div(c6 - ts, 1000),
            )
            for ts, c1, c2, c3, _c4, _c5, c6 in DATA
        ],
    ),
    (
        "ISSUE-now",
        "select ts, c1 from ctb0 where ts > now - 36500d and ts < now and c6 < now() + 1w "
        "and ts >= today() - 36500d",
        [(_ts(r[0]), r[1]) for r in DATA],
    ),
    (
        "ISSUE-durations",
        "select ts + 1s, c6 - 1a, timediff(c6, ts) from ctb0 where c1 >= 10",
        [(_ts(r[0] + 1000), _ts(r[6] - 1), r[6] - r[0]) for r in DATA if r[1] >= 10],
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(Path(tmp_path_factory.mktemp("compat_functions")) / "data")
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def consumed(server: ServerProcess) -> dict[str, list[tuple[Any, ...]]]:
    """Every case's topic created, then all of them read by one consumer from earliest."""
    with connect(server.address) as conn:
        _load(conn)
        topics = {f"f{i}": case for i, case in enumerate(CASES)}
        for name, (_id, select, _rows) in topics.items():
            conn.execute(f"create topic {name} as {select}")
    consumer = Consumer(config(server.address, "compat_functions"))
    try:
        consumer.subscribe(list(topics))
        got: dict[str, list[tuple[Any, ...]]] = {name: [] for name in topics}
        for message in drain(consumer):
            got[message.topic].extend(message.rows())
    finally:
        consumer.close()
    return {topics[name][0]: rows for name, rows in got.items()}


def _load(conn: Connection) -> None:
    conn.execute("create database fdb vgroups 2 precision 'ms'; use fdb")
    conn.execute(f"create table stb {SCHEMA}")
    conn.execute("create table ctb0 using stb tags(0, 0, 0, 'beijing', 'shanghai')")
    conn.execute("create table one (ts timestamp, c int)")
    conn.execute(f"insert into one values ({START_TS}, 1)")
    values = " ".join(
        f"({ts}, {c1}, {c2}, {c3!r}, '{c4}', '{c5}', {c6})" for ts, c1, c2, c3, c4, c5, c6 in DATA
    )
    conn.execute(f"insert into ctb0 values {values}")


@pytest.mark.parametrize(("case_id", "select", "expected"), CASES, ids=[c[0] for c in CASES])
def test_topic_delivers_tdengine_results(
    consumed: dict[str, list[tuple[Any, ...]]], case_id: str, select: str,
    expected: list[tuple[Any, ...]],
) -> None:  # fmt: skip
    got = consumed[case_id]
    assert [tuple(_approx(v) for v in row) for row in got] == [
        tuple(_approx(v) for v in row) for row in expected
    ], select
    assert expected, "the case expects no row: it tests nothing"


@pytest.mark.parametrize(("case_id", "select", "expected"), CASES, ids=[c[0] for c in CASES])
def test_select_gives_the_same_results(
    server: ServerProcess, consumed: dict[str, list[tuple[Any, ...]]], case_id: str,
    select: str, expected: list[tuple[Any, ...]],
) -> None:  # fmt: skip
    """The same SELECT run ad hoc: TDengine's functions mean the same there (§8)."""
    if "repeat(" in select:  # the sandbox refuses REPEAT in SELECT (docs/sql.md §8)
        select = select.replace("repeat('abc',5)", "'abcabcabcabcabc'")
        select = select.replace("repeat('abc',-1)", "''")
    with connect(server.address) as conn:
        conn.execute("use fdb")
        rows = [tuple(r) for r in conn.execute(select).rows]
    assert sorted(map(_key, rows)) == sorted(map(_key, expected)), select


def _key(row: tuple[Any, ...]) -> tuple[str, ...]:
    """A row as comparable text (an ad hoc SELECT returns rows in no set order)."""
    return tuple(repr(_approx(v)) for v in row)


def _approx(value: Any) -> Any:
    """Floats to 12 significant digits: libm's last bit is not TDengine's contract."""
    return float(f"{value:.12g}") if isinstance(value, float) else value
