"""A readers-writer lock: writes share it, DDL holds it alone.

Data writes validate against the catalog and append to WALs concurrently (level-2
appenders then share fsyncs); DDL changes the catalog and must see no write in flight,
so that a table's data and its DDL events keep their order in the WAL.

Code on the server's event loop must never wait for DDL: within `without_waiting`, a
shared acquisition that would wait, and any exclusive one, raise `WouldBlock` instead
(before the caller changed anything), and the caller hands its work to a worker thread.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


class WouldBlock(Exception):
    """Within `without_waiting`: a shared acquisition found DDL holding or waiting, an
    exclusive one was asked for, or a write would wait for an fsync."""


class RWLock:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._local = threading.local()  # .no_wait: set within without_waiting
        self._shared = _Shared(self)
        self._no_wait = _NoWait(self._local)

    def without_waiting(self) -> _NoWait:
        """Within it, on this thread, `shared` raises WouldBlock rather than wait (one
        object, made once: every poll, pass, commit and write on the loop enters it)."""
        return self._no_wait

    @property
    def no_wait(self) -> bool:
        """Whether this thread is within `without_waiting`."""
        return bool(getattr(self._local, "no_wait", False))

    def shared(self) -> _Shared:
        """The lock held shared, as a context manager (one object, made once: reads take
        it many times a poll, and a generator-based one costs several times more)."""
        return self._shared

    def _acquire_shared(self) -> None:
        with self._cond:
            # a waiting writer goes first, so a stream of writes cannot starve DDL
            if self._writer or self._writers_waiting:
                if self.no_wait:
                    raise WouldBlock
                self._cond.wait_for(lambda: not self._writer and not self._writers_waiting)
            self._readers += 1

    def _release_shared(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:  # only an exclusive acquisition waits for readers
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if self.no_wait:
            raise WouldBlock  # DDL never runs where waiting is not allowed
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writer and not self._readers)
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class _Shared:
    """`RWLock.shared()`: holds the lock shared for a `with` block. Holds no state of its
    own, so one object serves every thread and nested block."""

    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock._acquire_shared()

    def __exit__(self, *exc: object) -> None:
        self._lock._release_shared()


class _NoWait:
    """`RWLock.without_waiting()`: sets the thread's no-wait flag for a `with` block
    (not nested: the flag is cleared at its end)."""

    __slots__ = ("_local",)

    def __init__(self, local: threading.local) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.no_wait = True

    def __exit__(self, *exc: object) -> None:
        self._local.no_wait = False


async def here_or_worker(
    lock: RWLock, worker: Callable[..., Awaitable[T]], fn: Callable[..., T], *args: object
) -> T:
    """`fn(*args)` here (the event loop) in `lock`'s no-wait mode; where that raises
    WouldBlock, which it does before `fn` changed anything, `await worker(fn, *args)`."""
    try:
        with lock.without_waiting():
            return fn(*args)
    except WouldBlock:
        pass  # the worker does it all again, waiting its turn
    return await worker(fn, *args)
