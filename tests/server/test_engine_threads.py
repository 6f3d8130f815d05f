"""The engine is thread-safe: concurrent INSERTs (creating tables), Arrow writes, DDL,
queries and topic reads lose nothing and keep each table's rows in order. And its
threads are few: every vnode's WAL background work shares one small pool."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from sqltopic.server.common.resources import FILES_PER_VNODE, raise_open_files_limit
from sqltopic.server.common.result import Session
from sqltopic.server.core.engine import Engine
from sqltopic.wal.background import DEFAULT_WORKERS
from tests.server.support import read_vgroups, tabled_rows

WRITERS = 4
ROUNDS = 30
TABLES_PER_WRITER = 3
# A thread still running this long after the start is stuck, not slow.
JOIN_DEADLINE_S = 120.0
# The most vgroups a database may have (TDengine's limit, server/core/ddl.py).
MAX_VGROUPS = 1024
# Descriptors kept free for the test process itself (pytest, DuckDB, the catalog).
SPARE_FILES = 256


def _run_threads(targets: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_DEADLINE_S)
        assert not t.is_alive(), "a thread is stuck"
    return errors


def test_concurrent_writes_ddl_and_reads(power: Engine) -> None:
    power.execute("CREATE TOPIC everything AS DATABASE power")
    stop = threading.Event()

    def writer(i: int) -> Callable[[], None]:
        def run() -> None:
            session = Session(db="power")
            for k in range(ROUNDS):
                table = f"w{i}_{k % TABLES_PER_WRITER}"
                ts = i * 1_000_000 + k
                if k % 2:
                    power.execute(
                        f"INSERT INTO {table} USING meters TAGS ('w{i}', {i}) "
                        f"VALUES ({ts}, 1.5, {k}, 0.5)",
                        session,
                    )
                else:
                    data = pa.table({
                        "tbname": [table], "ts": pa.array([ts], pa.timestamp("ms")),
                        "voltage": pa.array([k], pa.int32()), "groupid": pa.array([i], pa.int32()),
                    })  # fmt: skip
                    power.write("power.meters", data, session)

        return run

    def ddl() -> None:
        session = Session(db="power")
        for k in range(ROUNDS):
            power.execute(f"CREATE TABLE side{k} (ts TIMESTAMP, v INT)", session)
            power.execute(f"INSERT INTO side{k} VALUES ({k}, {k})", session)
            if k % 3 == 0:
                power.execute(f"DROP TABLE side{k}", session)

    def reader() -> None:
        session = Session(db="power")
        while not stop.is_set():
            power.execute("SELECT tbname, count(*) FROM meters GROUP BY tbname", session)
            read_vgroups(power, "everything", "power", max_rows=50)

    reader_errors: list[BaseException] = []

    def guarded() -> None:
        try:
            reader()
        except BaseException as exc:
            reader_errors.append(exc)
            raise

    reader_threads = [threading.Thread(target=guarded) for _ in range(2)]
    for t in reader_threads:
        t.start()
    try:
        errors = _run_threads([*(writer(i) for i in range(WRITERS)), ddl])
    finally:
        stop.set()
        for t in reader_threads:
            t.join(JOIN_DEADLINE_S)
    assert not errors, errors
    assert not reader_errors, reader_errors

    got = power.execute("SELECT tbname, voltage FROM meters ORDER BY ts").rows
    expected = sorted(
        ((f"w{i}_{k % TABLES_PER_WRITER}", k) for i in range(WRITERS) for k in range(ROUNDS)),
        key=lambda r: (int(r[0][1:].split("_")[0]), r[1]),
    )
    assert got == expected
    side = {r[0] for r in power.execute("SHOW TABLES").rows if r[0].startswith("side")}
    assert side == {f"side{k}" for k in range(ROUNDS) if k % 3}

    # per table, the database topic delivers the rows in write order
    per_table: dict[str, list[int]] = {}
    for items in read_vgroups(power, "everything", "power").values():
        for row in tabled_rows(items):
            if row[0].startswith("w"):
                per_table.setdefault(row[0], []).append(row[3])
    assert per_table == {
        f"w{i}_{j}": [k for k in range(ROUNDS) if k % TABLES_PER_WRITER == j]
        for i in range(WRITERS)
        for j in range(TABLES_PER_WRITER)
    }


def test_many_vgroups_cost_no_more_threads_than_a_few(tmp_path: Path) -> None:
    _, limit = raise_open_files_limit()  # as the server does at start
    open_now = len(os.listdir("/proc/self/fd"))
    many = min(MAX_VGROUPS, (limit.soft - open_now - SPARE_FILES) // FILES_PER_VNODE)
    assert many >= 100, f"the open-files limit {limit.soft} is too low for this test"
    with Engine(tmp_path, background=True) as engine:
        scheduler = engine.state.scheduler
        assert scheduler is not None
        engine.execute("CREATE DATABASE small VGROUPS 4")
        threads = threading.active_count()
        engine.execute(f"CREATE DATABASE big VGROUPS {many}")
        assert threading.active_count() <= threads  # threads of earlier tests may end
        ours = [t for t in threading.enumerate() if t.name.startswith(scheduler.name)]
        assert len(ours) == DEFAULT_WORKERS
        assert scheduler.tasks == 4 + many  # one task per vnode, on the shared threads
        engine.execute("DROP DATABASE big")
        assert scheduler.tasks == 4
    assert scheduler.tasks == 0
    assert not [t for t in threading.enumerate() if t.name.startswith(scheduler.name)]
