"""A shared group's window over one vgroup (server/vnode/share_window.py): leases, acks, nacks,
expiry, the in-flight bound, delivery limits and restarts; and, against a model under
random operations, that every row is acknowledged exactly once and never delivered
again after its acknowledgement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sqltopic.errors import ConfigError
from sqltopic.server.vnode.share_window import (
    BURYING,
    Durable,
    RowId,
    Run,
    cut,
    rows_of,
    runs_of,
)
from sqltopic.server.vnode.share_window import ShareWindow as RunWindow
from tests.server.share_window_model import RowModel

A, B = 1, 2  # consumers


class ShareWindow:
    """The window seen row by row, as the model and these tests name rows: every id
    list in is given to it as runs, every run out comes back as ids."""

    def __init__(self, start: int, window: RunWindow | None = None, **settings: Any) -> None:
        self.w = window if window is not None else RunWindow(start, **settings)

    @classmethod
    def restored(cls, saved: Durable, **settings: Any) -> ShareWindow:
        return cls(saved.start, RunWindow.restored(saved, **settings))

    def __getattr__(self, name: str) -> Any:  # start, end, room, in_flight, rows, ...
        return getattr(self.w, name)

    def admit(
        self, ids: list[RowId], next_end: int, consumer: int, deadline: float,
        max_leased: int | None = None, key_of: Callable[[RowId], str] | None = None,
        eligible: Callable[[str], bool] | None = None,
    ) -> list[RowId]:  # fmt: skip
        keys = None if key_of is None else _pieces_by(key_of)
        runs = self.w.admit(runs_of(ids), next_end, consumer, deadline, max_leased, keys, eligible)
        return rows_of(runs)

    def acquire(
        self, consumer: int, deadline: float, max_rows: int,
        eligible: Callable[[str], bool] | None = None, whole: bool = False,
    ) -> tuple[list[tuple[RowId, int]], list[tuple[RowId, int]]]:  # fmt: skip
        leased, dead = self.w.acquire(consumer, deadline, max_rows, eligible, whole)
        return _counted(leased), _counted(dead)

    def ack(self, consumer: int, ids: list[RowId]) -> list[RowId]:
        return rows_of(self.w.ack(consumer, runs_of(ids)))

    def nack(self, consumer: int, ids: list[RowId]) -> list[RowId]:
        return rows_of(self.w.nack(consumer, runs_of(ids)))

    def bury(self, ids: list[RowId]) -> list[RowId]:
        return rows_of(self.w.bury(runs_of(ids)))

    def unbury(self, ids: list[RowId]) -> int:
        return self.w.unbury(runs_of(ids))

    def leased_to(self, consumer: int) -> list[RowId]:
        return rows_of(self.w.leased_to(consumer))


def _counted(runs: list[tuple[Run, int]]) -> list[tuple[RowId, int]]:
    return [(rid, count) for run, count in runs for rid in rows_of([run])]


def _pieces_by(key_of: Callable[[RowId], str]) -> Callable[[int, int, int], list[Any]]:
    """A run's pieces of one key, from a key per row."""

    def pieces(version: int, lo: int, hi: int) -> list[tuple[int, int, str]]:
        out: list[tuple[int, int, str]] = []
        for i in range(lo, hi):
            key = key_of((version, i))
            if out and out[-1][2] == key:
                out[-1] = (out[-1][0], i + 1, key)
            else:
                out.append((i, i + 1, key))
        return out

    return pieces


def rows(*entries: tuple[int, int]) -> list[RowId]:
    """The ids of entries' rows: (version, row count) each, all rows in the topic."""
    return [(version, row) for version, count in entries for row in range(count)]


def test_rows_read_are_leased_and_acks_move_the_start() -> None:
    w = ShareWindow(start=10)
    assert w.admit(rows((10, 2), (12, 1)), next_end=13, consumer=A, deadline=5.0) == [
        (10, 0), (10, 1), (12, 0),
    ]  # fmt: skip
    assert (w.start, w.end, w.in_flight) == (10, 13, 3)
    assert w.ack(A, [(10, 1)]) == [(10, 1)]
    assert w.start == 10  # row 0 of version 10 is still out
    assert w.ack(B, [(10, 0)]) == []  # not B's
    assert w.ack(A, [(10, 0), (12, 0)]) == [(10, 0), (12, 0)]
    assert (w.start, w.in_flight, w.acked) == (13, 0, {})


