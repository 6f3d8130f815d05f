"""Spark fixtures, shared by every test of tests/spark (the hand-off tests included).

* `spark` (session scope): ONE SparkSession for the whole run, master `local[2]`, built
  by `spark_jobs.session.start_session` (UTC, TIMESTAMP_MICROS, UI off, loopback), with
  the `sqltopic_wal` source registered. Starting one costs ~5 s; a test then ~1 s.
* `make_history` (factory): `make_history(ddl)` opens a real `Engine` (server/core/engine.py,
  in-process, fake clock, no background threads) on a fresh data directory, runs `ddl`
  and returns the engine; write more with `engine.execute`/`engine.write`. Engines stay
  open while Spark reads their files (a read-only reader takes no lock, as on a live
  server) and are closed at the end of the test. `engine.state.data_dir` is the path.
* `writer`: a thread writing rows to a live `server` until the test ends
  (tests/spark/test_handoff.py `Writer`), for the hand-off and streaming tests.
* `loaded_history` (module scope): the dataset of tests/server/dataset.py (database
  `power`, VGROUPS 4, super table `meters` with every column type and three tags, normal
  table `ntb`, written through every write path), on an open engine.

Mark Spark tests `@pytest.mark.spark`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sqltopic.server.core.engine import Engine
from sqltopic.spark_jobs import register
from sqltopic.spark_jobs.session import start_session
from tests.conftest import FakeClock
from tests.live_server import ServerProcess
from tests.server.dataset import Loaded, loaded_dataset
from tests.spark.test_handoff import Writer

# Spark settings for tests: few shuffle partitions (the job shuffles nothing anyway).
TEST_CONF = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}

HistoryFactory = Callable[..., Engine]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = start_session("local[2]", TEST_CONF)
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def make_history(tmp_path: Path) -> Iterator[HistoryFactory]:
    engines: list[Engine] = []

    def factory(ddl: str = "", data_dir: Path | None = None) -> Engine:
        path = data_dir or tmp_path / f"data{len(engines)}"
        engine = Engine(path, clock=FakeClock(), background=False)
        engines.append(engine)
        if ddl:
            engine.execute(ddl)
        return engine

    yield factory
    for engine in engines:
        engine.close()


@pytest.fixture(scope="module")
def loaded_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    with loaded_dataset(tmp_path_factory.mktemp("history")) as loaded:
        yield loaded


@pytest.fixture
def writer(server: ServerProcess) -> Iterator[Writer]:
    started = Writer(server)
    try:
        yield started
    finally:
        started.stop()
