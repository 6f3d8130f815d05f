"""A thread-based stream's threads (client/readers.py): gRPC's sender, noted as it takes
the first request, our reader, and the channel thread's handling of the call's end, all
waited for by a closing client; a thread never waits for itself."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from sqltopic.client.readers import StreamThreads
from tests.client.support import DEADLINE_S


class Call:
    """A call whose end gRPC's channel thread handles when the test says so."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[Any], None]] = []

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)

    def end_later(self, handled: list[str]) -> threading.Thread:
        def end() -> None:
            handled.append("handled")
            for callback in self.callbacks:
                callback(self)

        return threading.Thread(target=end, daemon=True)


def test_join_waits_for_the_sender_and_the_reader() -> None:
    threads = StreamThreads()
    call = Call()
    threads.watch(call)
    requests: queue.Queue[int | None] = queue.Queue()
    taken: list[int] = []
    release = threading.Event()

    def send() -> None:  # what gRPC's sender does with the call's request iterator
        taken.extend(threads.requests(iter(requests.get, None)))
        release.wait(DEADLINE_S)  # after the last request, gRPC still holds the call

    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    def read() -> None:
        release.wait(DEADLINE_S)

    threads.start_reader(read, "test-reader")
    requests.put(1)
    requests.put(None)
    assert threads.reading()
    release.set()
    handled: list[str] = []
    call.end_later(handled).start()
    threads.join()
    assert not sender.is_alive()
    assert not threads.reading()
    assert taken == [1]
    assert handled == ["handled"]  # join returned after the call's end was handled


def test_a_reader_closing_its_client_does_not_wait_for_itself() -> None:
    """A callback on the reader may close its client: that close must not wait for the
    very thread it runs on (Thread.join would raise RuntimeError)."""
    threads = StreamThreads()
    call = Call()
    threads.watch(call)
    outcome: list[str] = []
    sender = threading.Thread(target=lambda: list(threads.requests(iter([1]))), daemon=True)
    sender.start()

    def read() -> None:
        threads.join()
        outcome.append("returned")

    threads.start_reader(read, "test-reader")
    call.end_later([]).start()
    threads.join()
    assert outcome == ["returned"]
    assert not threads.reading()
