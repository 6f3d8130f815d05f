"""Ctrl-C and SIGTERM as a request that a command's loop reads between calls.

A KeyboardInterrupt raised by the default handler lands wherever the main thread is,
often inside a gRPC call, and can leave grpc's locks held: closing the consumer then
waits forever. So the commands that loop over a consumer (`consume`, `demo`) take the
signals as a flag, look at it between polls and close the consumer in order. A second
signal quits at once, without closing anything.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# The exit code of a second Ctrl-C, which quits without closing (128 + SIGINT).
FORCED_EXIT = 130
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Set by the first Ctrl-C or SIGTERM; a second one exits the process."""

    def __init__(self) -> None:
        self.requested = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            os._exit(FORCED_EXIT)  # the user insists: the orderly close may be what waits
        self.requested = True


@contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """Signals as a StopRequest while the block runs; the previous handlers after it."""
    stop = StopRequest()
    previous = {sig: signal.signal(sig, stop.handle) for sig in SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
