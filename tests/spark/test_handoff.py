"""The backfill's hand-off to live consumption, end to end on a real server and real
Spark: write history, `sqltopic backfill --group g`, keep writing, then a real Consumer
in g. The Parquet rows and the consumed rows together are every row the topic selects,
each exactly once, also when writes go on during the backfill and when --force evicts a
live consumer. The command runs in-process (`cli.backfill.run`, on the shared session),
and once as a real `sqltopic backfill` process."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sqltopic.cli import backfill
from sqltopic.client import Connection, admin, connect
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message
from sqltopic.errors import Error
from tests.cli.support import run_on
from tests.live_server import ServerProcess

pytestmark = pytest.mark.spark

SELECT = "SELECT ts, voltage, tbname FROM power.meters WHERE voltage > 220"
TOPIC = f"CREATE TOPIC hot AS {SELECT}"
VGROUPS = (1, 2)
METERS = 4  # child tables d0..d3, spread over both vgroups
# A condition that does not hold within this long never will.
DEADLINE_S = 60.0
# Pause between the writer thread's INSERTs: it keeps writing through the whole job.
WRITE_PAUSE_S = 0.01

Row = tuple[Any, ...]


def insert(conn: Connection, first: int, count: int) -> None:
    """`count` rows from ms timestamp `first`, round-robin over the meters; about half
    match (voltage > 220)."""
    parts = []
    for m in range(METERS):
        values = " ".join(
            f"({first + i}, 1.5, {215 + (i * 7 + m) % 12}, 0.3)" for i in range(m, count, METERS)
        )
        if values:
            parts.append(f"power.d{m} USING power.meters TAGS ('m{m}', {m}) VALUES {values}")
    conn.execute("INSERT INTO " + " ".join(parts))


def normal(table: pa.Table) -> Counter[Row]:
    """(ts in µs since the epoch, voltage, tbname) rows, comparable across Parquet,
    consumed messages and queries."""
    ts = table["ts"]
    micros = ts.cast(pa.timestamp("us", tz=ts.type.tz)).cast(pa.int64()).to_pylist()
    return Counter(zip(micros, table["voltage"].to_pylist(), table["tbname"].to_pylist(),
                       strict=True))  # fmt: skip


def parquet_rows(out: Path) -> Counter[Row]:
    files = sorted(out.rglob("*.parquet"))
    assert files, f"no Parquet under {out}"
    return sum((normal(pq.read_table(f)) for f in files), Counter())


def consumed_rows(messages: list[Message]) -> Counter[Row]:
    return sum((normal(m.to_arrow()) for m in messages if m.row_count), Counter())


def args_of(server: ServerProcess, out: Path, *extra: str) -> argparse.Namespace:
    """The command's arguments as `sqltopic backfill` parses them."""
    parser = argparse.ArgumentParser()
    backfill.add_parser(parser.add_subparsers())
    argv = ["backfill", "hot", "--output", str(out), "--server", server.address]
    return parser.parse_args([*argv, "--data", str(server.data), *extra])


def drain_group(server: ServerProcess, group: str, conn: Connection) -> list[Message]:
    """A new consumer of `group` reading up to every vnode's current end. reset `none`:
    a poll fails unless the group has committed offsets (the hand-off's)."""
    ends = {v: r.end for v, r in admin.offset_ranges(conn, "hot", VGROUPS).items()}
    config = {"server": server.address, "group.id": group, "auto.offset.reset": "none",
              "enable.auto.commit": "false", "fetch.max.wait.ms": "100"}  # fmt: skip
    with Consumer(config) as consumer:
        consumer.subscribe(["hot"])
        return follow(consumer, ends)


def follow(consumer: Consumer, ends: dict[int, int]) -> list[Message]:
    """Poll until the consumer's position reached `ends` on every vgroup."""
    got: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while True:
        parts = consumer.assignment()
        at = {p.vgroup: p.offset for p in consumer.position(parts)}
        if len(parts) == len(ends) and all((at.get(v) or 0) >= e for v, e in ends.items()):
            return got
        assert time.monotonic() < deadline, f"not caught up with {ends}: {at}"
        message = consumer.poll(0.5)
        if message is not None:
            got.append(message)


