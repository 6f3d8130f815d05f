"""End-to-end: `sqltopic consume` prints a topic's rows from a real server."""

from __future__ import annotations

import csv
import io
import json
import re
import signal
import struct
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.cli.format import iso_timestamps
from sqltopic.client import Connection
from tests.cli.support import RUN_DEADLINE_S, Lines, parse_table, run_on, start_cli
from tests.client.test_seek_time import clock_past
from tests.live_server import ServerProcess

COLUMNS = "ts, current, voltage, location, tbname"
WHERE = "voltage > 220"
# A safety net only: every run below ends by --max-rows or an idle --timeout.
IDLE_S = "20"


def _insert(conn: Connection, first: int, count: int) -> None:
    """`count` rows over four meters from timestamp `first` (ms); about half match."""
    parts = []
    for m in range(4):
        values = " ".join(
            f"({first + i}, {10 + i / 8}, {215 + (i * 7 + m) % 12}, 0.3)"
            for i in range(m, count, 4)
        )
        tags = f"('California.Meter{m}', {m})"
        parts.append(f"d{1001 + m} USING power.meters TAGS {tags} VALUES {values}")
    conn.execute("INSERT INTO " + " ".join(parts))


def _expected(conn: Connection, since: str = "1970-01-01") -> Counter[tuple[Any, ...]]:
    table = conn.query(f"SELECT {COLUMNS} FROM power.meters WHERE {WHERE} AND ts >= '{since}'")
    return _normal(table.to_pylist())


