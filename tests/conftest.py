"""Shared fixtures: WAL factories over temp directories, an injectable clock, and a real
server process (`server`, `conn`, `power` from tests/live_server.py). And the xdist groups
of the parallel run (pyproject's addopts: `-n` workers, `--dist loadgroup`)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

from sqltopic.wal import Wal, WalOptions

# The live-server fixtures, for every test folder.
pytest_plugins = ["tests.live_server"]

# Tests that each run in one xdist worker, one after another, by their folder:
# * spark: tests/spark shares one session-scoped SparkSession (a JVM, ~5 s to start, on
#   local[2], so it takes both cores): one worker starts it once, not every worker;
# * bench: the benchmarks' quick runs (tests/bench) each start a server and several
#   client processes for 15-30 s: run one at a time, never two together.
# Every other test is a unit of its own, handed to whichever worker is free. The groups
# go out first (the scheduler hands out the largest units first), so their long tests do
# not end the run alone.
XDIST_GROUPS = {"spark": "tests/spark/", "bench": "tests/bench/"}


class FolderGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """xdist's `loadgroup`, with the groups given by folder (XDIST_GROUPS). xdist's own
    `xdist_group` marks do not work with pytest 9: xdist sets `item._nodeid`, which
    pytest 9 no longer reads, so every test stayed a group of its own."""

    def _split_scope(self, nodeid: str) -> str:
        for group, folder in XDIST_GROUPS.items():
            if nodeid.startswith(folder):
                return group
        return nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (pyproject's addopts) schedules by FolderGroupScheduling."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return FolderGroupScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """A run started in the background by a non-interactive shell (`make test &`, nohup)
    inherits SIGINT ignored, and so would every process its tests start: a test that
    stops a command with Ctrl-C (tests/cli/test_consume.py) would wait for it in vain. A
    handler here makes the processes started from now on (xdist's workers, and theirs)
    begin with the default disposition."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_itemcollected(item: pytest.Item) -> None:
    # marked as each test is collected: xdist's worker reads the marks in its
    # pytest_collection_modifyitems, which ran before a conftest's there
    for group, folder in XDIST_GROUPS.items():
        if item.nodeid.startswith(folder):
            item.add_marker(pytest.mark.xdist_group(group))


class FakeClock:
    """Microseconds that move only when a test says so."""

    def __init__(self, start_us: int = 1_700_000_000_000_000) -> None:
        self.now_us = start_us

    def __call__(self) -> int:
        return self.now_us

    def advance(self, seconds: float) -> None:
        self.now_us += int(seconds * 1_000_000)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


WalFactory = Callable[..., Wal]


@pytest.fixture
def wal_dir(tmp_path: Path) -> Path:
    return tmp_path / "wal"


@pytest.fixture
def open_wal(wal_dir: Path, clock: FakeClock) -> Iterator[WalFactory]:
    """Open WALs on `wal_dir` (or a given directory) with the fake clock and no
    background thread; every WAL still open at the end is closed."""
    opened: list[Wal] = []

    def factory(directory: Path | None = None, **options: Any) -> Wal:
        wal = Wal.open(directory or wal_dir, WalOptions(**options), clock=clock, background=False)
        opened.append(wal)
        return wal

    yield factory
    for wal in opened:
        wal.close()


MetersFactory = Callable[..., pa.RecordBatch]


@pytest.fixture
def meters() -> MetersFactory:
    """`meters(n, start=0)`: n rows of the smart-meter schema, values from the row number."""
    return make_meters


def make_meters(n: int, start: int = 0) -> pa.RecordBatch:
    rows = range(start, start + n)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([1_538_548_685_000 + i for i in rows], pa.timestamp("ms")),
            pa.array([10.0 + i % 7 for i in rows], pa.float32()),
            pa.array([215 + i % 10 for i in rows], pa.int32()),
            pa.array([None if i % 5 == 0 else f"d{i}" for i in rows], pa.string()),
        ],
        names=["ts", "current", "voltage", "location"],
    )
