"""The `Vnode` gRPC service: Poll (with push), Fetch, Consume (many Fetches on one
stream: consume.py), Commit, Committed and OffsetRange; for readers outside groups,
ReadEntries (raw history) and ReadTopic (a topic's rows by version range:
server/dnode/topic_read.py).

Poll and Commit are fenced by the coordinator: only the consumer the current
assignment names, at an epoch it knows, is served. A poll that finds nothing waits on
the vnode's WAL (push) until a write lands, `max_wait_ms` passes, or the server stops.
A read of little pending WAL (a consumer keeping up with its producers) runs on the
event loop: two trips to a worker thread and back cost more than reading a few rows,
and are most of a message's latency. Larger reads, and any read that would wait for
DDL's lock, run on the worker pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypeVar

from sqltopic.errors import (
    ConfigError,
    ConsumerFenced,
    LimitExceeded,
    OffsetOutOfRange,
    TooLarge,
    TopicDropped,
    TopicNotFound,
)
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES
from sqltopic.proto.consume import MORE_HEADER
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.group_names import check_offsets_group
from sqltopic.server.common.rwlock import here_or_worker
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.users import check_consumer_user, check_evict
from sqltopic.server.dnode import topic_read
from sqltopic.server.dnode.commit_groups import CommitGroups
from sqltopic.server.dnode.follow import Follows
from sqltopic.server.dnode.live import LiveHub, Waiter
from sqltopic.server.dnode.poll import (
    DEFAULT_MAX_BYTES,
    Message,
    PollLimits,
    read_message,
    requested_position,
    start_position,
)
from sqltopic.server.dnode.poll_wire import frames_of, limits_of, wait_s, with_names
from sqltopic.server.dnode.share_polls import SharePolls, check_sharer
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.rpc.consume import ConsumeStream
from sqltopic.server.rpc.rpc import RESETS, Context, streaming, unary
from sqltopic.server.rpc.slots import Slots
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.topic.params import topic_of
from sqltopic.wal import WalReader

T = TypeVar("T")

# WAL body bytes a Fetch reads at most: its answer is one frame (`MAX_CHUNK_BYTES`); a
# query topic's rows are rarely bigger as Arrow than in the WAL.
FETCH_MAX_BYTES = MAX_CHUNK_BYTES
# WAL bytes pending after a poll's position up to which its read runs on the event loop
# (at most about 0.2 ms of work: a few small entries through the pyarrow evaluator).
INLINE_READ_BYTES = 64 << 10


@dataclass(frozen=True)
class Executors:
    """Where the service's blocking work runs: reads and the rest, and commits apart."""

    work: Executor
    commits: Executor


# A ReadEntries frame holds at most this many bytes of bodies (one larger entry alone):
# gRPC's default 4 MiB message, so that any client reads it.
READ_ENTRIES_BYTES = 4 << 20
# Entries read from the WAL per step of a ReadEntries call.
READ_ENTRIES_BATCH = 1024
# Look-ups one OffsetsForTimes call may make: every vgroup of many topics, while one
# call's work (O(log n) header reads each) stays a few milliseconds.
MAX_TIME_LOOKUPS = 65_536


