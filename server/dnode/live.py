"""Held polls, served together: the shared pass of one vnode.

A poll that finds nothing for its topic waits here, in a `LiveHub`, keyed by its topic and
position. When a write makes versions readable, the WAL's notifier calls the hub's
listener (in the writer's thread), which hands the news to the event loop once; the hub
then reads the new entries once, decodes them once, and evaluates every waiting topic
that has one of its tables among them (`Engine.read_topics`), once per topic whatever the
number of its waiting polls. A poll whose topic got rows is answered with them (one wake);
the others do not run at all: their position moves past the entries silently, and they
go on waiting until data for them arrives, their own deadline passes, their consumer's
assignment changes or the server stops. Waiting costs nothing but memory: no thread, no
timer loop, no re-poll (docs/architecture.md, "The shared pass").

A poll the pass cannot serve exactly as `read_message` would (more pending WAL than a
caught-up consumer has, a message over the poll's limits, an error) is told to read for
itself, as a poll that is behind does.

A waiter with a `sink` stands (a follow on a Consume stream, server/dnode/follow.py): the
pass hands it each message through the sink and, while its credit lasts, it stays in its
bucket and moves on with the level, so a caught-up follower costs one sink call per
message and nothing in between: no new poll, no read of its own, no new waiter. Its
deadline answers "quiet" (an empty message that moves its position on) only when entries
passed it by since its last message; otherwise it rearms, so an idle follower sends
nothing at all and costs one timer callback per deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sqltopic.server.common.rwlock import here_or_worker
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import Subscriptions, TopicItem
from sqltopic.server.dnode.poll import FirstMessages, Message, PollLimits, first_message
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.topic.params import topic_of

log = logging.getLogger("sqltopic.server")

# WAL bytes after the waiting polls' position up to which the pass reads on the event
# loop: a few small entries, cheaper there than two hops to a worker and back.
INLINE_PASS_BYTES = 64 << 10
# WAL bytes after the waiting polls' position up to which one pass serves them; beyond,
# they are behind rather than waiting, and each reads for itself in growing steps.
SHARED_PASS_BYTES = 8 << 20
# A standing waiter's timeout at least: it rearms while nothing passes it by, and a
# shorter one (a follow asking 0 ms) would only spin the event loop on its timer.
MIN_STANDING_TIMEOUT_S = 1.0

Outcome = Literal["data", "look", "quiet", "credit"]
Runner = Callable[..., Awaitable[Any]]
# What a sink did with a message: delivered it and stands on ("stay"), delivered it and
# leaves ("leave": its credit is spent), or did not deliver it ("skip": it leaves and
# reads for itself, from where it was).
Verdict = Literal["stay", "leave", "skip"]
Sink = Callable[[Message], Verdict]


@dataclass(eq=False)
class Waiter:
    """One held poll: its topic, consumer and epoch, its limits, and where it is."""

    topic: str
    consumer_id: int
    epoch: int
    limits: PollLimits
    future: asyncio.Future[tuple[Outcome, Message | None]]
    bucket: _Bucket | None = None
    sink: Sink | None = None  # a standing waiter's: the pass delivers through it
    # a standing waiter's catalog generation when its poll last checked it (rights):
    # after a change, it goes back to a poll that checks it again
    generation: int = 0
    # a standing waiter's position after its last message (or where it began): its
    # timeout answers "quiet" only once entries passed it by since (else it rearms)
    since: int = 0
    timer: asyncio.TimerHandle | None = None


@dataclass(eq=False)
class _Level:
    """Every subscription's waiters at one position, by topic then subscription (a
    parameterized topic has one per binding waiting). A pass that finds nothing for a
    subscription leaves its bucket here, and the level moves on as a whole: one update,
    however many topics and polls wait."""

    position: int
    topics: dict[str, Subscriptions] = field(default_factory=dict)  # values: _Buckets

    def get(self, name: str) -> _Bucket | None:
        subs = self.topics.get(topic_of(name))
        return subs.get(name) if subs is not None else None

    def put(self, bucket: _Bucket) -> None:
        topic = topic_of(bucket.topic)
        subs = self.topics.get(topic)
        if subs is None:
            subs = self.topics[topic] = Subscriptions()
        subs[bucket.topic] = bucket
        subs.added()
        bucket.level = self

    def pop(self, bucket: _Bucket) -> None:
        """Take `bucket` out, when it is the one here for its subscription."""
        topic = topic_of(bucket.topic)
        subs = self.topics.get(topic)
        if subs is not None and subs.get(bucket.topic) is bucket:
            del subs[bucket.topic]
            if not subs:
                del self.topics[topic]

    def buckets(self) -> list[_Bucket]:
        return [bucket for subs in self.topics.values() for bucket in subs.values()]


@dataclass(eq=False)
class _Bucket:
    """The waiters of one subscription at one level."""

    topic: str  # the subscription's name
    level: _Level
    waiters: set[Waiter] = field(default_factory=set)


class LiveHub:
    """The held polls of one vnode and its shared pass. Lives on the event loop."""

    def __init__(self, engine: Engine, vnode: Vnode, worker: Runner) -> None:
        self.vnode = vnode
        self._engine = engine
        self._worker = worker
        self._loop = asyncio.get_running_loop()
        self._at: dict[int, _Level] = {}  # position -> the waiters there
        self._kicked = False
        self._draining = False
        # the catalog generation at which no waiting topic was dropped: the waiting
        # topics are checked again only after a change (a thousand may wait)
        self._checked = -1
        self._remove = vnode.wal.notifier.add_listener(self._on_versions)

    def close(self) -> None:
        self._remove()
        self.wake_if(lambda waiter: True)

    def _on_versions(self, next_version: int) -> None:
        """The notifier's listener, in the writer's thread: one hop to the loop per run
        of appends, however many polls wait."""
        if not self._kicked:
            self._kicked = True
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                self._loop.call_soon_threadsafe(self._kick)

    def _kick(self) -> None:
        self._kicked = False
        if not self._draining and self._at:
            self._draining = True
            self._loop.create_task(self._drain())

    async def wait(
        self, topic: str, position: int, consumer_id: int, epoch: int, limits: PollLimits,
        timeout: float, sink: Sink | None = None, generation: int = 0,
    ) -> tuple[Outcome, Message | None, int]:  # fmt: skip
        """Hold a poll of `topic` at `position` until the pass has data for it ("data" and
        the message), it must read for itself ("look"), or `timeout` seconds, a
        reassignment or a stop passed ("quiet"); with the position it has reached. With
        a `sink` the poll stands: messages go to the sink, and the wait ends only when
        the sink leaves ("credit") or as above; and only while the catalog stays at
        `generation` (the one its poll checked it at)."""
        if self.vnode.wal.notifier.next_version > position:
            return "look", None, position  # entries landed since its read
        future: asyncio.Future[tuple[Outcome, Message | None]] = self._loop.create_future()
        waiter = Waiter(
            topic, consumer_id, epoch, limits, future, sink=sink, generation=generation,
            since=position,
        )  # fmt: skip
        self._add(waiter, position)
        if sink is None:
            waiter.timer = self._loop.call_later(max(timeout, 0.0), _settle, future, "quiet", None)
        else:
            self._stand(waiter, timeout)
        try:
            outcome, message = await future
        finally:
            if waiter.timer is not None:
                waiter.timer.cancel()
            reached = waiter.bucket.level.position if waiter.bucket is not None else position
            self._discard(waiter)
        return outcome, message, message.end_offset if message is not None else reached

    def _timed_out(self, waiter: Waiter, timeout: float) -> None:
        """A standing waiter's timeout: "quiet" (an empty message moving its position)
        only if entries passed it by since its last message; else it stands on and
        costs nothing (an idle follower sends nothing at all). Entries written past it
        with no pass to come answer too: its follow then reads them itself."""
        bucket = waiter.bucket
        passing = self._kicked or self._draining  # the pass takes it over what is written
        written = self.vnode.wal.notifier.next_version
        if (
            bucket is not None
            and bucket.level.position <= waiter.since
            and (passing or written <= waiter.since)
        ):
            self._stand(waiter, timeout)
        else:
            _settle(waiter.future, "quiet", None)

    def _stand(self, waiter: Waiter, timeout: float) -> None:
        """Arm a standing waiter's deadline (`_timed_out`), `timeout` s from now."""
        waiter.timer = self._loop.call_later(
            max(timeout, MIN_STANDING_TIMEOUT_S), self._timed_out, waiter, timeout
        )

    def wake_if(self, stale: Callable[[Waiter], bool]) -> None:
        """End the waits that `stale` picks (their consumer's assignment moved, the
        server stops): they answer at once and their poll decides what next."""
        for waiter in self._waiters():
            if stale(waiter):
                _settle(waiter.future, "quiet", None)

    @property
    def idle(self) -> bool:
        """Whether no pass is due or under way (benchmarks wait for it)."""
        return not (self._kicked or self._draining)

    @property
    def waiting(self) -> int:
        return sum(1 for _ in self._waiters())

    def _waiters(self) -> Iterator[Waiter]:
        for level in list(self._at.values()):
            for bucket in level.buckets():
                yield from list(bucket.waiters)

    def _add(self, waiter: Waiter, position: int) -> None:
        level = self._at.get(position)
        if level is None:
            level = self._at[position] = _Level(position)
        bucket = level.get(waiter.topic)
        if bucket is None:
            bucket = _Bucket(waiter.topic, level)
            level.put(bucket)
        bucket.waiters.add(waiter)
        waiter.bucket = bucket

    def _discard(self, waiter: Waiter) -> None:
        bucket = waiter.bucket
        if bucket is None:
            return
        waiter.bucket = None
        bucket.waiters.discard(waiter)
        if bucket.waiters:
            return
        level = bucket.level
        level.pop(bucket)
        if not level.topics and self._at.get(level.position) is level:
            del self._at[level.position]

    async def _drain(self) -> None:
        """Serve every waiting position below the WAL's end, until none is left."""
        try:
            while True:
                end = self.vnode.wal.notifier.next_version
                due = sorted(p for p in self._at if p < end)
                if not due:
                    return
                for position in due:
                    level = self._at.pop(position, None)
                    if level is not None and level.topics:
                        await self._pass(level)
        except Exception:  # the waits must never hang on a failed pass
            log.exception("shared pass failed on vgroup %s", self.vnode.vgroup)
            self.wake_if(lambda waiter: True)
        finally:
            self._draining = False

    async def _pass(self, level: _Level) -> None:
        """One read of the entries after `level.position` for every topic waiting there."""
        position = level.position
        pending = self.vnode.reader().pending_bytes(position)
        if pending > SHARED_PASS_BYTES:
            _release(level.buckets())
            return
        generation = self._engine.generation
        if generation != self._checked:  # the catalog changed: a topic may be gone
            self._checked = generation
            known = self._engine.catalog.topics
            for waiting in (level, *self._at.values()):
                for topic in [t for t in waiting.topics if t not in known]:
                    # dropped: each poll finds out itself
                    _release(list(waiting.topics.pop(topic).values()))
        # the index itself, not a copy (the pass looks up only the topics and
        # subscriptions with rows, one at a time: safe while the loop drops some)
        args = (level.topics, self.vnode.vgroup, position)
        try:
            if pending <= INLINE_PASS_BYTES:
                found, next_version = await here_or_worker(
                    self._engine.lock, self._worker, self._engine.read_topics, *args
                )
            else:
                found, next_version = await self._worker(self._engine.read_topics, *args)
        except Exception:  # each poll reads for itself and answers its own error
            _release(level.buckets())
            return
        made: FirstMessages = {}  # one message (and one framing) for the same items
        sizes: dict[int, int] = {}  # and its size, once
        for name, items in found.items():
            bucket = level.get(name)
            if bucket is not None and self._serve(
                bucket, items, position, next_version, generation, made, sizes
            ):
                level.pop(bucket)
        self._move(level, next_version)

    def _serve(
        self, bucket: _Bucket, items: list[TopicItem], position: int, next_version: int,
        generation: int, made: FirstMessages, sizes: dict[int, int],
    ) -> bool:  # fmt: skip
        """Answer a bucket's waiters with what the pass found for their topic; False
        when it was nothing or standing waiters stay (they go on waiting). `made` and
        `sizes`: the pass's messages so far, and their sizes by identity."""
        try:
            message = first_message(self._engine, bucket.topic, items, position, next_version, made)
        except Exception:
            _release([bucket])
            return True
        if message.kind == "empty":
            return False
        size = sizes.get(id(message))  # once: a hundred may wait, a thousand topics alike
        if size is None:
            size = sizes[id(message)] = _size(message)
        # a standing waiter stays only where the level goes next (not before a meta event)
        whole = message.end_offset == next_version
        gone: list[Waiter] = []  # the waiters leaving (most stand on: nothing to move)
        for waiter in bucket.waiters:
            if waiter.future.done():
                pass  # answered meanwhile (its timer, a wake): it is leaving
            elif not _fits(message, size, waiter.limits):
                _settle(waiter.future, "look", None)
            elif waiter.sink is None:
                _settle(waiter.future, "data", message)
            elif waiter.generation != generation:  # a right may have been revoked
                _settle(waiter.future, "look", None)
            else:
                verdict = waiter.sink(message)
                if verdict == "stay" and whole:
                    waiter.since = next_version
                    continue
                _settle(waiter.future, "look" if verdict == "skip" else "credit", None)
            gone.append(waiter)
        if len(gone) == len(bucket.waiters):
            _detach(bucket)
            return True
        if gone:
            _split(bucket, gone)
        return False

    def _move(self, level: _Level, position: int) -> None:
        """`level`'s waiters now wait at `position`, merged with any already there."""
        if not level.topics:
            return
        there = self._at.get(position)
        if there is None:
            level.position = position
            self._at[position] = level
            return
        for bucket in level.buckets():
            into = there.get(bucket.topic)
            if into is None:
                there.put(bucket)
                continue
            for waiter in bucket.waiters:
                waiter.bucket = into
            into.waiters |= bucket.waiters


