"""Polls and acknowledgements of shared groups, on the vnodes.

Every consumer of a shared group polls every vgroup of its topics (the coordinator gives
each all of them). A poll here leases rows to its consumer from the vgroup's window for
the group (server/share_windows.py): rows to deliver again first (nacked, their lease
expired, their consumer gone), else rows read on from the window's end, up to the poll's
`max_rows` (`DEFAULT_LEASE_ROWS` without one) and as long as the window has room. Each
row goes out with its id and its delivery count. A poll that finds nothing waits until a
write lands, a row becomes available again or a lease runs out, whichever comes first,
or its own deadline. `Acknowledge` settles leased rows: accepted rows are done (on disk
before the answer), released ones are available again at once.

Leases end when their consumer leaves the group or stops reading a topic (the
coordinator's `departures`), or at their deadline, which polls check as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from sqltopic.errors import ConfigError, ConsumerFenced, Error, TooLarge, VersionNotRetained
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.coordinator import Coordinator, Member
from sqltopic.server.dead_letters import DeadLetters
from sqltopic.server.engine import Engine
from sqltopic.server.group_names import shares
from sqltopic.server.poll import Message
from sqltopic.server.poll_wire import frames_of, with_names
from sqltopic.server.rwlock import WouldBlock, here_or_worker
from sqltopic.server.share_settings import ShareSettings
from sqltopic.server.share_window import RowId
from sqltopic.server.share_windows import ShareWindows
from sqltopic.server.topic_reader import TopicBlock
from sqltopic.server.tracked_reader import TrackedBlock, read_rows, read_tracked, table_of
from sqltopic.server.vnode import Vnode
from sqltopic.sql.topic.params import topic_of

log = logging.getLogger("sqltopic.server")

Runner = Callable[..., Awaitable[Any]]
# A lease: the message, its rows' ids and delivery counts (in row order).
Leased = tuple[Message, list[RowId], list[int]]

# Rows one lease hands out when the poll sets no max_rows (Kafka's max.poll.records):
# small enough that the group's consumers share a vgroup's rows evenly.
DEFAULT_LEASE_ROWS = 500
# Rows one Acknowledge may name: a window holds at most 10,000 by default, so a larger
# request is a mistake, and this bounds what one call makes the vnode look at.
MAX_ACK_ROWS = 1_000_000
# Rows a lease may ask for and still be read on the event loop (a few ms of work at
# most: cheaper there than two hops to a worker and back); larger leases use a worker.
INLINE_ROWS = 2_000
# Reads from the window's end in one lease that find no row of the topic, at most: a
# poll answers empty then (and waits), rather than scanning the whole WAL in one go.
MAX_EMPTY_READS = 8


@dataclass
class _Vnode:
    """A vnode's shared windows, and the event its waiting polls wait on."""

    vnode: Vnode
    changed: asyncio.Event
    remove: Callable[[], None]
    kicked: bool = False

    @property
    def windows(self) -> ShareWindows:
        return self.vnode.shares