def test_rows_of_an_entry_past_a_lease_wait_undelivered_for_the_next_consumer() -> None:
    w = ShareWindow(start=1)
    assert w.admit(rows((1, 3)), 2, A, deadline=5.0, max_leased=1) == [(1, 0)]
    assert (w.end, w.in_flight, w.leased_to(A)) == (2, 3, [(1, 0)])
    # never delivered yet: their first delivery counts 1
    assert w.acquire(B, deadline=5.0, max_rows=10) == ([((1, 1), 1), ((1, 2), 1)], [])
    assert w.ack(B, [(1, 1), (1, 2)]) == [(1, 1), (1, 2)]
    assert w.ack(A, [(1, 0)]) == [(1, 0)]
    assert (w.start, w.in_flight) == (2, 0)


def test_a_nacked_or_expired_row_is_delivered_again_with_its_count_raised() -> None:
    w = ShareWindow(start=1)
    w.admit(rows((1, 2)), 2, A, deadline=5.0)
    assert w.nack(A, [(1, 0)]) == [(1, 0)]
    assert w.acquire(B, deadline=9.0, max_rows=10) == ([((1, 0), 2)], [])
    assert w.expire(now=5.0) == 1  # A's (1, 1); B's lease runs to 9
    assert w.acquire(B, 9.0, 10) == ([((1, 1), 2)], [])
    assert w.leased_to(B) == [(1, 0), (1, 1)]
    assert w.release(B) == 2
    assert w.acquire(A, 20.0, 1) == ([((1, 0), 3)], [])  # oldest first, max_rows kept


def test_a_row_out_of_deliveries_is_handed_back_as_dead() -> None:
    w = ShareWindow(start=1, max_deliveries=2)
    w.admit(rows((1, 1), (2, 1)), 3, A, 5.0)
    w.nack(A, [(1, 0), (2, 0)])
    assert w.acquire(A, 5.0, 10) == ([((1, 0), 2), ((2, 0), 2)], [])
    w.nack(A, [(1, 0)])
    assert w.acquire(B, 5.0, 10) == ([], [((1, 0), 2)])
    # held while it is dead-lettered: no one takes it, no lease expiry frees it
    assert w.next_deadline() == 5.0  # (2, 0)'s lease; the buried row has none
    assert w.nack(A, [(2, 0)]) == [(2, 0)]
    assert (w.expire(1e9), w.acquire(B, 5.0, 10)) == (0, ([], [((2, 0), 2)]))
    assert w.unbury([(1, 0), (2, 0)]) == 2  # dead-lettering failed: taken again later
    assert w.acquire(B, 5.0, 10) == ([], [((1, 0), 2), ((2, 0), 2)])
    assert w.bury([(1, 0)]) == [(1, 0)]
    assert (w.start, w.in_flight) == (2, 1)
    # done for good, across a restart too; and (2, 0) keeps its count: out of deliveries
    again = ShareWindow.restored(w.durable(), max_deliveries=2)
    assert (again.start, again.admit(rows((2, 1)), 3, A, 5.0)) == (2, [])
    assert again.acquire(A, 5.0, 10) == ([], [((2, 0), 2)])


def test_a_whole_acquire_takes_whole_segments_past_max_rows() -> None:
    """batch_optimized leases: rows waiting go out by segment (an entry's rows in one
    state), the last one may pass max_rows; a record_limit lease cuts it."""
    w = ShareWindow(start=1)
    w.admit(rows((1, 3), (2, 2)), 3, A, deadline=5.0, max_leased=0)  # all waiting
    assert w.acquire(B, 5.0, 2, whole=True) == ([((1, 0), 1), ((1, 1), 1), ((1, 2), 1)], [])
    assert w.acquire(B, 5.0, 1) == ([((2, 0), 1)], [])
    assert w.acquire(A, 5.0, 1, whole=True) == ([((2, 1), 1)], [])


def test_rows_acknowledged_one_by_one_are_kept_as_one_span() -> None:
    w = RunWindow(start=1)
    w.admit([(1, 0, 6), (2, 0, 1)], 3, A, 5.0)  # version 2 keeps the start at 1
    for row in (4, 0, 2, 1, 3):
        w.ack(A, [(1, row, row + 1)])
    assert w.acked == {1: [(0, 5)]}
    assert w.durable().acked == ((1, 0, 5),)


def test_the_window_holds_at_most_max_in_flight_rows() -> None:
    w = ShareWindow(start=1, max_in_flight=3)
    w.admit(rows((1, 3)), 2, A, 5.0)
    assert w.room == 0
    w.ack(A, [(1, 2)])
    assert w.room == 1
    with pytest.raises(ConfigError, match="max_in_flight: 0 must be at least 1"):
        ShareWindow(start=1, max_in_flight=0)


def test_reads_must_follow_the_end() -> None:
    w = ShareWindow(start=5)
    with pytest.raises(ValueError, match="outside"):
        w.admit(rows((4, 1)), 6, A, 1.0)
    w.admit([], 8, A, 1.0)  # entries without rows for the topic: nothing to track
    assert (w.start, w.end) == (8, 8)
    with pytest.raises(ValueError, match="before the window's end"):
        w.admit([], 7, A, 1.0)


