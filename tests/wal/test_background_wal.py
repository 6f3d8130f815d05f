"""WALs whose background work runs on a shared scheduler: level-1 syncs keep
WAL_FSYNC_PERIOD, the roll period and retention follow the (fake) clock, closing a WAL
ends its task without racing it, and one failing WAL stops no other."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.wal import Scheduler, Wal, WalOptions, data_entry, meta_entry
from tests.conftest import FakeClock
from tests.wal.waits import wait_for

Meters = Callable[..., pa.RecordBatch]
SharedFactory = Callable[..., Wal]


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    with Scheduler(2, name="test-wal-background") as s:
        yield s


@pytest.fixture
def shared(tmp_path: Path, clock: FakeClock, scheduler: Scheduler) -> Iterator[SharedFactory]:
    """`shared(name, **options)`: a WAL in tmp_path/name on the shared scheduler, with
    the fake clock; closed at the end unless the test closed it."""
    opened: list[Wal] = []

    def factory(name: str, **options: Any) -> Wal:
        wal = Wal.open(tmp_path / name, WalOptions(**options), clock=clock, scheduler=scheduler)
        opened.append(wal)
        return wal

    yield factory
    for wal in opened:
        wal.close()


def test_level_one_syncs_within_its_period(shared: SharedFactory, meters: Meters) -> None:
    wal = shared("a", level=1, fsync_period_ms=20)
    wal.append([data_entry(meters(10))])
    wait_for(lambda: wal.unsynced_bytes == 0, "the periodic sync")


def test_level_one_period_zero_syncs_after_every_append(
    shared: SharedFactory, meters: Meters
) -> None:
    wal = shared("a", level=1, fsync_period_ms=0)
    for i in range(5):
        wal.append([data_entry(meters(10, start=i))])
        wait_for(lambda: wal.unsynced_bytes == 0, f"the sync after append {i}")


def test_level_one_waits_for_its_period(shared: SharedFactory, meters: Meters) -> None:
    """The task looks every second (retention proves it), but syncs only once the
    period is over: three minutes, which no test outlives."""
    wal = shared("a", level=1, fsync_period_ms=180_000, retention_period_s=0)
    wal.append([data_entry(meters(10))])
    wal.roll()  # sealed, so synced; retention 0 deletes it at the task's next look
    wal.append([data_entry(meters(10, start=10))])
    assert wal.unsynced_bytes > 0
    wait_for(lambda: wal.first_version == 2, "retention by the background task")
    assert wal.unsynced_bytes > 0


def test_the_roll_period_follows_the_clock(
    shared: SharedFactory, clock: FakeClock, meters: Meters
) -> None:
    wal = shared("a", roll_period_s=60)
    wal.append([data_entry(meters(10))])
    assert not wal.state().segments[-1].sealed
    clock.advance(61)
    wait_for(lambda: wal.state().segments[-1].sealed, "the roll by the background task")


def test_retention_follows_the_clock(
    shared: SharedFactory, clock: FakeClock, meters: Meters
) -> None:
    wal = shared("a", retention_period_s=600)
    wal.append([data_entry(meters(10))])
    wal.roll()
    wal.append([data_entry(meters(10, start=10))])
    clock.advance(601)
    wait_for(lambda: wal.first_version == 2, "retention by the background task")


def test_altered_options_apply_at_the_next_look(
    shared: SharedFactory, clock: FakeClock, meters: Meters
) -> None:
    wal = shared("a", roll_period_s=0)
    wal.append([data_entry(meters(10))])
    clock.advance(3600)
    wal.set_options(WalOptions(roll_period_s=60))
    wait_for(lambda: wal.state().segments[-1].sealed, "the roll by the new period")


def test_closing_a_wal_ends_its_task_only(
    shared: SharedFactory, scheduler: Scheduler, clock: FakeClock, meters: Meters
) -> None:
    first, second = shared("a", roll_period_s=60), shared("b", roll_period_s=60)
    assert scheduler.tasks == 2
    first.close()
    assert scheduler.tasks == 1
    second.append([data_entry(meters(10))])
    clock.advance(61)
    wait_for(lambda: second.state().segments[-1].sealed, "the other WAL's roll")


def test_one_failing_wal_stops_no_other(
    shared: SharedFactory, tmp_path: Path, clock: FakeClock, meters: Meters,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Retention on a WAL whose directory was deleted cannot write its metadata: logged
    at every look, while the WAL beside it rolls and deletes on time."""
    broken = shared("broken", retention_period_s=600)
    healthy = shared("healthy", roll_period_s=1200)
    broken.append([data_entry(meters(10))])
    broken.roll()
    healthy.append([data_entry(meters(10))])
    shutil.rmtree(tmp_path / "broken")
    with caplog.at_level(logging.ERROR, logger="sqltopic.wal.writer"):
        clock.advance(601)  # the broken WAL's segment is due for deletion
        wait_for(lambda: "background work failed" in caplog.text, "the logged failure")
        clock.advance(600)  # the healthy WAL's segment is due to roll
        wait_for(lambda: healthy.state().segments[-1].sealed, "the healthy WAL's roll")
    assert broken.first_version == 1  # nothing deleted: the metadata write comes first


def test_closing_while_the_task_syncs_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight WALs syncing after every append on one thread, closed mid-stream: no task
    touches a closed WAL (nothing logged) and every acknowledged entry is there."""
    appends = 200
    with caplog.at_level(logging.WARNING), Scheduler(1, name="test-racing") as scheduler:
        options = WalOptions(level=1, fsync_period_ms=0, segment_size_kb=4)

        def write_and_close(i: int) -> None:
            wal = Wal.open(tmp_path / f"w{i}", options, scheduler=scheduler)
            for k in range(appends):
                wal.append([meta_entry({"k": k})])
            wal.close()

        threads = [threading.Thread(target=write_and_close, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive()
        assert scheduler.tasks == 0
    assert not caplog.records, caplog.text
    for i in range(8):
        with Wal.open(tmp_path / f"w{i}", background=False) as wal:
            assert wal.last_version == appends


def test_a_wal_without_a_scheduler_has_a_thread_of_its_own(wal_dir: Path) -> None:
    before = set(threading.enumerate())
    wal = Wal.open(wal_dir, WalOptions(level=1, fsync_period_ms=0))
    (own,) = set(threading.enumerate()) - before
    assert own.name == "wal-wal-0"
    wal.append([meta_entry({})])
    wait_for(lambda: wal.unsynced_bytes == 0, "the sync on the WAL's own thread")
    wal.close()
    assert not own.is_alive()


def test_a_scheduler_needs_background(wal_dir: Path, scheduler: Scheduler) -> None:
    with pytest.raises(ValueError, match="background=False"):
        Wal.open(wal_dir, background=False, scheduler=scheduler)
    assert scheduler.tasks == 0