class SharePolls:
    """Shared groups' polls and acknowledgements over the engine's vnodes. Lives on the
    event loop; reads run through `run` (the worker pool)."""

    def __init__(
        self, engine: Engine, coordinator: Coordinator, run: Runner, save: Runner,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._engine = engine
        self._coordinator = coordinator
        self._run = run
        self._save = save  # where saves run: apart from reads, as commits do
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._vnodes: dict[int, _Vnode] = {}
        self._dead = DeadLetters(engine)
        self._saves: set[asyncio.Future[Any]] = set()  # piggybacked acks being saved
        coordinator.departures.append(self._on_departure)

    def close(self) -> None:
        """Every waiting poll answers now."""
        for entry in self._vnodes.values():
            entry.remove()
            entry.changed.set()

    def sharer(self, consumer_id: int, group: str) -> Member | None:
        """The member, when it polls as a consumer of a shared group."""
        member = self._coordinator.member(consumer_id)
        if member is not None and member.group == group and shares(member.mode):
            return member
        return None

    async def poll(
        self, request: pb.PollRequest, wait: float, max_bytes: int, stopping: asyncio.Event
    ) -> list[pb.PollResponse]:
        """Rows leased to the polling consumer, as frames; empty after `wait` seconds
        without any. The caller checked who polls (fencing and rights)."""
        deadline = self._clock() + wait
        entry = self._entry(self._engine.vnode_of(request.topic, request.vgroup))
        member = self.sharer(request.consumer_id, request.group_id)
        settings = member.share if member is not None else None
        if settings is None:  # it left meanwhile
            raise ConsumerFenced(f"consumer {request.consumer_id} is not a member: subscribe again")
        if not entry.windows.reopen(request.topic, request.group_id, settings.max_deliveries):
            await self._run(self._open, entry, request, settings)  # may read the offsets file
        self._accept_piggybacked(entry, request)
        lock = self._engine.state.lock
        while True:
            changed = entry.changed
            args = (entry, request, max_bytes, settings)
            message = await here_or_worker(lock, self._run, self._lease, *args)
            epoch = self._epoch(request.consumer_id)
            now = self._clock()
            if message is not None:
                frames = frames_of(message[0], with_names(request))
                _with_ids(frames[0].data, message[1], message[2])
                frames[0].epoch = epoch
                return frames
            if now >= deadline or stopping.is_set() or epoch != request.epoch:
                end = self._engine.vnode_of(request.topic, request.vgroup).wal.next_version
                frames = frames_of(Message("empty", end, end), False)
                frames[0].epoch = epoch
                return frames
            until = min(deadline, entry.windows.next_deadline() or deadline)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(until - now, 0.0))
            self._coordinator.check_owner(
                request.consumer_id, request.group_id, request.topic, request.vgroup,
                request.epoch,
            )  # fmt: skip

    def _accept_piggybacked(self, entry: _Vnode, request: pb.PollRequest) -> None:
        """The rows the poll accepts (implicit acknowledgement): done now, saved soon on
        a worker (saves of a window group together and never go back)."""
        ids = checked_ids("PollRequest", request.ack_versions, request.ack_indexes)
        if not ids:
            return
        save = entry.windows.accept(request.topic, request.group_id, request.consumer_id, ids)
        if save is not None:
            task = asyncio.ensure_future(self._save(save))
            self._saves.add(task)
            task.add_done_callback(self._saved)

    def _saved(self, task: asyncio.Future[Any]) -> None:
        self._saves.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("saving piggybacked acknowledgements failed: %s", task.exception())

    async def acknowledge(self, request: pb.AcknowledgeRequest) -> pb.AcknowledgeResponse:
        """Settle rows leased to the consumer. The caller checked who calls."""
        ids = _ids_of(request)
        entry = self._entry(self._engine.vnode_of(request.topic, request.vgroup))
        windows, topic, group = entry.windows, request.topic, request.group_id
        if not windows.opened(topic, group):
            return pb.AcknowledgeResponse(settled=0, not_held=len(ids))
        if request.type == pb.ACK_TYPE_ACCEPT:
            done = await self._save(windows.ack, topic, group, request.consumer_id, ids)
        else:
            done = windows.nack(topic, group, request.consumer_id, ids)
            if done:
                self._kick(entry)
        return pb.AcknowledgeResponse(settled=len(done), not_held=len(ids) - len(done))

    def _epoch(self, consumer_id: int) -> int:
        member = self._coordinator.member(consumer_id)
        return member.epoch if member is not None else 0

    def _entry(self, vnode: Vnode) -> _Vnode:
        """The vnode's windows (new ones for a vnode created again under its id)."""
        entry = self._vnodes.get(vnode.vgroup)
        if entry is None or entry.vnode is not vnode:
            if entry is not None:
                entry.remove()
            entry = _Vnode(vnode, asyncio.Event(), lambda: None)
            listener = self._listener(entry)
            entry.remove = vnode.wal.notifier.add_listener(listener)
            self._vnodes[vnode.vgroup] = entry
        return entry

    def _listener(self, entry: _Vnode) -> Callable[[int], None]:
        def on_versions(next_version: int) -> None:  # the writer's thread
            if not entry.kicked:
                entry.kicked = True
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    self._loop.call_soon_threadsafe(self._kick, entry)

        return on_versions

    def _kick(self, entry: _Vnode) -> None:
        """Wake the vnode's waiting polls: they look again."""
        entry.kicked = False
        entry.changed.set()
        entry.changed = asyncio.Event()

    def _on_departure(self, consumer_id: int, topics: tuple[str, ...] | None) -> None:
        """A sharing consumer left (or stopped reading `topics`): its leases end."""
        for entry in list(self._vnodes.values()):
            if entry.windows.release(consumer_id, topics):
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._kick, entry)

    # --- on a worker thread -----------------------------------------------------------

    def _give_up(
        self, request: pb.PollRequest, settings: ShareSettings, dead: dict[RowId, int]
    ) -> None:
        """Rows out of deliveries go to the dead-letter table (or are dropped) and are
        done; when the table cannot take them they are tried again later."""
        windows = self._vnodes[request.vgroup].windows
        topic, group = request.topic, request.group_id
        target = settings.dead_letter_table
        try:
            if target is not None:
                with self._engine.state.lock.shared():
                    blocks, _gone = read_rows(self._engine.state, topic, request.vgroup, dead)
                self._dead.write(target, topic, group, request.vgroup, blocks, dead)
        except Error as exc:
            windows.unbury(topic, group, dead)
            log.warning(
                "dead-lettering %d rows of topic %s vgroup %d for group %s into %s failed "
                "(tried again later): %s", len(dead), topic, request.vgroup, group,
                ".".join(target or ()), exc,
            )  # fmt: skip
            return
        windows.bury(topic, group, dead)

    def _open(self, entry: _Vnode, request: pb.PollRequest, settings: ShareSettings) -> None:
        vnode = entry.vnode

        def start() -> int:  # a group new here starts where auto.offset.reset says
            latest = request.auto_offset_reset == pb.OFFSET_RESET_LATEST
            return vnode.wal.next_version if latest else vnode.wal.first_version

        entry.windows.open(request.topic, request.group_id, start, settings.max_deliveries)

    def _lease(
        self, entry: _Vnode, request: pb.PollRequest, max_bytes: int, settings: ShareSettings
    ) -> Leased | None:
        """Rows leased to the poll's consumer (message, ids, delivery counts), or None:
        rows waiting to be delivered (again) first, else rows read on from the window's
        end, one reader at a time (the waiting rows are looked at again once it is this
        poll's turn: the reader before may have left some). Runs on the event loop in
        the engine lock's no-wait mode (`here_or_worker`), where it raises WouldBlock only
        where what it did so far stands (expiry, dropping rows gone) or before anything;
        a group with max.deliveries always runs on a worker, as dead-lettering writes."""
        state = self._engine.state
        wanted = request.max_rows or DEFAULT_LEASE_ROWS
        if state.lock.no_wait and (settings.max_deliveries is not None or wanted > INLINE_ROWS):
            raise WouldBlock
        dead: dict[RowId, int] = {}
        with state.lock.shared():
            leased = self._lease_locked(entry, request, max_bytes, settings, dead)
        if dead:  # outside the engine's lock: creating the table takes it
            self._give_up(request, settings, dead)
        return leased

    def _lease_locked(
        self, entry: _Vnode, request: pb.PollRequest, max_bytes: int, settings: ShareSettings,
        dead: dict[RowId, int],
    ) -> Leased | None:  # fmt: skip
        windows, topic, group = entry.windows, request.topic, request.group_id
        now = self._clock()
        windows.expire(now)
        until = now + settings.lease_s
        wanted = request.max_rows or DEFAULT_LEASE_ROWS
        lease = _Lease(until, wanted, self._eligible(entry, request))
        leased = self._redeliver(entry, request, lease, dead)
        if leased is not None:
            return leased
        reading = windows.reading(topic, group)
        if not reading.acquire(blocking=not self._engine.state.lock.no_wait):
            raise WouldBlock  # another poll reads on: wait for it on a worker
        try:
            leased = self._redeliver(entry, request, lease, dead)
            if leased is not None:
                return leased
            return self._read_on(entry, request, max_bytes, lease)
        finally:
            reading.release()

    def _eligible(self, entry: _Vnode, request: pb.PollRequest) -> Callable[[str], bool] | None:
        """In a key_shared group, the keys the polling consumer may take now: those the
        group's members hash to it (rendezvous hashing: a key moves only when members
        come or go) that no other member holds leased rows of (a moved key waits for its
        old holder's leases to end). None in a shared group: any row."""
        member = self._coordinator.member(request.consumer_id)
        if member is None or member.mode != "key_shared":
            return None
        me = request.consumer_id
        subscribers = self._coordinator.subscribers(topic_of(request.topic), member.group)
        members = [m.id for m in subscribers]
        holders = entry.windows.key_holders(request.topic, request.group_id)
        owners: dict[str, int] = {}

        def eligible(key: str) -> bool:
            owner = owners.get(key)
            if owner is None:
                owner = owners[key] = max(members or [me], key=lambda m: _weight(key, m))
            return owner == me and holders.get(key, set()) <= {me}

        return eligible

    def _redeliver(
        self, entry: _Vnode, request: pb.PollRequest, lease: _Lease, dead: dict[RowId, int]
    ) -> Leased | None:
        """Rows waiting to be delivered (again), leased; rows out of deliveries go to
        `dead` (held for dead-lettering)."""
        windows, topic, group = entry.windows, request.topic, request.group_id
        consumer = request.consumer_id
        again, out = windows.acquire(
            topic, group, consumer, lease.until, lease.rows, lease.eligible
        )
        dead.update(out)
        if not again:
            return None
        ids = [rid for rid, _ in again]
        first = entry.vnode.wal.first_version
        lost = [rid for rid in ids if rid[0] < first]  # retention deleted their writes
        kept = [rid for rid in ids if rid[0] >= first]
        try:
            blocks, gone = read_rows(self._engine.state, topic, request.vgroup, kept)
        except VersionNotRetained:  # deleted just now: the next poll drops them
            windows.nack(topic, group, consumer, ids)
            return None
        if gone or lost:
            windows.ack(topic, group, consumer, lost + gone)  # nothing left to deliver
        return _message(blocks, dict(again)) if blocks else None

    def _read_on(
        self, entry: _Vnode, request: pb.PollRequest, max_bytes: int, lease: _Lease
    ) -> Leased | None:
        """Rows read on from the window's end, leased; rows of an entry beyond the lease
        wait for the next poll (the polls waiting are woken for them)."""
        windows, topic, group = entry.windows, request.topic, request.group_id
        consumer, vgroup, state = request.consumer_id, request.vgroup, self._engine.state
        wal = entry.vnode.wal
        until, wanted = lease.until, lease.rows
        for _ in range(MAX_EMPTY_READS):
            at, room = windows.frontier(topic, group)
            if room <= 0 or at >= wal.next_version:
                return None
            try:
                blocks, after = read_tracked(state, topic, vgroup, at, min(room, wanted), max_bytes)
            except VersionNotRetained:  # retention went past the window: go on there
                windows.admit(topic, group, [], wal.first_version, consumer, until)
                continue
            ids = [rid for block in blocks for rid in block.ids()]
            key_of = table_of(blocks) if lease.eligible is not None else None
            leased = windows.admit(
                topic, group, ids, after, consumer, until, wanted, key_of, lease.eligible
            )
            if len(leased) < len(ids):
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._kick, entry)
            if leased:
                mine = set(leased)
                kept = [k for b in blocks if (k := _keep(b, mine)) is not None]
                return _message(kept, dict.fromkeys(leased, 1))
        return None


@dataclass(frozen=True)
class _Lease:
    """One poll's lease: until when, how many rows, which keys (key_shared)."""

    until: float
    rows: int
    eligible: Callable[[str], bool] | None


def _weight(key: str, member: int) -> int:
    """Rendezvous hashing's weight of `member` for `key` (stable across processes; a
    mixing hash: CRC32's is linear, so one member would win every key)."""
    return xxhash.xxh64_intdigest(f"{key}\x00{member}".encode())


def _keep(block: TrackedBlock, mine: set[RowId]) -> TrackedBlock | None:
    """`block` with only the rows in `mine` (rows acknowledged before a restart are
    read again but not delivered); None when none is left."""
    ids = block.ids()
    if all(rid in mine for rid in ids):
        return block
    keep = pa.array([rid in mine for rid in ids], pa.bool_())
    if not pc.any(keep).as_py():
        return None
    data = block.block
    return TrackedBlock(
        TopicBlock(data.table_name, data.data.filter(keep), data.first_version,
                   data.last_version),
        block.versions.filter(keep), block.indexes.filter(keep), block.tables,
    )  # fmt: skip


def _message(blocks: list[TrackedBlock], counts: dict[RowId, int]) -> Leased:
    """A data message of the blocks, with its rows' ids and delivery counts in row order."""
    ids = [rid for block in blocks for rid in block.ids()]
    first = min(v for v, _ in ids)
    last = max(v for v, _ in ids)
    message = Message("data", first, last + 1, [b.block for b in blocks])
    return message, ids, [counts[rid] for rid in ids]


