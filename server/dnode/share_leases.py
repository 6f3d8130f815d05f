"""Leasing a shared group's rows on one vnode (the work of a shared poll, without its
waiting: server/dnode/share_polls.py).

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

import pyarrow.compute as pc
import xxhash

from sqltopic.errors import ConfigError, Error, VersionNotRetained
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.common.rwlock import WouldBlock
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.tracked_reader import (
    TrackedBlock,
    filtered,
    within,
)
from sqltopic.server.dnode.dead_letters import DeadLetters
from sqltopic.server.dnode.poll import Message
from sqltopic.server.dnode.share_keys import KeySource, key_pieces, key_source
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.share_settings import ShareSettings
from sqltopic.server.vnode.share_window import KeyPieces, Run, cut, rows_of
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.topic.params import topic_of

log = logging.getLogger("sqltopic.server")

# A lease: the message, and its rows as runs with their delivery count, in row order
# (what DataMessage's ids carry: server/vnode/row_runs.py's `encode_ids`).
Leased = tuple[Message, list[tuple[Run, int]]]

# Rows one lease hands out when the poll sets no max_rows (Kafka's max.poll.records):
# small enough that the group's consumers share a vgroup's rows evenly.
DEFAULT_LEASE_ROWS = 500
# Rows a lease may ask for and still be read on the event loop (a few ms of work at
# most: cheaper there than two hops to a worker and back); larger leases use a worker.
INLINE_ROWS = 2_000
# WAL bodies a lease may read on from the window's end on the event loop, for the same
# reason: a larger entry is decoded on a worker.
INLINE_BYTES = 256 << 10
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
        lock = self._engine.lock
        wanted = request.max_rows or DEFAULT_LEASE_ROWS
        if lock.no_wait and (settings.max_deliveries is not None or wanted > INLINE_ROWS):
            raise WouldBlock
        dead: list[tuple[Run, int]] = []
        with lock.shared():
            leased = self._locked(vnode, request, max_bytes, settings, wanted, dead, wake)
        if dead:  # outside the engine's lock: creating the table takes it
            self._give_up(vnode, request, settings, dead)
        return leased

    def _locked(
        self, vnode: Vnode, request: pb.PollRequest, max_bytes: int, settings: ShareSettings,
        wanted: int, dead: list[tuple[Run, int]], wake: Callable[[], None],
    ) -> Leased | None:  # fmt: skip
        windows, topic, group = vnode.shares, request.topic, request.group_id
        now = self._clock()
        windows.expire(now)
        strict = request.acquire_mode == pb.SHARE_ACQUIRE_MODE_RECORD_LIMIT
        eligible = self._eligible(vnode, request)
        lease = Lease(now + settings.lease_s, wanted, eligible, strict, settings.group_key)
        leased = self._redeliver(vnode, request, lease, dead)
        if leased is not None:
            return leased
        reading = windows.reading(topic, group)
        if not reading.acquire(blocking=not self._engine.lock.no_wait):
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
        self, vnode: Vnode, request: pb.PollRequest, lease: Lease, dead: list[tuple[Run, int]]
    ) -> Leased | None:
        """Rows waiting to be delivered (again), leased; rows out of deliveries go to
        `dead` (held for dead-lettering)."""
        windows, topic, group = vnode.shares, request.topic, request.group_id
        consumer = request.consumer_id
        again, out = windows.acquire(
            topic, group, consumer, lease.until, lease.rows, lease.eligible, not lease.strict
        )
        dead += out
        if not again:
            return None
        runs = [run for run, _ in again]
        first = vnode.wal.first_version
        lost = [run for run in runs if run[0] < first]  # retention deleted their writes
        kept = [run for run in runs if run[0] >= first]
        try:
            blocks, gone = self._engine.read_rows(topic, request.vgroup, kept)
        except VersionNotRetained:  # deleted just now: the next poll drops them
            windows.nack(topic, group, consumer, runs)
            return None
        if gone or lost:
            windows.ack(topic, group, consumer, lost + gone)  # nothing left to deliver
        return _message(blocks, again) if blocks else None

    def _read_on(
        self, vnode: Vnode, request: pb.PollRequest, max_bytes: int, lease: Lease,
        wake: Callable[[], None],
    ) -> Leased | None:  # fmt: skip
        """Rows read on from the window's end, leased; rows of an entry beyond the lease
        wait for the next poll (the polls waiting are woken for them)."""
        windows, topic, group = vnode.shares, request.topic, request.group_id
        consumer, vgroup, engine = request.consumer_id, request.vgroup, self._engine
        wal = vnode.wal
        until, wanted = lease.until, lease.rows
        for _ in range(MAX_EMPTY_READS):
            at, room = windows.frontier(topic, group)
            if room <= 0 or at >= wal.next_version:
                return None
            try:
                inline = INLINE_BYTES if engine.lock.no_wait else None
                blocks, after = engine.read_tracked(
                    topic, vgroup, at, min(room, wanted), max_bytes, inline
                )
            except VersionNotRetained:  # retention went past the window: go on there
                windows.admit(topic, group, [], wal.first_version, consumer, until)
                continue
            runs = [run for block in blocks for run in block.runs()]
            keys = self._keys(request, lease, blocks) if lease.eligible is not None else None
            most = wanted if lease.strict else None  # batch_optimized: every row read
            leased = windows.admit(
                topic, group, runs, after, consumer, until, most, keys, lease.eligible
            )
            if leased != runs:
                wake()  # for the rows left waiting
            if leased:
                if leased != runs:
                    blocks = [k for b in blocks if (k := _keep(b, leased)) is not None]
                return _message(blocks, [(run, 1) for run in leased])
        return None

    def _keys(self, request: pb.PollRequest, lease: Lease, blocks: list[TrackedBlock]) -> KeyPieces:
        """The key of each row read, in pieces (key_shared): its table, or group.key's."""
        catalog = self._engine.catalog
        topic = catalog.topic(topic_of(request.topic))
        try:
            source = key_source(catalog, topic, lease.key)
        except ConfigError:  # the tag or column was dropped or renamed since: no value
            source = KeySource("tag", lease.key or "")
        return key_pieces(catalog, topic.db, source, blocks)

    def _give_up(
        self, vnode: Vnode, request: pb.PollRequest, settings: ShareSettings,
        dead: list[tuple[Run, int]],
    ) -> None:  # fmt: skip
        """Rows out of deliveries go to the dead-letter table (or are dropped) and are
        done; when the table cannot take them they are tried again later."""
        windows = vnode.shares
        topic, group = request.topic, request.group_id
        target = settings.dead_letter_table
        runs = [run for run, _ in dead]
        try:
            if target is not None:
                counts = {rid: count for run, count in dead for rid in rows_of([run])}
                with self._engine.lock.shared():
                    blocks, _gone = self._engine.read_rows(topic, request.vgroup, runs)
                self._dead.write(target, topic, group, request.vgroup, blocks, counts)
        except Error as exc:
            windows.unbury(topic, group, runs)
            log.warning(
                "dead-lettering %d rows of topic %s vgroup %d for group %s into %s failed "
                "(tried again later): %s", len(counts), topic, request.vgroup, group,
                ".".join(target or ()), exc,
            )  # fmt: skip
            return
        windows.bury(topic, group, runs)


