"""WAL background work on a small shared pool: the `Scheduler` and its `Task`s.

Every open WAL has timed work to do: at WAL_LEVEL 1 an fsync every WAL_FSYNC_PERIOD,
and about once a second a look at the roll period and retention (docs/wal.md §6.2, §8).
One thread per WAL made a database of 1,024 vgroups cost 1,024 threads. A `Scheduler`
runs the tasks of any number of WALs on a fixed handful of threads, ordered by deadline;
its owner (the engine: one per engine) passes it to `Wal.open` and closes it after the
WALs. A WAL opened without one gets a private one-thread scheduler.

A task is a callable run again and again: each run returns the seconds until the next
run, or None to end. One task never runs on two threads at once. `Task.wake()` brings
the next run forward to now (a level-1 WAL with WAL_FSYNC_PERIOD 0 wakes its task at
every append); a wake during a run makes the task run again as soon as it ends.
`Task.cancel()` returns only once no run of the task is in progress, and no run starts
after it, so a WAL that cancels its task before releasing its files is never touched
by its task again. A run that raises is logged and tried again `RETRY_DELAY_S` later;
the other tasks are not affected.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

from sqltopic.errors import WalClosedError

log = logging.getLogger(__name__)

# Threads of one scheduler. A run is most often a few microseconds (a look at the roll
# period and retention), but a level-1 fsync holds its thread for the disk's latency,
# which a busy or failing disk stretches to seconds (the GIL is released meanwhile).
# With one thread every other WAL's deadline would wait behind that fsync; with four,
# three WALs can be stuck in fsync at once while the rest stay on time. More would only
# add idle threads beside the server's 16 workers: the disk, not threads, bounds fsyncs.
DEFAULT_WORKERS = 4
# A run may start up to this share of its delay late, so that runs due close together
# share one wakeup: deadlines are rounded up to a grid of delay / 64, and 1,024 WALs'
# once-a-second looks wake the pool at most 64 times a second, not 1,024. A run never
# starts early, and a period is stretched by 1/64 at most.
LATENESS_SHARE = 1 / 64
# A run that raised an unexpected exception is tried again this much later: soon enough
# to recover from a passing fault, seldom enough that a lasting one floods no log.
RETRY_DELAY_S = 1.0

# One run of a task: the seconds until its next run, or None to end the task.
Run = Callable[[], float | None]
# A queued run: (deadline on the monotonic clock, entry number, task). A task has at most
# one live entry, the one whose number it holds; wakes and cancels leave stale ones.
_Entry = tuple[float, int, "Task"]


class Task:
    """One task of a `Scheduler`: wake it, or cancel it. Made by `Scheduler.schedule`."""

    __slots__ = ("_cancelled", "_due", "_entry", "_rerun", "_run", "_runner", "_scheduler", "name")

    def __init__(self, scheduler: Scheduler, run: Run, name: str) -> None:
        self.name = name
        self._scheduler = scheduler
        self._run = run
        self._entry = 0  # the number of its live queue entry; 0 when not queued
        self._due = math.inf  # the deadline of that entry
        self._runner: int | None = None  # the thread running it now, if any
        self._rerun = False  # woken during a run: run again as soon as it ends
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        """Whether the task has ended: cancelled, ended by its run, or its scheduler closed."""
        return self._cancelled

    def wake(self) -> None:
        """Run as soon as a thread is free (again, if running now)."""
        self._scheduler._wake(self)

    def cancel(self) -> None:
        """End the task; returns once no run of it is in progress (unless called from
        that very run). Calling it again does nothing."""
        self._scheduler._cancel(self)


class Scheduler:
    """Runs timed tasks on `workers` threads, started at the first task. Thread-safe."""

    def __init__(self, workers: int = DEFAULT_WORKERS, *, name: str = "wal-background") -> None:
        if workers < 1:
            raise ValueError(f"a scheduler needs at least one worker, got {workers}")
        self.name = name
        self._workers = workers
        self._lock = threading.Lock()
        # Idle threads wait on `_idle`; at most one of them, the one holding the timer,
        # waits on `_timer` for the earliest deadline, so a due run wakes one thread.
        self._idle = threading.Condition(self._lock)
        self._timer = threading.Condition(self._lock)
        self._timer_held = False
        self._done = threading.Condition(self._lock)  # a run ended: for cancel()
        self._heap: list[_Entry] = []
        self._numbers = itertools.count(1)
        self._tasks = 0  # tasks not ended
        self._threads: list[threading.Thread] = []
        self._closed = False

    # --- the owner's side ----------------------------------------------------------------

    def schedule(self, run: Run, *, name: str, delay: float = 0.0) -> Task:
        """Run `run` after `delay` seconds, then again after each delay it returns."""
        task = Task(self, run, name)
        with self._lock:
            if self._closed:
                raise WalClosedError(f"the background scheduler {self.name} is closed")
            self._start_threads()
            self._tasks += 1
            self._queue(task, _deadline(time.monotonic(), delay))
        return task

    @property
    def tasks(self) -> int:
        """Tasks scheduled and not ended."""
        with self._lock:
            return self._tasks

    @property
    def threads(self) -> int:
        """Worker threads started (all of them once a task was scheduled)."""
        with self._lock:
            return len(self._threads)

    def close(self) -> None:
        """End every task and stop the threads, after the runs in progress end."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _, _, task in self._heap:
                self._end(task)
            self._heap.clear()
            self._idle.notify_all()
            self._timer.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- tasks' side ---------------------------------------------------------------------

    def _wake(self, task: Task) -> None:
        with self._lock:
            if task._cancelled:
                return
            if task._runner is not None:
                task._rerun = True
                return
            now = time.monotonic()
            if task._entry and task._due > now:
                self._queue(task, now)

    def _cancel(self, task: Task) -> None:
        with self._lock:
            if not task._cancelled:
                task._entry = 0  # its queued entry, if any, is now stale
                self._end(task)
            if task._runner == threading.get_ident():
                return  # cancelled by its own run: that run ends after this returns
            while task._runner is not None:
                self._done.wait()

    # --- under the lock ------------------------------------------------------------------

    def _start_threads(self) -> None:
        while len(self._threads) < self._workers:
            thread = threading.Thread(
                target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _queue(self, task: Task, deadline: float) -> None:
        number = next(self._numbers)
        task._entry, task._due = number, deadline
        heapq.heappush(self._heap, (deadline, number, task))
        if self._heap[0][1] == number:  # a new earliest deadline: someone must watch it
            (self._timer if self._timer_held else self._idle).notify()

    def _end(self, task: Task) -> None:
        if not task._cancelled:
            task._cancelled = True
            self._tasks -= 1

    def _head(self) -> _Entry | None:
        """The earliest live entry, dropping stale ones on the way."""
        heap = self._heap
        while heap and heap[0][2]._entry != heap[0][1]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _take(self) -> Task | None:
        """Wait for the next due run and claim it; None once the scheduler is closed."""
        while not self._closed:
            head = self._head()
            if head is None:
                self._idle.wait()
                continue
            wait = head[0] - time.monotonic()
            if wait <= 0:
                heapq.heappop(self._heap)
                task = head[2]
                task._entry, task._due, task._runner = 0, math.inf, threading.get_ident()
                if self._heap and not self._timer_held:
                    self._idle.notify()  # another thread watches the next deadline
                return task
            if self._timer_held:
                self._idle.wait()
            else:
                self._timer_held = True
                try:
                    self._timer.wait(wait)
                finally:
                    self._timer_held = False
        return None

    def _finish(self, task: Task, delay: float | None) -> None:
        """A run ended: queue the next one, or end the task."""
        task._runner = None
        rerun, task._rerun = task._rerun, False
        self._done.notify_all()
        if delay is None or self._closed:
            self._end(task)
        if task._cancelled or delay is None:
            return
        now = time.monotonic()
        self._queue(task, now if rerun else _deadline(now, delay))

    # --- the threads ---------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                task = self._take()
            if task is None:
                return
            delay: float | None = None
            try:
                delay = _run(task)
            finally:
                with self._lock:
                    self._finish(task, delay)


def _deadline(now: float, delay: float) -> float:
    """`now + delay`, rounded up to the grid of delay * LATENESS_SHARE."""
    if delay <= 0:
        return now
    grid = delay * LATENESS_SHARE
    return math.ceil((now + delay) / grid) * grid


def _run(task: Task) -> float | None:
    """One run; an exception is logged, and the task runs again after RETRY_DELAY_S."""
    try:
        return task._run()
    except Exception:
        log.exception("background task %s failed; it runs again in %.0f s", task.name,
                      RETRY_DELAY_S)  # fmt: skip
        return RETRY_DELAY_S