def test_after_a_restart_only_unacknowledged_rows_come_again() -> None:
    w = ShareWindow(start=1)
    w.admit(rows((1, 3), (2, 1), (3, 2)), 4, A, 5.0, max_leased=5)  # (3, 1) never went out
    w.nack(A, [(1, 2)])
    assert w.acquire(B, 5.0, 1) == ([((1, 2), 2)], [])
    w.ack(A, [(1, 1), (2, 0)])
    saved = w.durable()
    assert saved.counts == (((1, 0, 1), 1), ((1, 2, 3), 2), ((3, 0, 1), 1))
    again = ShareWindow.restored(saved)
    assert (again.start, again.end) == (1, 1)
    # read again: a row never delivered is leased as new; the others keep their counts
    assert again.admit(rows((1, 3), (2, 1), (3, 2)), 4, B, 5.0) == [(3, 1)]
    assert again.acquire(B, 5.0, 10) == ([((1, 0), 2), ((1, 2), 3), ((3, 0), 2)], [])


OPS = ("read", "acquire", "ack", "nack", "expire", "release", "restart")


def _read(
    entries: list[tuple[int, int]], end: int, most: int, room: int
) -> tuple[list[tuple[int, int]], int]:
    """What a read from `end` takes, as the vnode's does: at most `most` entries, and it
    stops after the entry that brings its rows to `room`; and the version after it."""
    batch: list[tuple[int, int]] = []
    taken = 0
    while end < len(entries) and len(batch) < most and taken < room:
        batch.append(entries[end])
        taken += entries[end][1]
        end += 1
    return batch, end


@settings(max_examples=200, deadline=None)
# an acknowledgement past a row still out, then a restart: the row must not come again
@example([("read", 1, 1), ("read", 2, 1), ("ack", 2, 5), ("restart", 1, 0), ("read", 3, 5)])
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(1, 3), st.integers(0, 5)),
                max_size=60))  # fmt: skip
def test_every_row_is_acknowledged_once_and_never_delivered_after(
    ops: list[tuple[str, int, int]],
) -> None:
    window = ShareWindow(start=0, max_in_flight=8)
    entries = [(v, v % 3) for v in range(30)]  # version v has v % 3 rows
    acked: set[tuple[int, int]] = set()
    now = 0.0
    for op, consumer, n in ops:
        now += 1.0
        if op == "read" and window.room and window.end < len(entries):
            batch, end = _read(entries, window.end, n + 1, window.room)
            read = window.admit(rows(*batch), end, consumer, now + 3, max_leased=n or None)
            assert not set(read) & acked
            assert len(read) <= (n or len(read))
        elif op == "acquire":
            again, dead = window.acquire(consumer, now + 3, n + 1)
            assert not {rid for rid, _ in again} & acked
            assert dead == []
        elif op == "ack":
            done = window.ack(consumer, window.leased_to(consumer)[:n])
            assert not set(done) & acked
            acked |= set(done)
        elif op == "nack":
            window.nack(consumer, window.leased_to(consumer)[:n])
        elif op == "expire":
            window.expire(now)
        elif op == "release":
            window.release(consumer)
        elif op == "restart":
            window = ShareWindow.restored(window.durable(), max_in_flight=8)
        assert window.in_flight <= 8 + 2  # a read stops after the entry that fills it
        assert all(v >= window.start for v, _ in window.rows())
        assert window.in_flight == len(window.rows())
    # drain: everything still out is delivered and acknowledged, each row once overall
    for _ in range(200):
        window.expire(now + 1_000)
        out, _ = window.acquire(A, now + 2_000, 100)
        assert not {rid for rid, _ in out} & acked
        acked |= set(window.ack(A, [rid for rid, _ in out]))
        if window.room and window.end < len(entries):
            batch, end = _read(entries, window.end, 5, window.room)
            leased = window.admit(rows(*batch), end, A, now + 2_000)
            assert not set(leased) & acked
            acked |= set(window.ack(A, leased))
        if window.end >= 30 and not window.rows():
            break
    assert acked >= {(v, r) for v, count in entries for r in range(count)}
    assert window.start == 30