class VnodeService(pb_grpc.VnodeServicer):
    def __init__(
        self, engine: Engine, sessions: Sessions, coordinator: Coordinator,
        executors: Executors, stopping: asyncio.Event, slots: Slots,
    ) -> None:  # fmt: skip
        self._engine = engine
        self._sessions = sessions
        self._slots = slots
        self._coordinator = coordinator
        self._executor = executors.work
        self._committer = executors.commits
        self._stopping = stopping
        self._hubs: dict[int, LiveHub] = {}  # vgroup -> its held polls
        self.polls = 0  # polls started since the start (/metrics)
        self._reassign_due = False  # a scan of the held polls is scheduled
        loop = asyncio.get_running_loop()

        def on_change() -> None:
            # a subscribe to many bindings rebalances each: one scan of the held polls
            # after the burst, not one per rebalance
            if not self._reassign_due:
                self._reassign_due = True
                loop.call_soon_threadsafe(self._on_reassign)

        coordinator.listeners.append(on_change)
        self._shares = SharePolls(engine, coordinator, self._run, self._commit_run)
        self._commits = CommitGroups(self._commit_run, engine.now_us)
        self._follows = Follows(
            self._fetch, self._hub_for, coordinator.epoch_of, lambda: engine.generation, stopping
        )
        self._stop_watch = loop.create_task(self._on_stop())

    def _on_reassign(self) -> None:
        """End the held polls whose consumer's assignment moved on (its epoch rose, or
        it left): they answer now, and the consumer learns its new epoch."""

        self._reassign_due = False  # a change from now on schedules another scan
        members = self._coordinator.members  # read without the lock: one dict get each

        def stale(waiter: Waiter) -> bool:
            member = members.get(waiter.consumer_id)
            return member is None or member.epoch > waiter.epoch

        for hub in self._hubs.values():
            hub.wake_if(stale)

    async def _on_stop(self) -> None:
        """At shutdown every held poll answers at once."""
        await self._stopping.wait()
        for hub in self._hubs.values():
            hub.close()
        self._shares.close()

    async def flush(self) -> None:
        """Acknowledgements not on disk yet (shared groups' implicit ones) saved: at a
        graceful stop, once no call runs any more."""
        await self._shares.flush()

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _commit_run(self, fn: Callable[..., T], *args: object) -> T:
        """On the commit pool: a save waiting for the disk holds no reader's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._committer, fn, *args)

    @streaming
    async def Poll(
        self, request: pb.PollRequest, context: Context
    ) -> AsyncIterator[pb.PollResponse]:
        token, session = self._sessions.caller(context.invocation_metadata())
        with self._slots.hold(token, session.user, "Poll"):
            frames = await self._poll(request, wait_s(request, context), session.user)
            for frame in frames:
                yield frame

    @unary
    async def Fetch(self, request: pb.PollRequest, context: Context) -> pb.PollResponse:
        token, session = self._sessions.caller(context.invocation_metadata())
        with self._slots.hold(token, session.user, "Fetch"):
            return await self._fetch(request, wait_s(request, context), session.user)

    # answers serialized already go out as they are (rpc._encoder)
    @streaming
    async def Consume(  # type: ignore[override]
        self, requests: AsyncIterator[pb.ConsumeRequest], context: Context
    ) -> AsyncIterator[pb.ConsumeResponse | bytes]:
        metadata = context.invocation_metadata()
        token, session = self._sessions.caller(metadata)

        def caller(carried: str) -> tuple[str, str]:  # a session ended fails the poll
            if carried:  # a request's own session: a process's consumers share streams
                return carried, self._sessions.named(carried).user
            return token, self._sessions.session(metadata).user

        def slot(session: str, user: str) -> AbstractContextManager[None]:
            return self._slots.hold(session, user, "Consume")

        async def fetch(request: pb.PollRequest, user: str) -> pb.PollResponse:
            return await self._fetch(request, wait_s(request, None), user)

        with self._slots.hold(token, session.user, "Consume"):
            # at once: a client sends requests in `more` only once it read this
            await context.send_initial_metadata(((MORE_HEADER, "1"),))
            stream = ConsumeStream(
                fetch, caller, slot, self._stopping, self._follows.run, self._store_commit
            )
            async for answer in stream.run(requests):
                yield answer

    async def _fetch(self, request: pb.PollRequest, wait: float, user: str) -> pb.PollResponse:
        """A poll answered in one frame (TooLarge for a message of several)."""
        frames = await self._poll(request, wait, user, FETCH_MAX_BYTES)
        if len(frames) > 1:
            raise fetch_too_large(request, frames)
        return frames[0]

    async def _poll(
        self, request: pb.PollRequest, wait: float, user: str,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[pb.PollResponse]:  # fmt: skip
        """The answer's frames, waiting up to `wait` seconds for rows. Each read (and
        its framing) is one step, on the event loop when small (`_soon`), else one trip
        to the worker pool."""
        self.polls += 1
        share = self._shares.settings_of(request.consumer_id, request.group_id)
        if share is not None:  # the checks read the catalog: here unless DDL holds it
            vnode: Vnode = await here_or_worker(
                self._engine.lock, self._run, self._check_poller, request, user
            )
            vnode.poll_times.note(request.topic, request.group_id, self._engine.now_us())
            return await self._shares.poll(request, share, wait, max_bytes, self._stopping)
        self._check_not_sharing(request)
        deadline = time.monotonic() + wait
        fence = (request.consumer_id, request.group_id, request.topic, request.vgroup,
                 request.epoch)  # fmt: skip
        vnode, position, limits, (message, frames) = await self._begin(request, user, max_bytes)
        vnode.poll_times.note(request.topic, request.group_id, self._engine.now_us())
        first = position
        while True:
            epoch = self._coordinator.epoch_of(request.consumer_id)
            frames[0].epoch = epoch
            remaining = deadline - time.monotonic()
            done = remaining <= 0 or self._stopping.is_set() or epoch > request.epoch
            if message.kind != "empty" or done:
                return frames
            outcome, served, position = await self._hub(vnode).wait(
                request.topic, message.end_offset, request.consumer_id, request.epoch,
                limits, remaining,
            )  # fmt: skip
            # the vgroup may have moved while the poll waited: its new owner reads now
            self._coordinator.check_owner(*fence)
            if outcome == "look":
                message, frames = await self._soon(
                    position, vnode.reader(), self._read, vnode, request, limits, position, first
                )
                continue
            if served is None:
                served = Message("empty", position, position)
            message = dataclasses.replace(served, offset=first)
            frames = frames_of(message, with_names(request))

    @property
    def held_polls(self) -> int:
        """Polls waiting for rows now, in every vnode's shared pass."""
        return sum(hub.waiting for hub in list(self._hubs.values()))

    def _check_not_sharing(self, request: pb.PollRequest) -> None:
        """ConfigError for a shared group's fields on the poll of a member of another
        group. A consumer that is no member (removed meanwhile) is not told about the
        fields: the poll goes on to fail with ConsumerFenced, so that it joins again."""
        member = self._coordinator.member(request.consumer_id)
        if member is None or member.group != request.group_id:
            return
        if request.ack_versions or request.ack_indexes:
            raise ConfigError(
                f"PollRequest: ack_versions and ack_indexes are for shared groups; group "
                f"{request.group_id} commits offsets"
            )
        if request.acquire_mode != pb.SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED:
            raise ConfigError(
                f"PollRequest: acquire_mode {request.acquire_mode} is for shared groups; "
                f"group {request.group_id} reads whole WAL entries (leave it unset)"
            )

    def _hub_for(self, request: pb.PollRequest) -> LiveHub:
        """The shared pass of the vnode a follow reads (TopicNotFound once dropped)."""
        return self._hub(self._engine.vnode_of(request.topic, request.vgroup))

    def _hub(self, vnode: Vnode) -> LiveHub:
        """The shared pass of `vnode`'s held polls (a new one for a vnode created again
        under its vgroup id)."""
        hub = self._hubs.get(vnode.vgroup)
        if hub is None or hub.vnode is not vnode:
            if hub is not None:
                hub.close()
            hub = self._hubs[vnode.vgroup] = LiveHub(self._engine, vnode, self._run)
        return hub

    async def _begin(
        self, request: pb.PollRequest, user: str, max_bytes: int
    ) -> tuple[Vnode, int, PollLimits, tuple[Message, list[pb.PollResponse]]]:
        """`_start_and_read`: on the event loop when the poll names its position and
        little WAL follows it there. (Without a position, the committed offset is read
        from the offsets store, which may be busy committing: a worker's job.)"""
        args = (request, user, max_bytes)
        if not request.HasField("position"):
            return await self._run(self._start_and_read, *args)
        try:
            with self._engine.lock.without_waiting():
                reader = self._engine.vnode_of(request.topic, request.vgroup).reader()
        except Exception:  # WouldBlock, or an error the worker raises again for the answer
            return await self._run(self._start_and_read, *args)
        return await self._soon(request.position, reader, self._start_and_read, *args)

    async def _soon(
        self, position: int, reader: WalReader, fn: Callable[..., T], *args: object
    ) -> T:
        """`fn(*args)`, a read from `position`: here on the event loop when at most
        INLINE_READ_BYTES of WAL follow it and no DDL holds the engine's lock, else on a
        worker thread."""
        if reader.pending_bytes(position) <= INLINE_READ_BYTES:
            return await here_or_worker(self._engine.lock, self._run, fn, *args)
        return await self._run(fn, *args)

    def _start_and_read(
        self, request: pb.PollRequest, user: str, max_bytes: int
    ) -> tuple[Vnode, int, PollLimits, tuple[Message, list[pb.PollResponse]]]:
        """`_start` and the first `_read`, in one trip to the worker pool; the read holds
        at most `max_bytes` of WAL bodies besides the request's own bound."""
        vnode, position, limits = self._start(request, user)
        limits = dataclasses.replace(limits, max_bytes=min(limits.max_bytes, max_bytes))
        return vnode, position, limits, self._read(vnode, request, limits, position, position)

    def _check_poller(self, request: pb.PollRequest, user: str) -> Vnode:
        """The vnode a poll reads, once the poller passed fencing and holds the right."""
        topic, group, vgroup = request.topic, request.group_id, request.vgroup
        try:
            vnode = self._engine.vnode_of(topic, vgroup)
        except TopicNotFound:
            member = self._coordinator.member(request.consumer_id)
            if member is not None and topic in member.topics:
                raise TopicDropped(
                    f"topic {topic} was dropped while consumer {member.id} subscribed to "
                    "it: unsubscribe from it"
                ) from None
            raise
        self._coordinator.check_owner(request.consumer_id, group, topic, vgroup, request.epoch)
        self._check_right(request.consumer_id, topic, user)
        return vnode

    def _start(self, request: pb.PollRequest, user: str) -> tuple[Vnode, int, PollLimits]:
        """The vnode, after the fencing check, the position to read from, and the
        request's limits (bad ones fail before any read)."""
        topic, group = request.topic, request.group_id
        vnode = self._check_poller(request, user)
        limits = limits_of(request)
        if request.HasField("position"):
            return vnode, requested_position(vnode, request.position), limits
        reset = RESETS.get(request.auto_offset_reset)
        if reset is None:
            raise ConfigError(f"auto_offset_reset: unknown value {request.auto_offset_reset}")
        return vnode, start_position(vnode, topic, group, reset), limits

    def _check_right(self, consumer_id: int, topic: str, user: str) -> None:
        """NoPermission once the subscriber's user lost the right to consume `topic`
        (REVOKE, DROP USER): checked at every poll, so none reads after the revoke. And
        only the subscriber's own user (or root) may poll as that consumer."""
        member = self._coordinator.member(consumer_id)
        if member is None:
            raise ConsumerFenced(f"consumer {consumer_id} is not a member: subscribe again")
        check_consumer_user(member, user)
        self._engine.check_subscribe(member.user, topic, hide=False)

    def _read(
        self, vnode: Vnode, request: pb.PollRequest, limits: PollLimits, position: int,
        first: int,
    ) -> tuple[Message, list[pb.PollResponse]]:  # fmt: skip
        """The next message from `position`, and its frames unless it is empty (a held
        poll reads again after the next write)."""
        message = read_message(self._engine, vnode, request.topic, position, limits)
        message.offset = first
        return message, frames_of(message, with_names(request))

    @unary
    async def Acknowledge(
        self, request: pb.AcknowledgeRequest, context: Context
    ) -> pb.AcknowledgeResponse:
        user = self._sessions.session(context.invocation_metadata()).user
        check_offsets_group(request.group_id)
        check_sharer(
            self._coordinator.member(request.consumer_id), request.consumer_id,
            request.group_id,
        )  # fmt: skip
        self._coordinator.check_owner(
            request.consumer_id, request.group_id, request.topic, request.vgroup,
            request.epoch,
        )  # fmt: skip
        self._check_right(request.consumer_id, request.topic, user)
        return await self._shares.acknowledge(request)

    @unary
    async def Commit(self, request: pb.CommitRequest, context: Context) -> pb.CommitResponse:
        user = self._sessions.session(context.invocation_metadata()).user
        await self._store_commit(request, user)
        return pb.CommitResponse()

    async def _store_commit(self, request: pb.CommitRequest, user: str) -> None:
        """A Commit, the call's or a Consume stream's: checked here (or on a worker when
        DDL holds the catalog), stored with the commits that arrive meanwhile
        (server/dnode/commit_groups.py)."""
        if request.evict:
            await self._commit_run(self._evict, request, user)
            return
        stores: list[tuple[Vnode, list[tuple[str, str, int]]]] = await here_or_worker(
            self._engine.lock, self._run, self._checked_commit, request, user
        )
        await self._commits.store([(vnode.offsets, rows) for vnode, rows in stores])
        if request.consumer_id:  # the final commit of a vgroup being revoked lets go
            self._coordinator.committed_all(
                request.consumer_id, request.group_id,
                ((item.topic, item.vgroup) for item in request.offsets), request.epoch,
            )  # fmt: skip
            if self._coordinator.unsaved:  # a release: saved before the answer
                await self._commit_run(self._coordinator.persist)

    def _checked_commit(
        self, request: pb.CommitRequest, user: str
    ) -> list[tuple[Vnode, list[tuple[str, str, int]]]]:
        """Check every offset of a commit; its rows per vnode. With `evict`, the group's
        consumers are removed first (`_evict`), so the committer is not checked."""
        group = request.group_id
        check_offsets_group(group)
        if request.evict and request.consumer_id:
            raise ConfigError("evict: only a standalone commit (consumer_id 0) may evict")
        stores: dict[int, tuple[Vnode, list[tuple[str, str, int]]]] = {}
        # a binding's vnode and rights are its topic's: a consumer of many bindings
        # commits hundreds of them at once, each looked up once per topic and vgroup
        vnodes: dict[tuple[str, int], Vnode] = {}
        allowed: set[str] = set()
        for item in request.offsets:
            topic = topic_of(item.topic)
            vnode = vnodes.get((topic, item.vgroup))
            if vnode is None:
                vnode = vnodes[topic, item.vgroup] = self._engine.vnode_of(topic, item.vgroup)
            if not request.evict:
                self._check_committer(request, item.topic, item.vgroup)
            if topic not in allowed:
                self._check_commit_right(request.consumer_id, item.topic, user)
                allowed.add(topic)
            end = vnode.wal.next_version
            if not 1 <= item.offset <= end:
                raise OffsetOutOfRange(
                    f"commit of offset {item.offset} on vgroup {item.vgroup} of topic "
                    f"{item.topic}: valid offsets are 1..{end}",
                    begin=vnode.wal.first_version,
                    end=end,
                )
            stores.setdefault(item.vgroup, (vnode, []))[1].append((item.topic, group, item.offset))
        return list(stores.values())

    def _evict(self, request: pb.CommitRequest, user: str) -> None:
        """A standalone commit with `evict` (on the commit pool): the group's consumers
        removed, with no join possible until the offsets are stored."""
        stores = self._checked_commit(request, user)
        now_us = self._engine.now_us()

        def store() -> None:
            for vnode, rows in stores:
                vnode.offsets.commit(rows, now_us)

        topics = {item.topic for item in request.offsets}
        if self._coordinator.evict(request.group_id, topics, store, lambda m: check_evict(m, user)):
            self._coordinator.persist()

    def _check_commit_right(self, consumer_id: int, topic: str, user: str) -> None:
        """A consumer's offsets are committed by its own user (or root), as it polls; a
        standalone commit needs the right to consume the topic."""
        if consumer_id:
            self._check_right(consumer_id, topic, user)
        else:
            self._engine.check_subscribe(user, topic)

    def _check_committer(self, request: pb.CommitRequest, topic: str, vgroup: int) -> None:
        group = request.group_id
        if request.consumer_id:
            self._coordinator.check_owner(
                request.consumer_id, group, topic, vgroup, request.epoch, commit=True
            )
        elif self._coordinator.held(group, topic, vgroup):
            raise ConsumerFenced(
                f"group {group} has a live consumer on vgroup {vgroup} of topic {topic}: a "
                "standalone commit (consumer_id 0) needs the group idle there"
            )
        elif self._engine.vnode_of(topic, vgroup).shares.opened(topic, group):
            raise ConfigError(
                f"group {group} is a shared group on vgroup {vgroup} of topic {topic}: its "
                "progress is its acknowledgements, which a commit of offsets cannot move"
            )

    @unary
    async def Committed(
        self, request: pb.CommittedRequest, context: Context
    ) -> pb.CommittedResponse:
        user = self._sessions.session(context.invocation_metadata()).user
        offsets = await self._run(self._committed, request, user)
        return pb.CommittedResponse(offsets=offsets)

    def _committed(self, request: pb.CommittedRequest, user: str) -> list[pb.CommittedOffset]:
        check_offsets_group(request.group_id)
        found = []
        for item in request.vgroups:
            self._engine.check_subscribe(user, item.topic)
            vnode = self._engine.vnode_of(item.topic, item.vgroup)
            answer = pb.CommittedOffset(topic=item.topic, vgroup=item.vgroup)
            offset = vnode.offsets.get(item.topic, request.group_id)
            if offset is not None:
                answer.offset = offset
                answer.lag_rows, answer.lag_ms = vnode.lag(offset, self._engine.now_us())
                at = vnode.offsets.committed_at(item.topic, request.group_id)
                if at is not None:
                    answer.committed_ms = at // 1000
            found.append(answer)
        return found

    @unary
    async def OffsetRange(
        self, request: pb.OffsetRangeRequest, context: Context
    ) -> pb.OffsetRangeResponse:
        user = self._sessions.session(context.invocation_metadata()).user
        ranges = await self._run(self._ranges, request, user)
        return pb.OffsetRangeResponse(ranges=ranges)

    def _ranges(self, request: pb.OffsetRangeRequest, user: str) -> list[pb.VgroupRange]:
        positions = check_positions(request)
        ranges = []
        for item, position in zip(request.vgroups, positions, strict=True):
            self._engine.check_subscribe(user, item.topic)
            vnode = self._engine.vnode_of(item.topic, item.vgroup)
            wal = vnode.wal
            answer = pb.VgroupRange(
                topic=item.topic, vgroup=item.vgroup, begin=wal.first_version,
                end=wal.next_version,
            )  # fmt: skip
            if position >= 0:
                answer.lag_rows, answer.lag_ms = vnode.lag(position, self._engine.now_us())
            ranges.append(answer)
        return ranges

    @unary
    async def OffsetsForTimes(
        self, request: pb.OffsetsForTimesRequest, context: Context
    ) -> pb.OffsetsForTimesResponse:
        user = self._sessions.session(context.invocation_metadata()).user
        check_lookups(request)
        offsets = await self._run(self._times, request, user)
        return pb.OffsetsForTimesResponse(offsets=offsets)

    def _times(self, request: pb.OffsetsForTimesRequest, user: str) -> list[pb.VgroupTimeOffset]:
        out = []
        for item in request.vgroups:
            self._engine.check_subscribe(user, item.topic)
            # (on a cluster's mnode, a vgroup of a dnode is VgroupUnavailable: ask there)
            reader = self._engine.vnode_of(item.topic, item.vgroup).reader()
            offset = reader.version_at(item.time_ms * 1000)
            state = reader.state()  # after: the answer's end is at or above its offset
            out.append(
                pb.VgroupTimeOffset(
                    topic=item.topic, vgroup=item.vgroup, offset=offset,
                    begin=state.first_version, end=state.next_version,
                )
            )  # fmt: skip
        return out

    @streaming
    async def ReadEntries(
        self, request: pb.ReadEntriesRequest, context: Context
    ) -> AsyncIterator[pb.ReadEntriesResponse]:
        user = self._sessions.session(context.invocation_metadata()).user
        vnode = await self._run(
            self._engine.history_vnode, user, request.topic, request.database, request.vgroup
        )
        version = request.from_version
        end = request.to_version or vnode.wal.next_version
        while version < end:
            frame, version = await self._run(_entries_frame, vnode, version, end)
            if not frame.entries:
                return
            yield frame

    @streaming
    async def ReadTopic(
        self, request: pb.ReadTopicRequest, context: Context
    ) -> AsyncIterator[pb.ReadTopicResponse]:
        user = self._sessions.session(context.invocation_metadata()).user
        topic_read.check_request(request)
        span = await self._run(topic_read.plan, self._engine, user, request)
        version = span.start
        while version < span.end:
            frames, version = await self._run(
                topic_read.step, self._engine, request.topic, request.vgroup, version, span.end
            )
            for frame in frames:
                yield frame