def _normal(records: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Rows comparable across JSON, CSV and Arrow: ISO timestamps, FLOAT as float32."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r in records:
        ts = r["ts"]
        if not isinstance(ts, str):
            ts = iso_timestamps(pa.array([ts], pa.timestamp("ms")))[0]
        current = struct.unpack("f", struct.pack("f", float(r["current"])))[0]
        out[(ts, current, int(r["voltage"]), r["location"], r["tbname"])] += 1
    return out


@pytest.fixture
def topic(live_power: Connection) -> Connection:
    _insert(live_power, 1_538_548_685_000, 40)
    live_power.execute(f"CREATE TOPIC over AS SELECT {COLUMNS} FROM power.meters WHERE {WHERE}")
    return live_power


def test_jsonl_rows_equal_the_select(topic: Connection, server: ServerProcess) -> None:
    expected = _expected(topic)
    total = str(sum(expected.values()))
    done = run_on(server, "consume", "over", "--from", "earliest", "--format", "jsonl",
                  "--max-rows", total, "--timeout", IDLE_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _normal([json.loads(line) for line in done.stdout.splitlines()]) == expected


def test_csv_with_a_group_commits_and_resumes(topic: Connection, server: ServerProcess) -> None:
    first = _expected(topic)
    args = ("consume", "over", "--group", "g1", "--from", "earliest", "--format", "csv")
    done = run_on(server, *args, "--max-rows", str(sum(first.values())), "--timeout", IDLE_S)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert done.stdout.splitlines()[0] == "ts,current,voltage,location,tbname"
    assert _normal(rows) == first
    idle = run_on(server, *args, "--timeout", "2")
    assert (idle.returncode, idle.stdout) == (0, "")  # all committed
    _insert(topic, 1_538_548_700_000, 12)
    later = _expected(topic, since="2018-10-03 06:38:20")  # 1_538_548_700_000
    more = run_on(server, *args, "--max-rows", str(sum(later.values())), "--timeout", IDLE_S)
    assert _normal(list(csv.DictReader(io.StringIO(more.stdout)))) == later


def test_a_message_cut_by_max_rows_is_not_committed(
    live_power: Connection, server: ServerProcess
) -> None:
    live_power.execute("CREATE TOPIC every AS SELECT ts, voltage FROM power.meters")
    live_power.execute(
        "INSERT INTO d1 USING meters TAGS ('x', 1) VALUES (1000, 0, 1, 0) (2000, 0, 2, 0) "
        "(3000, 0, 3, 0) (4000, 0, 4, 0) (5000, 0, 5, 0)"
    )
    args = ("consume", "every", "--group", "g", "--from", "earliest", "--format", "jsonl")
    cut = run_on(server, *args, "--max-rows", "2", "--timeout", IDLE_S)
    assert [json.loads(line)["voltage"] for line in cut.stdout.splitlines()] == [1, 2]
    whole = run_on(server, *args, "--max-rows", "5", "--timeout", IDLE_S)
    assert [json.loads(line)["voltage"] for line in whole.stdout.splitlines()] == [1, 2, 3, 4, 5]


def test_table_format_names_topic_vgroup_and_rows(topic: Connection, server: ServerProcess) -> None:
    expected = _expected(topic)
    done = run_on(server, "consume", "over", "--from", "earliest", "--max-rows",
                  str(sum(expected.values())), "--timeout", IDLE_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    blocks: list[list[str]] = []
    for line in done.stdout.splitlines():
        if line.startswith("-- "):
            assert re.fullmatch(r"-- topic over vgroup \d+ versions \d+\.\.\d+.*: \d+ rows?", line)
            blocks.append([])
        else:
            blocks[-1].append(line)
    records = []
    for block in blocks:
        header, rows = parse_table(block)
        assert header == ["ts", "current", "voltage", "location", "tbname"]
        for row in rows:
            record = dict(zip(header, row, strict=True))
            record["ts"] = record["ts"].replace(" ", "T") + "Z"
            records.append(record)
    assert _normal(records) == expected


def test_ctrl_c_closes_the_consumer_and_exits_0(topic: Connection, server: ServerProcess) -> None:
    proc = start_cli("consume", "over", "--server", server.address, "--group", "g2",
                     "--from", "earliest", "--format", "jsonl")  # fmt: skip
    assert proc.stdout is not None
    assert proc.stderr is not None
    Lines(proc.stdout).until("{")  # consuming
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=RUN_DEADLINE_S) == 0
    assert proc.stderr.read() == ""
    # what it printed was committed: the group has nothing left, or only later messages
    again = run_on(server, "consume", "over", "--group", "g2", "--format", "jsonl",
                   "--timeout", "2")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert len(again.stdout.splitlines()) < sum(_expected(topic).values())


def test_unknown_topic_is_one_line(live_power: Connection, server: ServerProcess) -> None:
    done = run_on(server, "consume", "nosuch", "--timeout", "1")
    assert (done.returncode, done.stderr) == (1, "sqltopic: topic 'nosuch' does not exist\n")


def test_broadcast_consumers_each_print_every_row_and_resume_by_client_id(
    topic: Connection, server: ServerProcess
) -> None:
    everything = _expected(topic)
    total = str(sum(everything.values()))
    args = ("consume", "over", "--group", "b", "--group-type", "broadcast", "--from",
            "earliest", "--format", "jsonl")  # fmt: skip

    def rows(done: Any) -> Counter[tuple[Any, ...]]:
        assert done.returncode == 0, done.stderr
        return _normal([json.loads(line) for line in done.stdout.splitlines()])

    for client in ("c1", "c2"):  # each of the group's consumers gets every row
        assert rows(run_on(server, *args, "--client-id", client, "--max-rows", total,
                           "--timeout", IDLE_S)) == everything  # fmt: skip
    _insert(topic, 1_538_548_700_000, 12)
    later = _expected(topic, since="2018-10-03 06:38:20")
    more = str(sum(later.values()))
    assert rows(run_on(server, *args, "--client-id", "c1", "--max-rows", more,
                       "--timeout", IDLE_S)) == later  # fmt: skip
    shown = {(r[1], r[2]) for r in topic.execute("SHOW SUBSCRIPTIONS").rows}
    assert shown == {("b:c1", 1), ("b:c1", 2), ("b:c2", 1), ("b:c2", 2)}


def test_broadcast_without_a_client_id_is_one_line(
    topic: Connection, server: ServerProcess
) -> None:
    done = run_on(server, "consume", "over", "--group-type", "broadcast", "--timeout", "1")
    assert done.returncode == 1
    assert done.stderr.startswith("sqltopic: --group-type broadcast: give --client-id NAME")
    assert topic.execute("SHOW CONSUMERS").rows == []


def test_a_key_shared_group_keys_by_the_group_key(topic: Connection, server: ServerProcess) -> None:
    """--group-key names the tag (or column) that keys a key_shared group's rows; the
    group keeps it (a run asking for another key is refused), and is refused for
    other group types."""
    everything = _expected(topic)
    args = ("consume", "over", "--group", "kg", "--group-type", "key_shared", "--from",
            "earliest", "--format", "jsonl")  # fmt: skip
    done = run_on(server, *args, "--group-key", "location", "--timeout", "2")
    assert done.returncode == 0, done.stderr
    assert _normal([json.loads(line) for line in done.stdout.splitlines()]) == everything
    shown = topic.execute("SHOW SUBSCRIPTIONS")
    assert sum(r[shown.columns.index("acked")] for r in shown.rows) == sum(everything.values())
    other = run_on(server, "consume", "over", "--group-type", "shared", "--group-key", "x")
    assert other.returncode == 1
    assert other.stderr.startswith("sqltopic: --group-key: keys rows of --group-type key_shared")
    unknown = run_on(server, *args, "--group-key", "nosuch", "--timeout", "1")
    assert unknown.returncode == 1
    assert "group.key: 'nosuch' is neither a column of topic over's rows" in unknown.stderr


def test_a_shared_group_acknowledges_what_it_printed_and_releases_the_rest(
    topic: Connection, server: ServerProcess
) -> None:
    everything = _expected(topic)
    total = sum(everything.values())
    args = ("consume", "over", "--group", "sg", "--group-type", "shared", "--from",
            "earliest", "--format", "jsonl")  # fmt: skip

    def rows(done: Any) -> Counter[tuple[Any, ...]]:
        assert done.returncode == 0, done.stderr
        return _normal([json.loads(line) for line in done.stdout.splitlines()])

    first = rows(run_on(server, *args, "--max-rows", "3", "--timeout", IDLE_S))
    assert sum(first.values()) == 3
    # the rest of a message cut by --max-rows was released: the next run prints it
    rest = rows(run_on(server, *args, "--max-rows", str(total - 3), "--timeout", IDLE_S))
    assert first + rest == everything
    assert rows(run_on(server, *args, "--timeout", "2")) == Counter()  # all acknowledged
    shown = topic.execute("SHOW SUBSCRIPTIONS")
    acked = shown.columns.index("acked")
    assert sum(r[acked] for r in shown.rows) == total


def _mark_then_insert(conn: Connection, first: int, count: int) -> datetime:
    """A time after every entry so far and at or before the entries of `_insert(first,
    count)` made now (the server's ingest clock is this machine's wall clock)."""
    mark = clock_past(time.time_ns() // 1000) // 1000 + 1  # ms, above all written so far
    clock_past(mark * 1000 - 1)
    _insert(conn, first, count)
    return datetime.fromtimestamp(mark / 1000, tz=UTC)


@pytest.mark.parametrize("form", ["ms", "iso", "local"])
def test_from_a_time_prints_the_rows_ingested_since(
    topic: Connection, server: ServerProcess, form: str
) -> None:
    before = _expected(topic)
    mark = _mark_then_insert(topic, 1_600_000_000_000, 40)
    since = _expected(topic) - before
    value = {
        "ms": str(int(mark.timestamp() * 1000)),
        "iso": mark.isoformat(),  # 2026-11-26T23:10:00.123000+00:00
        "local": mark.astimezone().replace(tzinfo=None).isoformat(sep=" "),
    }[form]
    if form == "ms":  # the group commits everything first: the time still rules
        every = str(sum(_expected(topic).values()))
        done = run_on(server, "consume", "over", "--group", "g", "--from", "earliest",
                      "--format", "jsonl", "--max-rows", every, "--timeout", IDLE_S)  # fmt: skip
        assert len(done.stdout.splitlines()) == int(every), done.stderr
    done = run_on(server, "consume", "over", "--group", "g", "--from", value, "--format",
                  "jsonl", "--max-rows", str(sum(since.values())), "--timeout", IDLE_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _normal([json.loads(line) for line in done.stdout.splitlines()]) == since


def test_a_bad_from_value_is_one_line(topic: Connection, server: ServerProcess) -> None:
    done = run_on(server, "consume", "over", "--from", "yesterday", "--timeout", "1")
    assert done.returncode == 2
    assert "argument --from: 'yesterday' is not earliest, latest or a time" in done.stderr
    assert "Traceback" not in done.stderr
