"""Telling waiters that new versions became readable (the hook the vnode's push uses)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Listener = Callable[[int], None]


class VersionNotifier:
    """Tracks the next readable version; wakes threads and calls listeners as it grows.

    Listeners run in the thread that made the versions readable, outside any WAL lock:
    they must be quick (an asyncio server hands off with `loop.call_soon_threadsafe`).
    """

    def __init__(self, next_version: int) -> None:
        self._cond = threading.Condition()
        self._next = next_version
        self._listeners: list[Listener] = []

    @property
    def next_version(self) -> int:
        return self._next

    def publish(self, next_version: int) -> None:
        with self._cond:
            if next_version <= self._next:
                return
            self._next = next_version
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(next_version)
            except Exception:  # a broken listener must not fail the producer's append
                log.exception("WAL version listener failed")

    def wait_for(self, version: int, timeout: float | None) -> bool:
        """Block until `version` or a later one is readable; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._next > version, timeout)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(next_version)` on every growth; returns a function to stop."""
        with self._cond:
            self._listeners.append(listener)

        def remove() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove
