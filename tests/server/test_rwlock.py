"""The engine's readers-writer lock, and its no-wait mode for the event loop."""

from __future__ import annotations

import threading

import pytest

from sqltopic.server.common.rwlock import RWLock, WouldBlock

# Bound on waiting for a helper thread's step (never reached when the lock works).
STEP_TIMEOUT_S = 10.0


def holding_exclusive(lock: RWLock) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A thread that takes the lock alone and holds it until `release` is set."""
    held, release = threading.Event(), threading.Event()

    def run() -> None:
        with lock.exclusive():
            held.set()
            release.wait(STEP_TIMEOUT_S)

    thread = threading.Thread(target=run)
    thread.start()
    assert held.wait(STEP_TIMEOUT_S)
    return held, release, thread


def test_shared_holders_do_not_block_each_other_without_waiting() -> None:
    lock = RWLock()
    with lock.shared(), lock.without_waiting(), lock.shared():
        pass


def test_without_waiting_a_shared_acquisition_under_ddl_raises() -> None:
    lock = RWLock()
    _, release, thread = holding_exclusive(lock)
    try:
        with pytest.raises(WouldBlock), lock.without_waiting(), lock.shared():
            pass
    finally:
        release.set()
        thread.join(STEP_TIMEOUT_S)
    with lock.without_waiting(), lock.shared():
        pass  # free again


def test_no_wait_is_per_thread_and_ends_with_its_block() -> None:
    lock = RWLock()
    _, release, thread = holding_exclusive(lock)
    acquired = threading.Event()

    def wait_normally() -> None:
        with lock.shared():
            acquired.set()

    with lock.without_waiting():
        other = threading.Thread(target=wait_normally)
        other.start()  # another thread: it waits for the lock instead of raising
    release.set()
    thread.join(STEP_TIMEOUT_S)
    other.join(STEP_TIMEOUT_S)
    assert acquired.is_set()


def test_without_waiting_an_exclusive_acquisition_always_raises() -> None:
    lock = RWLock()
    with pytest.raises(WouldBlock), lock.without_waiting(), lock.exclusive():
        pass
    assert not lock.no_wait
    with lock.exclusive():
        pass  # nothing was left held
