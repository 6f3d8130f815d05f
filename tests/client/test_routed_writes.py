"""The order of a cluster connection's writes under way (client/routed_writes.py), with
the connection's I/O replaced by callables that the test drives: writes settle in the
order made; while a write's refused parts are sent again no new write is sent; at most
MAX_ROUTED_UNDER_WAY are under way; each error reaches its own future; close ends the
thread."""

from __future__ import annotations

import functools
import threading
from concurrent import futures

import pytest

from sqltopic.client.routed_writes import MAX_ROUTED_UNDER_WAY, Routed, RoutedWrites
from sqltopic.errors import ServerUnavailable, SqlError

# Waits for a condition a test made happen (a bound, not a timing).
DEADLINE_S = 10.0


def _done(rows: int) -> Routed:
    return Routed(lambda: True, lambda: rows)


def test_writes_settle_in_the_order_made_each_with_its_own_outcome() -> None:
    settled: list[int] = []

    def write(k: int) -> Routed:
        def finish() -> int:
            settled.append(k)
            if k == 2:
                raise SqlError("bad value in write 2")
            return 10 * k

        return Routed(lambda: True, finish)

    writes = RoutedWrites()
    made = [writes.submit(functools.partial(write, k)) for k in range(5)]
    futures.wait(made, timeout=DEADLINE_S)
    assert [f.exception() is None for f in made] == [True, True, False, True, True]
    assert [f.result() for f in made if f.exception() is None] == [0, 10, 30, 40]
    with pytest.raises(SqlError, match="write 2"):
        made[2].result()
    assert settled == [0, 1, 2, 3, 4]
    writes.close()


def test_no_write_is_sent_while_refused_parts_are_sent_again() -> None:
    writes = RoutedWrites()
    resend = threading.Event()  # the test lets the refused write's resend finish
    resending = threading.Event()
    sent: list[str] = []

    def refused_then_resent() -> int:
        resending.set()
        assert resend.wait(DEADLINE_S)
        sent.append("resent")
        return 1

    def send(name: str, routed: Routed) -> Routed:
        sent.append(name)
        return routed

    first = writes.submit(lambda: send("first", Routed(lambda: False, refused_then_resent)))
    behind = writes.submit(lambda: send("behind", _done(2)))  # under way already
    assert resending.wait(DEADLINE_S)
    later: list[futures.Future[int]] = []
    submitter = threading.Thread(target=lambda: later.append(writes.submit(
        lambda: send("later", _done(3)))))  # fmt: skip
    submitter.start()
    submitter.join(0.2)  # a moment for a wrong implementation to send it early
    assert sent == ["first", "behind"]  # "later" waits for every write under way
    resend.set()
    submitter.join(DEADLINE_S)
    assert not submitter.is_alive()
    assert [first.result(DEADLINE_S), behind.result(DEADLINE_S)] == [1, 2]
    assert later[0].result(DEADLINE_S) == 3
    assert sent == ["first", "behind", "resent", "later"]
    writes.close()


def test_an_error_sending_a_write_is_raised_by_submit_and_nothing_waits() -> None:
    writes = RoutedWrites()

    def failing() -> Routed:
        raise ServerUnavailable("no dnode")

    with pytest.raises(ServerUnavailable, match="no dnode"):
        writes.submit(failing)
    assert writes.submit(lambda: _done(4)).result(DEADLINE_S) == 4
    writes.close()


def test_close_ends_the_thread_and_refuses_later_writes() -> None:
    writes = RoutedWrites()
    assert writes.submit(lambda: _done(1)).result(DEADLINE_S) == 1
    thread = writes._thread
    assert thread is not None
    writes.close()
    assert not thread.is_alive()
    with pytest.raises(ServerUnavailable, match="closed"):
        writes.submit(lambda: _done(2))


def test_at_most_max_routed_under_way_then_submit_waits_for_the_oldest() -> None:
    writes = RoutedWrites()
    release = threading.Event()

    def held() -> int:
        assert release.wait(DEADLINE_S)
        return 1

    made = [writes.submit(lambda: Routed(lambda: True, held)) for _ in range(MAX_ROUTED_UNDER_WAY)]
    sent: list[int] = []

    def send() -> Routed:
        sent.append(1)
        return _done(1)

    extra = threading.Thread(target=lambda: writes.submit(send))
    extra.start()
    extra.join(0.2)  # a moment for a wrong implementation to send it at once
    assert sent == []  # waits: the first is held, so none has settled
    release.set()
    extra.join(DEADLINE_S)
    assert sent == [1]
    assert all(f.result(DEADLINE_S) == 1 for f in made)
    writes.close()


def test_a_send_waiting_for_room_does_not_hold_up_the_settling() -> None:
    # the second write's send waits for room on a dnode's stream that only the first
    # write's settling makes (its part unanswered, as when the dnode stops answering:
    # written() is false, and finish() drops the stream, whose room frees)
    writes = RoutedWrites()
    room = threading.Semaphore(0)

    def finish_first() -> int:
        room.release()
        raise ServerUnavailable("the dnode stopped answering")

    first = writes.submit(lambda: Routed(lambda: False, finish_first))

    def send_second() -> Routed:
        assert room.acquire(timeout=DEADLINE_S)
        return _done(2)

    second = writes.submit(send_second)
    with pytest.raises(ServerUnavailable, match="stopped answering"):
        first.result(DEADLINE_S)
    assert second.result(DEADLINE_S) == 2
    writes.close()


def test_a_write_being_sent_when_the_connection_closes_is_settled() -> None:
    writes = RoutedWrites()
    assert writes.submit(lambda: _done(1)).result(DEADLINE_S) == 1
    sending, release = threading.Event(), threading.Event()

    def slow_send() -> Routed:
        sending.set()
        assert release.wait(DEADLINE_S)
        return _done(2)

    made: list[futures.Future[int]] = []
    submitter = threading.Thread(target=lambda: made.append(writes.submit(slow_send)))
    submitter.start()
    assert sending.wait(DEADLINE_S)
    closer = threading.Thread(target=writes.close)
    closer.start()
    release.set()  # the send ends after close began: its write is settled before the end
    submitter.join(DEADLINE_S)
    closer.join(DEADLINE_S)
    assert made[0].result(DEADLINE_S) == 2
    with pytest.raises(ServerUnavailable, match="closed"):
        writes.submit(lambda: _done(3))