@dataclass(frozen=True)
class Lease:
    """One poll's lease: until when, how many rows (at most, when `strict`; else whole
    entries up to the one that reaches it), which keys (key_shared)."""

    until: float
    rows: int
    eligible: Callable[[str], bool] | None
    strict: bool
    key: str | None  # key_shared: group.key (None: the table)


def _weight(key: str, member: int) -> int:
    """Rendezvous hashing's weight of `member` for `key` (stable across processes; a
    mixing hash: CRC32's is linear, so one member would win every key)."""
    return xxhash.xxh64_intdigest(f"{key}\x00{member}".encode())


def _keep(block: TrackedBlock, mine: list[Run]) -> TrackedBlock | None:
    """`block` with only the rows of `mine` (a lease may take part of a read: a
    record_limit, keys of other consumers, rows acknowledged before a restart); None
    when none is left."""
    by_version: dict[int, list[tuple[int, int]]] = {}
    for version, lo, hi in mine:
        by_version.setdefault(version, []).append((lo, hi))
    keep = None
    for version, spans in by_version.items():
        here = pc.and_(pc.equal(block.versions, version), within(block.indexes, spans))
        keep = here if keep is None else pc.or_(keep, here)
    if keep is None or not pc.any(keep).as_py():
        return None
    return filtered(block, keep)


def _message(blocks: list[TrackedBlock], counts: list[tuple[Run, int]]) -> Leased:
    """A data message of the blocks (the rows of the runs in `counts`), with its rows
    as runs in row order, each cut where the delivery count changes."""
    runs = [run for block in blocks for run in block.runs()]
    if all(count == 1 for _, count in counts):
        counted = [(run, 1) for run in runs]
    else:
        counted = [piece for run in runs for piece in _counted(run, counts)]
    first = min(v for v, _, _ in runs)
    last = max(v for v, _, _ in runs)
    return Message("data", first, last + 1, [b.block for b in blocks]), counted


def _counted(run: Run, counts: list[tuple[Run, int]]) -> list[tuple[Run, int]]:
    """`run` cut by the runs of `counts` (which cover it), each piece with its count."""
    version, lo, hi = run
    spans = [(a, b, count) for (v, a, b), count in counts if v == version]
    return [((version, a, b), n) for a, b, n in cut(lo, hi, spans) if n is not None]
