"""The shared background scheduler (wal/background.py): tasks run and run again, wakes,
cancellation that waits for a run in progress, a failing task that harms no other, a
slow task that holds up no other, and a fixed number of threads however many tasks."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from sqltopic.errors import WalClosedError
from sqltopic.wal.background import RETRY_DELAY_S, Scheduler, Task
from tests.wal.waits import DEADLINE_S, wait_for

# A delay no test outlives: a task scheduled with it runs only when woken.
NEVER_S = 3600.0
# Short enough that a task runs many times in a test, long enough not to spin.
OFTEN_S = 0.01


class Counter:
    """A task body that counts its runs and returns `delay` (None: end after `runs`)."""

    def __init__(self, delay: float | None = OFTEN_S, runs: int | None = None) -> None:
        self.delay, self.runs, self.count = delay, runs, 0

    def __call__(self) -> float | None:
        self.count += 1
        if self.runs is not None and self.count >= self.runs:
            return None
        return self.delay


class Blocking:
    """A task body whose first run blocks until `release` is set."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.count = 0
        self.events: list[str] = []

    def __call__(self) -> float:
        self.count += 1
        if self.count == 1:
            self.started.set()
            assert self.release.wait(DEADLINE_S)
            self.events.append("run ended")
        return NEVER_S


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    with Scheduler(2, name="test-background") as s:
        yield s


def test_a_task_runs_again_after_the_delay_it_returns(scheduler: Scheduler) -> None:
    body = Counter()
    scheduler.schedule(body, name="counter")
    wait_for(lambda: body.count >= 5, "five runs")


def test_a_run_never_starts_before_its_deadline(scheduler: Scheduler) -> None:
    started: list[float] = []

    def body() -> None:
        started.append(time.monotonic())

    scheduled = time.monotonic()
    scheduler.schedule(body, name="once", delay=0.05)
    wait_for(lambda: bool(started), "the run")
    assert started[0] - scheduled >= 0.05


def test_a_task_that_returns_none_ends(scheduler: Scheduler) -> None:
    body = Counter(runs=3)
    task = scheduler.schedule(body, name="three")
    wait_for(lambda: scheduler.tasks == 0, "the task to end")
    assert task.cancelled
    task.wake()  # an ended task stays ended
    scheduler.close()  # waits for any run in progress
    assert body.count == 3


def test_wake_runs_a_task_now(scheduler: Scheduler) -> None:
    body = Counter(delay=NEVER_S)
    task = scheduler.schedule(body, name="sleeper", delay=NEVER_S)
    task.wake()
    wait_for(lambda: body.count == 1, "the woken run")
    task.wake()
    wait_for(lambda: body.count == 2, "the second woken run")


def test_a_wake_during_a_run_runs_the_task_again(scheduler: Scheduler) -> None:
    body = Blocking()
    task = scheduler.schedule(body, name="blocking")
    assert body.started.wait(DEADLINE_S)
    task.wake()
    body.release.set()
    wait_for(lambda: body.count == 2, "the run asked for during the first")


def test_cancel_waits_for_the_run_in_progress(scheduler: Scheduler) -> None:
    body = Blocking()
    task = scheduler.schedule(body, name="blocking")
    assert body.started.wait(DEADLINE_S)

    def cancel() -> None:
        task.cancel()
        body.events.append("cancel returned")

    canceller = threading.Thread(target=cancel)
    canceller.start()
    canceller.join(0.2)
    assert canceller.is_alive(), "cancel returned while the task was running"
    body.release.set()
    canceller.join(DEADLINE_S)
    assert body.events == ["run ended", "cancel returned"]
    task.wake()  # no run after a cancel
    scheduler.close()
    assert body.count == 1
    assert scheduler.tasks == 0


def test_a_task_may_cancel_itself(scheduler: Scheduler) -> None:
    holder: list[Task] = []
    runs: list[int] = []

    def body() -> float:
        runs.append(1)
        holder[0].cancel()
        return OFTEN_S

    holder.append(scheduler.schedule(body, name="self-cancelling", delay=0.01))
    wait_for(lambda: scheduler.tasks == 0, "the task to end")
    scheduler.close()
    assert runs == [1]


def test_an_exception_is_logged_and_harms_no_other_task(
    scheduler: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    failures: list[int] = []

    def failing() -> float:
        failures.append(1)
        raise RuntimeError("boom")

    good = Counter()
    with caplog.at_level(logging.ERROR, logger="sqltopic.wal.background"):
        scheduler.schedule(failing, name="failing")
        scheduler.schedule(good, name="good")
        wait_for(lambda: len(failures) >= 2, f"a retry after {RETRY_DELAY_S} s")
        runs = good.count
        wait_for(lambda: good.count >= runs + 3, "the good task to go on")
    messages = [r.getMessage() for r in caplog.records]
    assert any("failing failed" in m for m in messages), messages
    assert all(r.exc_info is not None for r in caplog.records)


def test_a_slow_task_holds_up_no_other(scheduler: Scheduler) -> None:
    """A run stuck like a slow fsync takes one thread; the others keep every deadline."""
    slow = Blocking()
    scheduler.schedule(slow, name="slow")
    assert slow.started.wait(DEADLINE_S)
    quick = Counter()
    scheduler.schedule(quick, name="quick")
    try:
        wait_for(lambda: quick.count >= 5, "the quick task beside the stuck one")
    finally:
        slow.release.set()


def test_the_threads_are_few_whatever_the_tasks(scheduler: Scheduler) -> None:
    tasks = [scheduler.schedule(Counter(delay=1.0), name=f"t{i}") for i in range(1000)]
    assert scheduler.threads == 2
    assert len([t for t in threading.enumerate() if t.name.startswith(scheduler.name)]) == 2
    assert scheduler.tasks == 1000
    for task in tasks:
        task.cancel()
    assert scheduler.tasks == 0


def test_close_ends_every_task_and_stops_the_threads() -> None:
    scheduler = Scheduler(3, name="test-closing")
    assert scheduler.threads == 0  # started by the first task
    bodies = [Counter() for _ in range(10)]
    for i, body in enumerate(bodies):
        scheduler.schedule(body, name=f"t{i}")
    wait_for(lambda: all(b.count for b in bodies), "every task to run")
    scheduler.close()
    counts = [b.count for b in bodies]
    assert scheduler.tasks == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("test-closing")]
    with pytest.raises(WalClosedError, match="closed"):
        scheduler.schedule(Counter(), name="late")
    assert [b.count for b in bodies] == counts
