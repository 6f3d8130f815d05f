"""A cluster connection's writes under way (`Connection.write_async` when the rows are
routed to dnodes): each write's parts are sent at once, on the Writes streams of the
dnodes hosting them, and `write_async` returns; one thread settles the writes in the
order they were made.

Order is the point. A dnode that refuses a write as VgroupUnavailable (the routes are
stale, or it is catching up) refuses every later write of that stream
(server/rpc/write_stream.py), so the writes sent after it are refused too, none of them
written. The settling thread sends the refused parts again, in order, once the routes
are read anew (routing.write_flow); meanwhile `submit` waits, so that no new write can
land before them. A write whose parts were all written settles without waiting for
anything else. I/O is the connection's (the callables of `Routed`); this module owns the
order, the waiting and the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

from sqltopic.errors import ServerUnavailable

# How long close() waits for the settling thread to end: it settles what is under way
# as the closed streams fail it, which takes no network round trip.
SETTLER_JOIN_S = 5.0
# Writes under way at most (then `submit` waits for the oldest): a stream's window holds
# 16 back per dnode, but parts too large for a message go by Write calls, which nothing
# else bounds; four dnodes' windows.
MAX_ROUTED_UNDER_WAY = 64


@dataclass
class Routed:
    """A routed write under way, as the connection sent it."""

    # waits for every part's answer: whether each part was written
    written: Callable[[], bool]
    # its rows: parts refused sent again (routes read anew) as they must be; or its error
    finish: Callable[[], int]
    future: futures.Future[int] = field(default_factory=futures.Future)


class RoutedWrites:
    """The routed writes of one connection under way, settled in order."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._sending = threading.Lock()  # one send at a time: the queue's order
        self._under_way = 0
        self._resending = False  # parts are being sent again: new writes wait
        self._closed = False
        self._queue: queue.SimpleQueue[Routed | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, send: Callable[[], Routed]) -> futures.Future[int]:
        """`send()` a write (once no part is being sent again, and fewer than
        MAX_ROUTED_UNDER_WAY are under way); the future of its rows. Sends go one at a
        time, in the order the writes settle; a send may wait for room on a dnode's
        stream, which the settling thread makes (its writes' answers, or their
        failures), so it runs without the lock that thread takes."""
        with self._sending:
            with self._lock:
                while not self._closed and (
                    self._resending or self._under_way >= MAX_ROUTED_UNDER_WAY
                ):
                    self._lock.wait()
                if self._closed:
                    raise ServerUnavailable("the connection is closed")
                self._under_way += 1
            try:
                routed = send()
            except BaseException:
                self._settled()
                raise
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._settle, name="sqltopic-routed-writes", daemon=True
                    )
                    self._thread.start()
            self._queue.put(routed)
        return routed.future

    def close(self) -> None:
        """No more writes; the thread ends once it settled those under way (their
        streams closed first, they fail at once), within SETTLER_JOIN_S."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()  # writes waiting to be sent: refused
        with self._sending:  # a send under way is queued before the end
            self._queue.put(None)
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(SETTLER_JOIN_S)

    def _settle(self) -> None:
        while (routed := self._queue.get()) is not None:
            try:
                if not routed.written():
                    with self._lock:  # before anything is sent again
                        self._resending = True
                routed.future.set_result(routed.finish())
            except BaseException as exc:  # the write's own error: its future has it
                routed.future.set_exception(exc)
            finally:
                self._settled()

    def _settled(self) -> None:
        """A write under way is no more (settled, or its send failed)."""
        with self._lock:
            self._under_way -= 1
            if not self._under_way:
                self._resending = False
            self._lock.notify_all()
