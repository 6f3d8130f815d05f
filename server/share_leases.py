"""Leasing a shared group's rows on one vnode (the work of a shared poll, without its
waiting: server/share_polls.py).

A lease takes rows waiting to be delivered (again) first: released, their lease run
out, their consumer gone, or left over by a read whose entry held more rows than its
lease. Else it reads on from the window's end (one reader of a window at a time) and
admits what it read: its own rows leased, the rest waiting. Each leased row goes out
with its id and delivery count. In a key_shared group a consumer takes only rows of
its keys (`_eligible`). Rows out of deliveries are dead-lettered (`DeadLetters`) before
they count as done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from sqltopic.errors import Error, VersionNotRetained
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.coordinator import Coordinator
from sqltopic.server.dead_letters import DeadLetters
from sqltopic.server.engine import Engine
from sqltopic.server.poll import Message
from sqltopic.server.rwlock import WouldBlock
from sqltopic.server.share_settings import ShareSettings
from sqltopic.server.share_window import RowId
from sqltopic.server.topic_reader import TopicBlock
from sqltopic.server.tracked_reader import TrackedBlock, read_rows, read_tracked, table_of
from sqltopic.server.vnode import Vnode
from sqltopic.sql.topic.params import topic_of

log = logging.getLogger("sqltopic.server")

# A lease: the message, its rows' ids and delivery counts (in row order).
Leased = tuple[Message, list[RowId], list[int]]

# Rows one lease hands out when the poll sets no max_rows (Kafka's max.poll.records):
# small enough that the group's consumers share a vgroup's rows evenly.
DEFAULT_LEASE_ROWS = 500
# Rows a lease may ask for and still be read on the event loop (a few ms of work at
# most: cheaper there than two hops to a worker and back); larger leases use a worker.
INLINE_ROWS = 2_000
# Reads from the window's end in one lease that find no row of the topic, at most: a
# poll answers empty then (and waits), rather than scanning the whole WAL in one go.
MAX_EMPTY_READS = 8


class Leaser:
    """Leases rows of the engine's vnodes to the consumers of shared groups."""

    def __init__(
        self, engine: Engine, coordinator: Coordinator,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._engine = engine
        self._coordinator = coordinator
        self._clock = clock
        self._dead = DeadLetters(engine)

    def lease(
        self, vnode: Vnode, request: pb.PollRequest, max_bytes: int, settings: ShareSettings,
        wake: Callable[[], None],
    ) -> Leased | None:  # fmt: skip
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
            leased = self._locked(vnode, request, max_bytes, settings, wanted, dead, wake)
        if dead:  # outside the engine's lock: creating the table takes it
            self._give_up(vnode, request, settings, dead)
        return leased

    def _locked(
        self, vnode: Vnode, request: pb.PollRequest, max_bytes: int, settings: ShareSettings,
        wanted: int, dead: dict[RowId, int], wake: Callable[[], None],
    ) -> Leased | None:  # fmt: skip
        windows, topic, group = vnode.shares, request.topic, request.group_id
        now = self._clock()
        windows.expire(now)
        lease = Lease(now + settings.lease_s, wanted, self._eligible(vnode, request))
        leased = self._redeliver(vnode, request, lease, dead)
        if leased is not None:
            return leased
        reading = windows.reading(topic, group)
        if not reading.acquire(blocking=not self._engine.state.lock.no_wait):
            raise WouldBlock  # another poll reads on: wait for it on a worker
        try:
            leased = self._redeliver(vnode, request, lease, dead)
            if leased is not None:
                return leased
            return self._read_on(vnode, request, max_bytes, lease, wake)
        finally:
            reading.release()

    def _eligible(self, vnode: Vnode, request: pb.PollRequest) -> Callable[[str], bool] | None:
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
        holders = vnode.shares.key_holders(request.topic, request.group_id)
        owners: dict[str, int] = {}

        def eligible(key: str) -> bool:
            owner = owners.get(key)
            if owner is None:
                owner = owners[key] = max(members or [me], key=lambda m: _weight(key, m))
            return owner == me and holders.get(key, set()) <= {me}

        return eligible

    def _redeliver(
        self, vnode: Vnode, request: pb.PollRequest, lease: Lease, dead: dict[RowId, int]
    ) -> Leased | None:
        """Rows waiting to be delivered (again), leased; rows out of deliveries go to
        `dead` (held for dead-lettering)."""
        windows, topic, group = vnode.shares, request.topic, request.group_id
        consumer = request.consumer_id
        again, out = windows.acquire(
            topic, group, consumer, lease.until, lease.rows, lease.eligible
        )
        dead.update(out)
        if not again:
            return None
        ids = [rid for rid, _ in again]
        first = vnode.wal.first_version
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
        self, vnode: Vnode, request: pb.PollRequest, max_bytes: int, lease: Lease,
        wake: Callable[[], None],
    ) -> Leased | None:  # fmt: skip
        """Rows read on from the window's end, leased; rows of an entry beyond the lease
        wait for the next poll (the polls waiting are woken for them)."""
        windows, topic, group = vnode.shares, request.topic, request.group_id
        consumer, vgroup, state = request.consumer_id, request.vgroup, self._engine.state
        wal = vnode.wal
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
                wake()  # for the rows left waiting
            if leased:
                mine = set(leased)
                kept = [k for b in blocks if (k := _keep(b, mine)) is not None]
                return _message(kept, dict.fromkeys(leased, 1))
        return None

    def _give_up(
        self, vnode: Vnode, request: pb.PollRequest, settings: ShareSettings, dead: dict[RowId, int]
    ) -> None:
        """Rows out of deliveries go to the dead-letter table (or are dropped) and are
        done; when the table cannot take them they are tried again later."""
        windows = vnode.shares
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


@dataclass(frozen=True)
class Lease:
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
