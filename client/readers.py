"""The threads of a client's gRPC streams, which a closing client waits for.

A thread-based stream has two threads: ours, reading its answers, and gRPC's, taking
requests from the iterator the call was given. Both are daemon threads, and a daemon
thread still inside gRPC when the interpreter exits is stopped where it stands (CPython
ends a daemon thread that asks for the GIL during finalization), a lock it holds held for
good: the final garbage collection then runs the call's `__del__`, which takes that lock,
and the process hangs at exit. The call is there to collect: it raised itself as the
error that ended the reader, and that error's traceback holds a frame that holds the call.
Three threads take the call's lock: gRPC's sender once more after the last request (to
half-close the call), our reader, and gRPC's channel thread as it handles the call's last
event; `sqltopic consume --max-rows` hung about once in 300 runs on the first, then on
the last. So a client's `close()` ends its streams and waits until none of the three will
take the lock again: the sender and the reader have ended, and the channel thread has run
the call's done callbacks (which it runs after letting go of the lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

# How long a closing client waits for its streams' threads (all of them together): an
# ended call lets them go at once; the bound only keeps a wedged transport from holding
# close() for good.
STREAM_JOIN_S = 5.0


def handled(call: Any) -> threading.Event:
    """Set once gRPC's channel thread has handled the end of `call` (a grpc.Future, a
    unary Fetch's too: a cancelled one ends on that thread as a stream does), after
    which no thread of gRPC takes the call's lock again."""
    done = threading.Event()
    call.add_done_callback(lambda _: done.set())
    return done


class StreamThreads:
    """The reader and the sender of one stream, and the end of its call."""

    def __init__(self) -> None:
        self._reader: threading.Thread | None = None
        self._sender: threading.Thread | None = None
        # gRPC's sender took its first request: `_sender` is known (it does so first
        # thing, so the wait is short even for a call that failed at once)
        self._sending = threading.Event()
        self._handled: threading.Event | None = None  # the channel thread is done with the call

    def watch(self, call: Any) -> None:
        """Note when gRPC has handled the end of `call` (a grpc.Future)."""
        self._handled = handled(call)

    def requests(self, source: Iterator[T]) -> Iterator[T]:
        """`source` as the call's request iterator, noting which thread consumes it."""
        self._sender = threading.current_thread()
        self._sending.set()
        yield from source

    def start_reader(self, target: Callable[[], None], name: str) -> None:
        """`target` on a daemon thread (it must not keep the process alive)."""
        self._reader = threading.Thread(target=target, name=name, daemon=True)
        self._reader.start()

    def reading(self) -> bool:
        """Whether the reader still runs."""
        return self._reader is not None and self._reader.is_alive()

    def join(self, deadline: float | None = None) -> None:
        """Wait until an ended stream's threads are done with its call, until
        `deadline` (time.monotonic) at most, by default STREAM_JOIN_S from now; not for
        the calling thread itself (a callback on the reader may close its client)."""
        deadline = time.monotonic() + STREAM_JOIN_S if deadline is None else deadline

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        if self._sender is None:
            self._sending.wait(left())
        for thread in (self._sender, self._reader):
            if thread is not None and thread is not threading.current_thread():
                thread.join(left())
        if self._handled is not None:
            self._handled.wait(left())
