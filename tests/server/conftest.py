"""Engine fixtures: real engines on temp directories, with the fake clock and no
background threads; every engine still open at the end of a test is closed. And `wire`:
a protocol-level client logged in to the `server` fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.server.core.engine import Engine
from tests.conftest import FakeClock
from tests.live_server import ServerProcess
from tests.server.dataset import Loaded, loaded_dataset
from tests.server.support import POWER_DDL, EngineFactory
from tests.server.wire import Wire


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_engine(data_dir: Path, clock: FakeClock) -> Iterator[EngineFactory]:
    factory = EngineFactory(data_dir, clock)
    yield factory
    factory.close_all()


@pytest.fixture
def engine(make_engine: EngineFactory) -> Engine:
    """An engine on an empty data directory."""
    return make_engine()


@pytest.fixture
def power(engine: Engine) -> Engine:
    """An engine with database `power` (VGROUPS 4, in use) and super table `meters`
    (ts, current, voltage, phase; tags location, groupid)."""
    engine.execute(POWER_DDL)
    return engine


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """The dataset of tests/server/dataset.py written once per module, with its reference."""
    with loaded_dataset(tmp_path_factory.mktemp("dataset")) as loaded:
        yield loaded


@pytest.fixture
def wire(server: ServerProcess) -> Iterator[Wire]:
    w = Wire(server.address)
    yield w
    w.close()
