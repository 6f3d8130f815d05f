"""A vnode's shared-group windows (server/vnode/share_windows.py): made from what offsets.sqlite
holds, their acknowledgements on disk before `ack` returns (shared by concurrent acks,
never overtaken by an older save), leases released and expired across windows."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sqltopic.server.vnode.offsets import OffsetStore, ShareState
from sqltopic.server.vnode.share_window import Run, rows_of
from sqltopic.server.vnode.share_windows import ShareWindows

A, B = 1, 2


@pytest.fixture
def store(tmp_path: Path) -> Iterator[OffsetStore]:
    store = OffsetStore.open(tmp_path)
    yield store
    store.close()


def _windows(store: OffsetStore, **settings: int) -> ShareWindows:
    return ShareWindows(store, clock_us=lambda: 1, **settings)


def _reopened(store: OffsetStore) -> OffsetStore:
    store.close()
    return OffsetStore(store.path)


def _done(state: ShareState | None, run: Run) -> bool:
    """Whether a stored window counts the rows of `run` as done."""
    assert state is not None
    start, acked, _counts = state
    return run[0] < start or set(rows_of([run])) <= set(rows_of(acked))


def test_a_window_starts_where_it_was_stored_or_at_the_reset(store: OffsetStore) -> None:
    windows = _windows(store)
    windows.open("t", "s", start=lambda: 5)
    windows.open("t", "s", start=lambda: pytest.fail("opened twice"))
    assert windows.frontier("t", "s") == (5, 10_000)
    leased = windows.admit("t", "s", [(5, 0, 2), (6, 0, 1)], 7, A, deadline=10.0)
    assert windows.ack("t", "s", A, [(5, 1, 2), (6, 0, 1)]) == [(5, 1, 2), (6, 0, 1)]
    again = _reopened(store)
    try:
        # (5, 0) is out, delivered once: its count is kept with the acknowledgements
        assert again.share_state("t", "s") == (5, ((5, 1, 2), (6, 0, 1)), (((5, 0, 1), 1),))
        restarted = _windows(again)
        restarted.open("t", "s", start=lambda: pytest.fail("stored: no reset"))
        # read again from the start: only the row not acknowledged comes again, second
        assert restarted.admit("t", "s", [(5, 0, 2), (6, 0, 1)], 7, B, 10.0) == []
        assert restarted.acquire("t", "s", B, 10.0, 10) == ([((5, 0, 1), 2)], [])
        assert leased == [(5, 0, 2), (6, 0, 1)]
    finally:
        again.close()


def test_acks_from_many_threads_are_all_on_disk_when_they_return(store: OffsetStore) -> None:
    windows = _windows(store)
    windows.open("t", "s", start=lambda: 0)
    consumers = range(1, 9)
    for c in consumers:  # each consumer leases the 20 rows of its own entry
        windows.admit("t", "s", [(c - 1, 0, 20)], c, c, 99.0)
    returned: list[Run] = []
    lock = threading.Lock()

    def ack_one_by_one(consumer: int) -> None:
        for version, row in rows_of(windows.leased_to("t", "s", consumer)):
            done = windows.ack("t", "s", consumer, [(version, row, row + 1)])
            with lock:
                returned.extend(done)

    with ThreadPoolExecutor(len(consumers)) as pool:
        list(pool.map(ack_one_by_one, consumers))
    assert len(returned) == 160
    again = _reopened(store)
    try:
        state = again.share_state("t", "s")
        assert all(_done(state, run) for run in returned)
        assert state == (8, (), ())  # every row done: the start moved past them all
    finally:
        again.close()


def test_rows_out_of_deliveries_are_saved_as_done(store: OffsetStore) -> None:
    windows = ShareWindows(store, clock_us=lambda: 1)
    windows.open("t", "s", start=lambda: 3, max_deliveries=1)
    windows.admit("t", "s", [(3, 0, 1), (4, 0, 1)], 5, A, 10.0)
    windows.nack("t", "s", A, [(3, 0, 1)])
    assert windows.acquire("t", "s", B, 10.0, 10) == ([], [((3, 0, 1), 1)])
    assert store.share_state("t", "s") is None  # nothing done yet: it is dead-lettered first
    assert windows.bury("t", "s", [(3, 0, 1)]) == [(3, 0, 1)]
    assert store.share_state("t", "s") == (4, (), (((4, 0, 1), 1),))


def test_a_save_after_its_group_was_forgotten_writes_nothing(store: OffsetStore) -> None:
    """A piggybacked acknowledgement's save runs a little later; if the topic or group
    was dropped meanwhile it must not bring the group's state back."""
    windows = _windows(store)
    windows.open("t", "s", start=lambda: 0)
    windows.admit("t", "s", [(0, 0, 3)], 1, A, deadline=9.0)
    save = windows.accept("t", "s", A, [(0, 0, 2)])
    assert save is not None
    windows.forget("t", "s")
    store.forget("t", "s")
    save()
    assert store.share_state("t", "s") is None


def test_leases_end_for_a_consumer_that_left_and_when_they_expire(store: OffsetStore) -> None:
    windows = _windows(store)
    for topic in ("t", "u"):
        windows.open(topic, "s", start=lambda: 0)
        windows.admit(topic, "s", [(0, 0, 2)], 1, A, deadline=5.0)
    windows.admit("t", "s", [(1, 0, 1)], 2, B, deadline=9.0)
    assert windows.release(A) == 4
    assert windows.expire(now=9.0) == 1
    assert windows.acquire("u", "s", B, 20.0, 10) == ([((0, 0, 2), 2)], [])
    assert windows.ack("u", "s", A, [(0, 0, 1)]) == []  # no longer A's
    windows.forget("u")
    windows.forget(group="s")
    with pytest.raises(KeyError):
        windows.frontier("t", "s")