def check_positions(request: pb.OffsetRangeRequest) -> list[int]:
    """The position of each vgroup asked (-1: none given); ConfigError for a list of
    another length or a position below -1."""
    given = list(request.positions)
    if not given:
        return [-1] * len(request.vgroups)
    if len(given) != len(request.vgroups):
        raise ConfigError(
            f"OffsetRange: {len(given)} positions for {len(request.vgroups)} vgroups; give "
            "one per vgroup (-1 for none), or none at all"
        )
    for item, position in zip(request.vgroups, given, strict=True):
        if position < -1:
            raise ConfigError(
                f"OffsetRange: position {position} of topic {item.topic} vgroup "
                f"{item.vgroup} is below -1; give a version, or -1 for none"
            )
    return given


def check_lookups(request: pb.OffsetsForTimesRequest) -> None:
    """LimitExceeded for too many look-ups in one call, ConfigError for a time before
    the epoch."""
    if len(request.vgroups) > MAX_TIME_LOOKUPS:
        raise LimitExceeded(
            f"OffsetsForTimes: {len(request.vgroups)} look-ups in one call; at most "
            f"{MAX_TIME_LOOKUPS} are allowed (MAX_TIME_LOOKUPS): split the request"
        )
    for item in request.vgroups:
        if item.time_ms < 0:
            raise ConfigError(
                f"OffsetsForTimes: time_ms {item.time_ms} of topic {item.topic} vgroup "
                f"{item.vgroup} is before the epoch; give milliseconds since 1970-01-01 UTC"
            )