def expected(conn: Connection) -> Counter[Row]:
    return normal(conn.query(SELECT))


def check_union(parquet: Counter[Row], consumed: Counter[Row], want: Counter[Row]) -> None:
    """No duplicate, no gap: the two parts are disjoint and together all rows."""
    assert max([*parquet.values(), *consumed.values(), 1]) == 1, "a row came twice"
    assert not parquet & consumed, "a row is in the Parquet output and was consumed too"
    assert parquet + consumed == want


def manifest_ends(out: Path) -> dict[int, int]:
    doc = json.loads((out / "_manifest.json").read_text())
    return {int(span["vgroup"]): int(span["end"]) for span in doc["vgroups"]}


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(TOPIC)
    insert(live_power, 1_700_000_000_000, 400)
    return live_power


def test_handoff_no_gap_no_duplicate(
    server: ServerProcess, hot: Connection, spark: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    assert backfill.run(args_of(server, out, "--group", "g"), spark=spark) == 0
    assert admin.committed(hot, "hot", "g", VGROUPS) == manifest_ends(out)
    insert(hot, 1_800_000_000_000, 200)
    consumed = consumed_rows(drain_group(server, "g", hot))
    parquet = parquet_rows(out)
    assert parquet
    assert consumed
    check_union(parquet, consumed, expected(hot))


class Writer:
    """A thread INSERTing rows on its own connection until stopped; `batches` counts
    its INSERTs, so a test can wait for it to move on."""

    def __init__(self, server: ServerProcess) -> None:
        self.batches = 0
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, args=(server,), daemon=True)
        self._thread.start()

    def _write(self, server: ServerProcess) -> None:
        try:
            with connect(server.address) as conn:
                first = 1_900_000_000_000
                while not self._stop.is_set():
                    insert(conn, first, 8)
                    first += 8
                    self.batches += 1
                    self._stop.wait(WRITE_PAUSE_S)
        except BaseException as exc:
            self.failures.append(exc)

    def wait_for_more(self) -> None:
        """Until the writer wrote another batch after this call began."""
        seen = self.batches
        deadline = time.monotonic() + DEADLINE_S
        while self.batches <= seen + 1:
            assert not self.failures, self.failures
            assert time.monotonic() < deadline, "the writer stopped writing"
            self._stop.wait(WRITE_PAUSE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        assert not self.failures, self.failures


def test_handoff_while_writes_go_on(
    server: ServerProcess, hot: Connection, spark: Any, tmp_path: Path, writer: Writer
) -> None:
    out = tmp_path / "out"
    writer.wait_for_more()  # writing before the snapshot ...
    assert backfill.run(args_of(server, out, "--group", "g"), spark=spark) == 0
    writer.wait_for_more()  # ... during the job, and after the hand-off
    writer.stop()
    ends = manifest_ends(out)
    after = admin.offset_ranges(hot, "hot", VGROUPS)
    assert any(after[v].end > ends[v] for v in VGROUPS)
    consumed = consumed_rows(drain_group(server, "g", hot))
    check_union(parquet_rows(out), consumed, expected(hot))


def test_force_evicts_a_live_consumer_which_resumes_from_the_handoff(
    server: ServerProcess, hot: Connection, spark: Any, tmp_path: Path
) -> None:
    config = {"server": server.address, "group.id": "g", "auto.offset.reset": "earliest",
              "enable.auto.commit": "false", "fetch.max.wait.ms": "100"}  # fmt: skip
    with Consumer(config) as live:
        live.subscribe(["hot"])
        ends = {v: r.end for v, r in admin.offset_ranges(hot, "hot", VGROUPS).items()}
        follow(live, ends)  # it holds both vgroups and has read everything so far
        out = tmp_path / "out"
        with pytest.raises(Error, match="live consumer"):
            backfill.run(args_of(server, out, "--group", "g"), spark=spark)
        assert not out.exists()
        assert backfill.run(args_of(server, out, "--group", "g", "--force"), spark=spark) == 0
        assert admin.committed(hot, "hot", "g", VGROUPS) == manifest_ends(out)
        insert(hot, 1_800_000_000_000, 200)
        # the evicted consumer rejoins by itself and continues from the hand-off
        now = {v: r.end for v, r in admin.offset_ranges(hot, "hot", VGROUPS).items()}
        consumed = consumed_rows(follow(live, now))
    check_union(parquet_rows(out), consumed, expected(hot))


def test_upto_hands_off_at_the_given_versions(
    server: ServerProcess, hot: Connection, spark: Any, tmp_path: Path
) -> None:
    ranges = admin.offset_ranges(hot, "hot", VGROUPS)
    cut = ranges[1].begin + (ranges[1].end - ranges[1].begin) // 2
    out = tmp_path / "out"
    assert backfill.run(args_of(server, out, "--group", "g", "--upto", f"1:{cut}"), spark) == 0
    assert manifest_ends(out) == {1: cut, 2: ranges[2].end}
    consumed = consumed_rows(drain_group(server, "g", hot))
    check_union(parquet_rows(out), consumed, expected(hot))


def test_offline_reads_the_files_alone(
    server: ServerProcess, hot: Connection, spark: Any, tmp_path: Path
) -> None:
    """--offline: the ends come from the data directory (here one a server has open);
    no server is asked, no group is touched."""
    ranges = admin.offset_ranges(hot, "hot", VGROUPS)
    parser = argparse.ArgumentParser()
    backfill.add_parser(parser.add_subparsers())
    out = tmp_path / "out"
    argv = ["backfill", "hot", "--offline", "--data", str(server.data), "--output", str(out)]
    unreachable = ["--server", "127.0.0.1:1"]
    assert backfill.run(parser.parse_args([*argv, *unreachable]), spark=spark) == 0
    assert manifest_ends(out) == {v: r.end for v, r in ranges.items()}
    assert parquet_rows(out) == expected(hot)
    cut = tmp_path / "cut"
    argv = ["backfill", "hot", "--offline", "--data", str(server.data), "--output", str(cut)]
    assert backfill.run(parser.parse_args([*argv, "--upto", "2:2"]), spark=spark) == 0
    assert manifest_ends(cut) == {1: ranges[1].end, 2: 2}


def test_the_command_end_to_end(server: ServerProcess, hot: Connection, tmp_path: Path) -> None:
    """A real `sqltopic backfill` process (its own Spark on local[1])."""
    out = tmp_path / "out"
    done = run_on(server, "backfill", "hot", "--output", str(out), "--group", "g",
                  "--data", str(server.data), "--master", "local[1]")  # fmt: skip
    assert done.returncode == 0, done.stderr
    parquet = parquet_rows(out)
    ends = manifest_ends(out)
    assert done.stdout == (
        f"backfilled topic hot: {sum(parquet.values()):,} rows from 2 vgroups into {out}; "
        f"group g continues from {','.join(f'{v}:{e}' for v, e in sorted(ends.items()))}\n"
    )
    assert done.stderr == ""  # not a terminal: no progress bar
    insert(hot, 1_800_000_000_000, 100)
    check_union(parquet, consumed_rows(drain_group(server, "g", hot)), expected(hot))


def test_a_failed_job_changes_no_offsets(
    server: ServerProcess, hot: Connection, tmp_path: Path
) -> None:
    admin.commit_group(hot, "hot", "g", {1: 1, 2: 1})
    out = tmp_path / "out"
    done = run_on(server, "backfill", "hot", "--output", str(out), "--group", "g",
                  "--data", str(server.data), "--master", "nonsense://nowhere")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Master must either be yarn or start with spark" in done.stderr
    assert not out.exists()
    assert admin.committed(hot, "hot", "g", VGROUPS) == {1: 1, 2: 1}