def _size(message: Message) -> int:
    """A message's bytes of blocks, as its buffers' whole sizes: a slice counts its
    buffers whole (at most more than its bytes, so a poll is at worst sent to read for
    itself), where `nbytes` costs 50 times more, for every slice."""
    return sum(b.data.get_total_buffer_size() for b in message.blocks)


def _fits(message: Message, size: int, limits: PollLimits) -> bool:
    """Whether `message` (`size` bytes of blocks) is within a poll's limits."""
    if limits.max_rows and message.rows > limits.max_rows:
        return False
    return size <= limits.max_bytes


def _release(buckets: Iterable[_Bucket]) -> None:
    """Tell the buckets' waiters to read for themselves (from where they are)."""
    for bucket in buckets:
        for waiter in bucket.waiters:
            _settle(waiter.future, "look", None)
        _detach(bucket)


def _split(bucket: _Bucket, gone: list[Waiter]) -> None:
    """Move `gone` out of `bucket` to a detached bucket of their own (they are leaving:
    each discards itself when it resumes); the others stay."""
    out = _Bucket(bucket.topic, _Level(bucket.level.position), set(gone))
    for waiter in gone:
        waiter.bucket = out
    bucket.waiters -= out.waiters


def _detach(bucket: _Bucket) -> None:
    """Keep a bucket whose waiters were answered at its level's position, out of the
    level: the level moves on past the entries the pass read, and a waiter that resumes
    after that (its own timer may have answered it "quiet" meanwhile) must not count
    entries that held its rows as read."""
    bucket.level = _Level(bucket.level.position)


def _settle(
    future: asyncio.Future[tuple[Outcome, Message | None]], outcome: Outcome,
    message: Message | None,
) -> None:  # fmt: skip
    with contextlib.suppress(asyncio.InvalidStateError):
        if not future.done():
            future.set_result((outcome, message))
