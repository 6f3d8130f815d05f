"""server/dnode/commit_groups.py: commits gathered on the event loop, stored in groups
(one transaction per vnode store per group) on real OffsetStores in a temp dir."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sqltopic.server.common.turns import PER_TURN
from sqltopic.server.dnode.commit_groups import CommitGroups
from sqltopic.server.vnode.offsets import OffsetStore
from tests.server.support import count_turns

# Bounds a test's wait for a thread it released: far above any real commit.
WAIT_S = 30.0


class Pool:
    """The commit pool: a real thread, whose next job can be held at its start."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(1)
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()

    async def run(self, fn: Callable[..., Any], *args: object) -> Any:
        def held() -> Any:
            self.started.set()
            assert self.hold.wait(WAIT_S)
            return fn(*args)

        return await asyncio.get_running_loop().run_in_executor(self.executor, held)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[OffsetStore]]:
    opened = [OffsetStore.open(tmp_path / f"vnode{n}") for n in (1, 2)]
    yield opened
    for store in opened:
        store.close()


def test_commits_arriving_during_a_job_share_the_next_one_in_arrival_order(
    stores: list[OffsetStore],
) -> None:
    pool = Pool()
    one, two = stores

    async def run() -> CommitGroups:
        groups = CommitGroups(pool.run, lambda: 1_000)
        pool.hold.clear()
        first = asyncio.create_task(groups.store([(one, [("t", "g0", 1)])]))
        while not pool.started.is_set():  # the first job is under way, held
            await asyncio.sleep(0)
        later = [
            asyncio.create_task(groups.store([(one, [("t", f"g{n}", n)]), (two, [("t", "g", n)])]))
            for n in range(1, 6)
        ]
        again = asyncio.create_task(groups.store([(one, [("t", "g1", 99)])]))
        await asyncio.sleep(0)  # every one queued behind the held job
        pool.hold.set()
        await asyncio.wait_for(asyncio.gather(first, *later, again), WAIT_S)
        return groups

    groups = asyncio.run(run())
    assert groups.jobs == 2  # the lone first commit, then the six that waited together
    assert one.transactions == 2  # one per store per job
    assert two.transactions == 1
    assert [one.get("t", f"g{n}") for n in range(6)] == [1, 99, 2, 3, 4, 5]  # later wins
    assert two.get("t", "g") == 5
    assert one.committed_at("t", "g3") == 1_000


def test_a_failed_store_fails_only_the_commits_with_rows_on_it(
    stores: list[OffsetStore],
) -> None:
    pool = Pool()
    one, two = stores
    two.close()  # its transaction raises: a disk gone bad

    async def run() -> list[BaseException | None]:
        groups = CommitGroups(pool.run, lambda: 1_000)
        pool.hold.clear()
        blocker = asyncio.create_task(groups.store([(one, [("t", "first", 1)])]))
        while not pool.started.is_set():
            await asyncio.sleep(0)
        both = groups.store([(one, [("t", "a", 1)]), (two, [("t", "a", 1)])])
        alone = groups.store([(one, [("t", "b", 2)])])
        tasks = [asyncio.create_task(both), asyncio.create_task(alone)]
        await asyncio.sleep(0)
        pool.hold.set()
        await blocker
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)
        return [r if isinstance(r, BaseException) else None for r in done]

    both_error, alone_error = asyncio.run(run())
    assert both_error is not None
    assert "closed" in str(both_error)
    assert alone_error is None
    assert one.get("t", "b") == 2
    assert one.get("t", "a") == 1  # stored on the store that worked, as one by one


def test_a_commit_of_no_rows_returns_without_a_job(stores: list[OffsetStore]) -> None:
    pool = Pool()

    async def run() -> CommitGroups:
        groups = CommitGroups(pool.run, lambda: 1_000)
        await groups.store([(stores[0], [])])
        return groups

    assert asyncio.run(run()).jobs == 0
    assert stores[0].transactions == 0


def test_the_commits_of_a_large_group_go_on_over_several_turns_of_the_loop(
    stores: list[OffsetStore],
) -> None:
    """A group of a process's commits resumes its callers PER_TURN per turn of
    the event loop, every one stored."""
    pool = Pool()
    one, _ = stores
    count = 3 * PER_TURN + 7
    turn = [0]
    resumed: list[int] = []

    async def committer(n: int) -> None:
        await groups.store([(one, [("t", f"g{n}", n + 1)])])
        resumed.append(turn[0])

    async def run() -> None:
        ticker = asyncio.create_task(count_turns(turn))
        pool.hold.clear()
        first = asyncio.create_task(committer(0))
        while not pool.started.is_set():
            await asyncio.sleep(0)
        later = [asyncio.create_task(committer(n)) for n in range(1, count)]
        await asyncio.sleep(0)  # all queued behind the held job: one group
        pool.hold.set()
        await asyncio.wait_for(asyncio.gather(first, *later), WAIT_S)
        ticker.cancel()

    groups = CommitGroups(pool.run, lambda: 1_000)
    asyncio.run(run())
    assert groups.jobs == 2
    assert [one.get("t", f"g{n}") for n in range(count)] == [n + 1 for n in range(count)]
    per_turn = Counter(resumed[1:])  # the group's, after the lone first commit
    assert len(per_turn) >= 4
    assert max(per_turn.values()) <= PER_TURN
