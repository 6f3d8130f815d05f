"""The offset store's group commit: concurrent commits share transactions, each returns
only once stored, the last commit of a key wins in the cache and in the file alike, a
failed transaction fails its own group only, and `forget` stays consistent with commits
running beside it.

Grouping is made certain, not hoped for: the test holds the store's write lock (what a
running transaction holds) while committers queue, then lets them through."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from sqltopic.errors import DataFileDamaged
from sqltopic.server.vnode.offsets import OffsetStore, decode_acked, encode_acked, encode_counts
from tests.wal.waits import wait_for

Rows = list[tuple[str, str, int]]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[OffsetStore]:
    store = OffsetStore.open(tmp_path)
    yield store
    store.close()


def _stored(store: OffsetStore, topics: tuple[str, ...] = ("t", "u")) -> dict[str, dict[str, int]]:
    """What the file holds, read by a fresh store after closing `store`."""
    store.close()
    again = OffsetStore(store.path)
    try:
        return {topic: again.groups(topic) for topic in topics}
    finally:
        again.close()


def _cached(store: OffsetStore, topics: tuple[str, ...] = ("t", "u")) -> dict[str, dict[str, int]]:
    return {topic: store.groups(topic) for topic in topics}


def _held_group(store: OffsetStore, commits: list[Rows]) -> list[Future[None]]:
    """Run `commits` on threads of their own while the store's write lock is held, so
    that all of them queue (the leader's own included: it takes the queue only once it
    has the lock); then let them through as one group. Returns each commit's future."""
    pool = ThreadPoolExecutor(max_workers=len(commits))
    try:
        with store._write:
            futures = [pool.submit(store.commit, rows, 1) for rows in commits]
            wait_for(lambda: len(store._queue) == len(commits), "every commit queued")
        for future in futures:
            future.exception(timeout=30)
    finally:
        pool.shutdown()
    return futures


def test_a_lone_commit_is_one_transaction_and_durable(store: OffsetStore) -> None:
    store.commit([("t", "g", 5), ("u", "g", 6)], now_us=1)
    assert (store.get("t", "g"), store.get("u", "g"), store.transactions) == (5, 6, 1)
    store.commit([], now_us=2)  # nothing to store: no transaction
    assert store.transactions == 1
    assert _stored(store) == {"t": {"g": 5}, "u": {"g": 6}}


def test_commits_waiting_together_share_one_transaction(store: OffsetStore) -> None:
    commits = [[("t", f"g{i}", i + 1), ("u", f"g{i}", i + 100)] for i in range(12)]
    futures = _held_group(store, commits)
    assert [f.result() for f in futures] == [None] * 12
    assert store.transactions == 1
    want = {"t": {f"g{i}": i + 1 for i in range(12)}, "u": {f"g{i}": i + 100 for i in range(12)}}
    assert _cached(store) == want
    assert _stored(store) == want


def test_many_threads_committing_store_every_row(store: OffsetStore) -> None:
    threads, rounds = 24, 30

    def committer(index: int) -> None:
        for offset in range(1, rounds + 1):  # both rows of a commit: all or none
            store.commit([("t", f"g{index}", offset), ("u", f"g{index}", offset)], offset)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        for future in [pool.submit(committer, i) for i in range(threads)]:
            future.result(timeout=60)
    want = {topic: {f"g{i}": rounds for i in range(threads)} for topic in ("t", "u")}
    assert _cached(store) == want
    assert 1 <= store.transactions <= threads * rounds
    assert _stored(store) == want


def test_within_a_group_the_last_queued_commit_of_a_key_wins(store: OffsetStore) -> None:
    """The cache follows the transaction's row order: the file and the cache agree."""
    pool = ThreadPoolExecutor(max_workers=10)
    try:
        with store._write:
            for value in range(1, 11):
                pool.submit(store.commit, [("t", "g", value)], 1)
            wait_for(lambda: len(store._queue) == 10, "every commit queued")
            last_queued = store._queue[-1].rows[0][2]
    finally:
        pool.shutdown()
    assert store.transactions == 1
    assert store.get("t", "g") == last_queued
    assert _stored(store, ("t",)) == {"t": {"g": last_queued}}