def _with_ids(data: pb.DataMessage, ids: list[RowId], counts: list[int]) -> None:
    data.row_versions.extend(v for v, _ in ids)
    data.row_indexes.extend(i for _, i in ids)
    data.delivery_counts.extend(counts)


def _ids_of(request: pb.AcknowledgeRequest) -> list[RowId]:
    """The request's row ids, checked: ConfigError or TooLarge, naming the field."""
    if request.type not in (pb.ACK_TYPE_ACCEPT, pb.ACK_TYPE_RELEASE):
        raise ConfigError(
            f"Acknowledge: type {request.type} is not ACK_TYPE_ACCEPT (1) or ACK_TYPE_RELEASE (2)"
        )
    return checked_ids("Acknowledge", request.versions, request.indexes)


def checked_ids(what: str, versions: Sequence[int], indexes: Sequence[int]) -> list[RowId]:
    """Row ids from their two lists: ConfigError when their lengths differ, TooLarge
    past MAX_ACK_ROWS."""
    if len(versions) != len(indexes):
        raise ConfigError(
            f"{what}: {len(versions)} versions but {len(indexes)} indexes; give one "
            "(version, index) pair per row"
        )
    if len(versions) > MAX_ACK_ROWS:
        raise TooLarge(
            f"{what}: {len(versions):,} rows, above the limit of {MAX_ACK_ROWS:,} per "
            "call; split them"
        )
    return list(zip(versions, indexes, strict=True))


def check_sharer(member: Member | None, consumer_id: int, group: str) -> Member:
    """ConsumerFenced unless the caller is a member of shared group `group`."""
    if member is None or member.group != group:
        raise ConsumerFenced(
            f"consumer {consumer_id} is not a member of group {group}: subscribe again"
        )
    if not shares(member.mode):
        raise ConfigError(
            f"consumer group {group} is {member.mode}: only shared groups acknowledge "
            "rows; commit offsets instead"
        )
    return member
