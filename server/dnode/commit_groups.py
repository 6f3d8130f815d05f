"""Offset commits gathered on the event loop (group commit of offsets, across vnodes).

A commit of a consumer group's offsets reaches this module checked (the caller's
rights, its assignment, the offsets' range) as rows per vnode. The commits that arrive
while the commits before them are being stored wait together, and the next store job
takes all of them: one trip to the commit pool and one transaction per vnode for the
whole group, however many commits and consumers it holds. A lone commit never waits
for company: with no job under way it starts one at once.

Within a vnode's transaction the rows keep the order the commits arrived in, so a
consumer's later commit of a vgroup wins over its earlier one exactly as one by one. A
commit returns only once every one of its rows is on disk (`OffsetStore.commit`: SQLite
with `synchronous=FULL`); when a vnode's transaction fails, every commit with rows on
that vnode gets its error, and the commits of the other vnodes are stored.

Before, each commit was a trip of its own to the commit pool, its thread blocking in
the store's group commit: at 200 auto-commits a second (1,000 consumers) that was half
of the server's CPU (docs/performance.md §9.10).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqltopic.server.common.turns import in_turns
from sqltopic.server.vnode.offsets import OffsetStore

# (subscription, group, next version): one committed offset
Offset = tuple[str, str, int]
# (fn, *args) -> fn(*args) run on the commit pool
Runner = Callable[..., Awaitable[Any]]


@dataclass(eq=False)
class _Waiting:
    """One commit in the queue: its rows per vnode store, and its caller's future."""

    rows: Sequence[tuple[OffsetStore, list[Offset]]]
    future: asyncio.Future[None]


class CommitGroups:
    """The commits of one dnode's vnodes, stored in groups. Lives on the event loop."""

    def __init__(self, run: Runner, now_us: Callable[[], int]) -> None:
        self._run = run
        self._now_us = now_us
        self._queue: list[_Waiting] = []
        self._storing = False
        self.jobs = 0  # store jobs run since the start (tests: how commits grouped)

    async def store(self, rows: Sequence[tuple[OffsetStore, list[Offset]]]) -> None:
        """Once `rows` (offsets per vnode store) are on disk, with the commits stored in
        the same job; a failed transaction's error raises."""
        if not any(offsets for _, offsets in rows):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(rows, future))
        if not self._storing:
            self._storing = True
            asyncio.get_running_loop().create_task(self._store_queued())
        await future

    async def _store_queued(self) -> None:
        """Store what waits, job after job, until nothing does."""
        try:
            while self._queue:
                group, self._queue = self._queue, []
                try:
                    failed = await self._run(_store_all, _merged(group), self._now_us())
                except BaseException as exc:  # the pool is gone or the loop stops: all fail
                    failed = {store: exc for waiting in group for store, _ in waiting.rows}
                self.jobs += 1
                # a process's consumers commit together: their callers resume in turns
                async for waiting in in_turns(group):
                    _settle(waiting, failed)
        finally:
            self._storing = False


def _merged(group: list[_Waiting]) -> dict[OffsetStore, list[Offset]]:
    """Every store's rows of the group, in the order the commits arrived."""
    merged: dict[OffsetStore, list[Offset]] = {}
    for waiting in group:
        for store, offsets in waiting.rows:
            merged.setdefault(store, []).extend(offsets)
    return merged


def _store_all(
    merged: dict[OffsetStore, list[Offset]], now_us: int
) -> dict[OffsetStore, BaseException]:
    """One transaction per store (on the commit pool); the stores that failed, with why."""
    failed: dict[OffsetStore, BaseException] = {}
    for store, offsets in merged.items():
        try:
            store.commit(offsets, now_us)
        except Exception as exc:  # this store's commits fail; the others' are stored
            failed[store] = exc
    return failed


def _settle(waiting: _Waiting, failed: dict[OffsetStore, BaseException]) -> None:
    if waiting.future.done():  # its caller went away (a cancelled stream): stored anyway
        return
    error = next((failed[s] for s, _ in waiting.rows if s in failed), None)
    if error is None:
        waiting.future.set_result(None)
    else:
        waiting.future.set_exception(error)