def test_the_commit_returning_last_wins_while_others_commit(store: OffsetStore) -> None:
    """Each commit of key (t, g) runs on another thread, once the previous one returned,
    amid a stream of commits of other keys that it shares transactions with."""
    stop = threading.Event()

    def noise(index: int) -> None:
        offset = 0
        while not stop.is_set():
            offset += 1
            store.commit([("u", f"n{index}", offset)], offset)

    with ThreadPoolExecutor(max_workers=6) as noisy, ThreadPoolExecutor(max_workers=4) as keyed:
        streams = [noisy.submit(noise, i) for i in range(6)]
        for offset in range(1, 41):
            keyed.submit(store.commit, [("t", "g", offset)], offset).result(timeout=30)
            assert store.get("t", "g") == offset
        stop.set()
        for stream in streams:
            stream.result(timeout=30)
    assert _stored(store, ("t",)) == {"t": {"g": 40}}


def test_a_failed_transaction_fails_its_group_only(store: OffsetStore) -> None:
    store.commit([("t", "a", 1), ("t", "c", 1)], now_us=1)
    bad: Rows = [("t", "b", 2), ("u", "b", object())]  # type: ignore[list-item]
    futures = _held_group(store, [[("t", "a", 2)], bad, [("t", "c", 2)]])
    for future in futures:  # the leader's and the followers' alike
        with pytest.raises(sqlite3.ProgrammingError, match="binding parameter"):
            future.result()
    assert store.transactions == 1  # the failed one is not counted
    assert _cached(store) == {"t": {"a": 1, "c": 1}, "u": {}}, "the cache kept the old offsets"

    futures = _held_group(store, [[("t", "a", 3)], [("t", "b", 3)]])  # the next group
    assert [f.result() for f in futures] == [None, None]
    assert store.transactions == 2
    assert _stored(store) == {"t": {"a": 3, "b": 3, "c": 1}, "u": {}}


def test_a_commit_on_a_closed_store_fails(store: OffsetStore) -> None:
    store.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        store.commit([("t", "g", 1)], now_us=1)
    assert store.get("t", "g") is None


def _progress(store: OffsetStore, streams: list[Future[None]]) -> Callable[[], bool]:
    """A condition: three more transactions since now, or a committer stopped (failed)."""
    before = store.transactions
    return lambda: store.transactions >= before + 3 or any(s.done() for s in streams)


def test_forget_stays_consistent_with_concurrent_commits(store: OffsetStore) -> None:
    """Cache and file agree after drops raced commits of the keys they drop."""
    stop = threading.Event()

    def committer(topic: str, group: str) -> Callable[[], None]:
        def run() -> None:
            offset = 0
            while not stop.is_set():
                offset += 1
                store.commit([(topic, group, offset)], offset)

        return run

    keys = [(topic, f"g{i}") for topic in ("t", "u") for i in range(4)]
    with ThreadPoolExecutor(max_workers=len(keys)) as pool:
        streams = [pool.submit(committer(*key)) for key in keys]
        for round_ in range(30):
            wait_for(_progress(store, streams), "commits between the drops")
            if round_ % 2:
                store.forget("t")
            else:
                store.forget("u", "g1")
        stop.set()
        for stream in streams:  # a committer's error, if any, fails the test here
            stream.result(timeout=30)
    cached = _cached(store)
    assert cached == _stored(store)
    assert set(cached["t"]) <= {"g0", "g1", "g2", "g3"}


def test_a_shared_groups_window_is_stored_with_its_acknowledged_rows(store: OffsetStore) -> None:
    assert store.share_state("t", "s") is None
    counts = (((7, 0, 1), 2), ((9, 5, 9), 1))
    store.commit_share("t", "s", 7, [(7, 1, 2), (9, 0, 1), (9, 2, 5)], now_us=1, counts=counts)
    store.commit([("t", "g", 4)], now_us=1)  # a vgroup group beside it: no rows
    stored = (7, ((7, 1, 2), (9, 0, 1), (9, 2, 5)), counts)
    assert store.share_state("t", "s") == stored
    assert store.share_state("t", "g") == (4, (), ())
    path = store.path
    store.close()
    again = OffsetStore(path)
    try:
        assert again.share_state("t", "s") == stored
        assert again.get("t", "s") == 7  # the start is the group's committed offset
        again.commit_share("t", "s", 10, [], now_us=2)
        assert again.share_state("t", "s") == (10, (), ())
        again.forget("t", "s")
        assert again.share_state("t", "s") is None
    finally:
        again.close()