def _entries_frame(vnode: Vnode, version: int, end: int) -> tuple[pb.ReadEntriesResponse, int]:
    """Entries from `version` up to `end` (excluded), at most READ_ENTRIES_BYTES of them
    (or one larger entry), and the version after them."""
    frame, size = pb.ReadEntriesResponse(), 0
    for record in vnode.reader().read(version, max_entries=READ_ENTRIES_BATCH):
        if record.version >= end or (
            frame.entries and size + len(record.body) > READ_ENTRIES_BYTES
        ):
            break
        frame.entries.append(pb.RawEntry(
            version=record.version, entry_type=int(record.entry_type),
            ingest_us=record.ingest_us, body=bytes(record.body),
        ))  # fmt: skip
        size += len(record.body)
        version = record.version + 1
    return frame, version


def fetch_too_large(request: pb.PollRequest, frames: list[pb.PollResponse]) -> TooLarge:
    """Fetch's refusal of a message of several frames, naming the version the message
    starts at: a poll without a position read from the committed offset (or the reset
    policy), which `request.position` (0 then) does not say."""
    kind = frames[0].WhichOneof("message")
    start = getattr(frames[0], kind).offset if kind else request.position
    return TooLarge(
        f"Fetch: the message from version {start} of topic {request.topic} vgroup "
        f"{request.vgroup} needs {len(frames)} frames; a unary answer holds one: poll it "
        "with Poll"
    )