DIFF_OPS = (*OPS, "nack_some", "ack_some", "bury", "unbury")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(DIFF_OPS), st.integers(1, 3), st.integers(0, 7)),
             max_size=80),
    st.sampled_from((None, 2, 3)),
)  # fmt: skip
def test_the_window_does_what_the_row_by_row_model_does(
    ops: list[tuple[str, int, int]], max_deliveries: int | None
) -> None:
    """The segment-based window against the row-by-row model it replaced: the same
    answer to every operation, and the same rows in the same states after each."""
    settings_: dict[str, Any] = {"max_in_flight": 12, "max_deliveries": max_deliveries}
    window, model = ShareWindow(start=0, **settings_), RowModel(start=0, **settings_)
    entries = [(v, 1 + v % 4) for v in range(40)]  # version v has 1 + v % 4 rows
    now = 0.0
    got: list[Any]
    for op, consumer, n in ops:
        now += 1.0
        both: tuple[Any, Any] = (window, model)
        if op == "read" and window.room and window.end < len(entries):
            batch, end = _read(entries, window.end, n + 1, window.room)
            most = n or None
            got = [w.admit(rows(*batch), end, consumer, now + 3, most) for w in both]
        elif op == "acquire":
            got = [w.acquire(consumer, now + 3, n + 1) for w in both]
        elif op in ("ack", "nack", "ack_some", "nack_some"):
            held = model.leased_to(consumer)
            chosen = held[:n] if op in ("ack", "nack") else held[::2]
            kind = op.split("_")[0]
            got = [getattr(w, kind)(consumer, chosen) for w in both]
        elif op == "bury":
            buried = sorted(r for r, state in model.rows.items() if state.holder == BURYING)
            got = [w.bury(buried[:n]) for w in both]
        elif op == "unbury":
            buried = sorted(r for r, state in model.rows.items() if state.holder == BURYING)
            got = [w.unbury(buried[n:]) for w in both]
        elif op == "expire":
            got = [w.expire(now) for w in both]
        elif op == "release":
            got = [w.release(consumer) for w in both]
        elif op == "restart":
            window = ShareWindow.restored(window.durable(), **settings_)
            model = RowModel.restored(model.durable(), **settings_)
            got = [None, None]
        else:
            continue
        assert _same(got[0]) == _same(got[1]), op
        expected = {r: (state.deliveries, state.holder) for r, state in model.rows.items()}
        assert window.rows() == expected, op
        assert (window.start, window.end, window.in_flight, window.durable()) == (
            model.start, model.end, model.in_flight, model.durable(),
        ), op  # fmt: skip
        assert window.next_deadline() == model.next_deadline()


def _same(answer: object) -> object:
    """An answer comparable across the two: lists of ids as sorted lists."""
    if isinstance(answer, tuple):
        return tuple(_same(part) for part in answer)
    if isinstance(answer, list):
        return sorted(answer)
    return answer


def test_key_shared_rows_wait_for_their_keys_consumer() -> None:
    """Rows of keys the reader may not take wait for the consumer that may; a key's
    holders are known, so a moved key can wait for its old holder's leases to end."""
    w = ShareWindow(start=1)
    key = {(1, 0): "a", (1, 1): "a", (1, 2): "b", (1, 3): "b"}.__getitem__
    mine_a = {"a"}.__contains__
    assert w.admit(rows((1, 4)), 2, A, 5.0, key_of=key, eligible=mine_a) == [(1, 0), (1, 1)]
    assert w.key_holders() == {"a": {A}}
    assert w.acquire(A, 5.0, 10, eligible=mine_a) == ([], [])  # b is not A's
    assert w.acquire(B, 5.0, 1, eligible={"b"}.__contains__) == ([((1, 2), 1)], [])
    assert w.acquire(B, 5.0, 10, eligible={"b"}.__contains__) == ([((1, 3), 1)], [])
    assert w.key_holders() == {"a": {A}, "b": {B}}
    w.nack(A, [(1, 1)])  # a released row of a goes to whoever may take a now
    assert w.acquire(B, 5.0, 10, eligible={"a", "b"}.__contains__) == ([((1, 1), 2)], [])


CUTS = [
    # (lo, hi, spans, pieces)
    (0, 5, [], [(0, 5, None)]),
    (0, 5, [(1, 3, "a")], [(0, 1, None), (1, 3, "a"), (3, 5, None)]),
    (2, 4, [(0, 3, "a"), (3, 9, "b")], [(2, 3, "a"), (3, 4, "b")]),  # spans pass the ends
    (0, 4, [(2, 4, "b"), (0, 2, "a")], [(0, 2, "a"), (2, 4, "b")]),  # unsorted spans
    (5, 6, [(0, 2, "a"), (8, 9, "b")], [(5, 6, None)]),  # none within
]


@pytest.mark.parametrize(("lo", "hi", "spans", "pieces"), CUTS)
def test_a_run_is_cut_at_the_edges_of_spans(
    lo: int, hi: int, spans: list[tuple[int, int, str]], pieces: list[Any]
) -> None:
    assert list(cut(lo, hi, spans)) == pieces