def test_a_file_from_before_shared_groups_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "offsets.sqlite"
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE committed (topic TEXT NOT NULL, grp TEXT NOT NULL, next_version "
            "INTEGER NOT NULL, updated_us INTEGER NOT NULL, PRIMARY KEY (topic, grp)) "
            "WITHOUT ROWID"
        )
        con.execute("INSERT INTO committed VALUES ('t', 'g', 3, 1)")
    con.close()
    store = OffsetStore(path)
    try:
        assert store.get("t", "g") == 3
        store.commit_share("t", "s", 5, [(5, 0, 1)], now_us=2)
        assert store.share_state("t", "s") == (5, ((5, 0, 1),), ())
    finally:
        store.close()


def test_a_file_from_before_delivery_counts_gains_their_column(tmp_path: Path) -> None:
    path = tmp_path / "offsets.sqlite"
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE committed (topic TEXT NOT NULL, grp TEXT NOT NULL, next_version "
            "INTEGER NOT NULL, updated_us INTEGER NOT NULL, acked BLOB, PRIMARY KEY (topic, "
            "grp)) WITHOUT ROWID"
        )
        con.execute("INSERT INTO committed VALUES ('t', 's', 3, 1, ?)", (encode_acked([]),))
    con.close()
    store = OffsetStore(path)
    try:
        assert store.share_state("t", "s") == (3, (), ())  # no counts kept then: none
        store.commit_share("t", "s", 3, [], now_us=2, counts=[((3, 0, 2), 4)])
        assert store.share_state("t", "s") == (3, (), (((3, 0, 2), 4),))
    finally:
        store.close()


@pytest.mark.parametrize(
    ("column", "blob"),
    [
        ("acked", b"\x01" * 15),
        ("acked", encode_acked([(1, 2, 3)])[:8] + b"\xff" * 8),  # a negative index
        ("counts", b"\x01" * 31),
        ("counts", encode_counts([((1, 2, 2), 1)])),  # an empty run
        ("counts", encode_counts([((1, 0, 1), 0)])),  # a count of 0
    ],
)
def test_a_window_that_does_not_decode_is_damage(tmp_path: Path, column: str, blob: bytes) -> None:
    store = OffsetStore.open(tmp_path)
    store.commit_share("t", "s", 1, [(1, 0, 1)], now_us=1, counts=[((1, 1, 2), 1)])
    store.close()
    with sqlite3.connect(store.path) as con:
        con.execute(f"UPDATE committed SET {column} = ?", (blob,))
    con.close()
    again = OffsetStore(store.path)
    try:
        with pytest.raises(DataFileDamaged, match=r"offsets\.sqlite: the committed offsets"):
            again.share_state("t", "s")
    finally:
        again.close()


def test_acknowledged_rows_round_trip() -> None:
    runs = ((0, 0, 1), (5, 3, 6), (5, 2**31 - 2, 2**31 - 1), (2**40, 7, 8))
    assert decode_acked(encode_acked(runs)) == runs
    assert decode_acked(None) == decode_acked(b"") == ()


def test_acknowledged_rows_are_stored_one_pair_per_row() -> None:
    """The stored format is (version, index) pairs, whatever runs the window keeps: a
    file written before the window kept runs reads the same."""
    pairs = [9, 2, 7, 1, 9, 0, 9, 1]  # unsorted, as any writer may have left them
    blob = b"".join(n.to_bytes(8, "little", signed=True) for n in pairs)
    assert decode_acked(blob) == ((7, 1, 2), (9, 0, 3))
    assert encode_acked([(7, 1, 2), (9, 0, 3)]) == b"".join(
        n.to_bytes(8, "little", signed=True) for n in [7, 1, 9, 0, 9, 1, 9, 2]
    )
