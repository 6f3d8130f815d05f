"""Polls and acknowledgements of shared groups, on the vnodes.

Every consumer of a shared group polls every vgroup of its topics (the coordinator gives
each all of them). A poll here leases rows to its consumer from the vgroup's window for
the group (server/vnode/share_windows.py): rows to deliver again first (nacked, their lease
expired, their consumer gone), else rows read on from the window's end, up to the poll's
`max_rows` (server/dnode/share_leases.py) and as long as the window has room. Each
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

from sqltopic.errors import ConfigError, ConsumerFenced, TooLarge
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.common.group_names import shares
from sqltopic.server.common.rwlock import here_or_worker
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.poll import Message
from sqltopic.server.dnode.poll_wire import frames_of, with_names
from sqltopic.server.dnode.share_leases import Leaser
from sqltopic.server.mnode.coordinator import Coordinator, Member
from sqltopic.server.mnode.share_settings import ShareSettings
from sqltopic.server.vnode.row_runs import encode_ids, runs_of_lists
from sqltopic.server.vnode.share_window import Run, run_rows
from sqltopic.server.vnode.share_windows import ShareWindows
from sqltopic.server.vnode.vnode import Vnode

log = logging.getLogger("sqltopic.server")

Runner = Callable[..., Awaitable[Any]]

# Rows one Acknowledge may name: a window holds at most 10,000 by default, so a larger
# request is a mistake, and this bounds what one call makes the vnode look at.
MAX_ACK_ROWS = 1_000_000
# Piggybacked (implicit) acknowledgements reach the disk at most this long after the
# poll that carried them: a window's acknowledgements of that span share one save. A
# save per poll cost more than the lease itself (docs/performance.md §10); a crash
# delivers the last span's rows again, which at-least-once allows (a graceful stop
# saves them: `flush`). Explicit Acknowledges are on disk before they return.
PIGGYBACK_SAVE_DELAY_S = 0.2
ACQUIRE_MODES = frozenset(pb.ShareAcquireMode.values())


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
        self._leaser = Leaser(engine, coordinator, clock)
        self._saves: set[asyncio.Future[Any]] = set()  # piggybacked acks being saved
        # piggybacked acks' saves not begun yet, and when they begin
        self._delayed: dict[Callable[[], None], asyncio.TimerHandle] = {}
        coordinator.departures.append(self._on_departure)

    def close(self) -> None:
        """Every waiting poll answers now."""
        for entry in self._vnodes.values():
            entry.remove()
            entry.changed.set()

    async def flush(self) -> None:
        """Save every piggybacked acknowledgement now and wait until all are on disk
        (a graceful stop)."""
        for save, handle in list(self._delayed.items()):
            handle.cancel()
            self._start_save(save)
        if self._saves:
            await asyncio.gather(*self._saves, return_exceptions=True)

    def settings_of(self, consumer_id: int, group: str) -> ShareSettings | None:
        """The group's settings, when the consumer polls as a member of a shared group."""
        member = self._coordinator.member(consumer_id)
        if member is not None and member.group == group and shares(member.mode):
            return member.share
        return None

    async def poll(
        self, request: pb.PollRequest, settings: ShareSettings, wait: float, max_bytes: int,
        stopping: asyncio.Event,
    ) -> list[pb.PollResponse]:  # fmt: skip
        """Rows leased to the polling consumer (of a group with `settings`), as frames;
        empty after `wait` seconds without any. The caller checked who polls (fencing
        and rights)."""
        deadline = self._clock() + wait
        check_acquire_mode(request.acquire_mode)
        entry = self._entry(self._engine.vnode_of(request.topic, request.vgroup))
        if not entry.windows.reopen(request.topic, request.group_id, settings.max_deliveries):
            await self._run(self._open, entry, request, settings)  # may read the offsets file
        self._accept_piggybacked(entry, request)
        lock = self._engine.lock
        while True:
            changed = entry.changed
            args = (entry.vnode, request, max_bytes, settings, lambda: self._wake(entry))
            leased = await here_or_worker(lock, self._run, self._leaser.lease, *args)
            epoch = self._coordinator.epoch_of(request.consumer_id)
            now = self._clock()
            if leased is not None:
                message, runs = leased
                frames = frames_of(message, with_names(request))
                frames[0].data.MergeFromString(encode_ids(runs))
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
        """The rows the poll accepts (implicit acknowledgement): done now, saved within
        PIGGYBACK_SAVE_DELAY_S on the commit pool (the acknowledgements of a window
        until then share the save; saves of a window never go back)."""
        runs = checked_ids("PollRequest", request.ack_versions, request.ack_indexes)
        if not runs:
            return
        save = entry.windows.accept(request.topic, request.group_id, request.consumer_id, runs)
        if save is not None:
            self._delayed[save] = self._loop.call_later(
                PIGGYBACK_SAVE_DELAY_S, self._start_save, save
            )

    def _start_save(self, save: Callable[[], None]) -> None:
        self._delayed.pop(save, None)
        task = asyncio.ensure_future(self._save(save))
        self._saves.add(task)
        task.add_done_callback(self._saved)

    def _saved(self, task: asyncio.Future[Any]) -> None:
        self._saves.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("saving piggybacked acknowledgements failed: %s", task.exception())

    async def acknowledge(self, request: pb.AcknowledgeRequest) -> pb.AcknowledgeResponse:
        """Settle rows leased to the consumer. The caller checked who calls."""
        runs = _ids_of(request)
        named = run_rows(runs)
        entry = self._entry(self._engine.vnode_of(request.topic, request.vgroup))
        windows, topic, group = entry.windows, request.topic, request.group_id
        if not windows.opened(topic, group):
            return pb.AcknowledgeResponse(settled=0, not_held=named)
        if request.type == pb.ACK_TYPE_ACCEPT:
            done = await self._save(windows.ack, topic, group, request.consumer_id, runs)
        else:
            done = windows.nack(topic, group, request.consumer_id, runs)
            if done:
                self._kick(entry)
        settled = run_rows(done)
        return pb.AcknowledgeResponse(settled=settled, not_held=named - settled)

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
                self._wake(entry)

        return on_versions

    def _wake(self, entry: _Vnode) -> None:
        """`_kick` from any thread."""
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            self._loop.call_soon_threadsafe(self._kick, entry)

    def _kick(self, entry: _Vnode) -> None:
        """Wake the vnode's waiting polls: they look again."""
        entry.kicked = False
        entry.changed.set()
        entry.changed = asyncio.Event()

    def _on_departure(self, consumer_id: int, topics: tuple[str, ...] | None) -> None:
        """A sharing consumer left (or stopped reading `topics`): its leases end."""
        for entry in list(self._vnodes.values()):
            if entry.windows.release(consumer_id, topics):
                self._wake(entry)

    # --- on a worker thread -----------------------------------------------------------

    def _open(self, entry: _Vnode, request: pb.PollRequest, settings: ShareSettings) -> None:
        vnode = entry.vnode

        def start() -> int:  # a group new here starts where auto.offset.reset says
            latest = request.auto_offset_reset == pb.OFFSET_RESET_LATEST
            return vnode.wal.next_version if latest else vnode.wal.first_version

        entry.windows.open(request.topic, request.group_id, start, settings.max_deliveries)


def _ids_of(request: pb.AcknowledgeRequest) -> list[Run]:
    """The request's row ids, checked: ConfigError or TooLarge, naming the field."""
    if request.type not in (pb.ACK_TYPE_ACCEPT, pb.ACK_TYPE_RELEASE):
        raise ConfigError(
            f"Acknowledge: type {request.type} is not ACK_TYPE_ACCEPT (1) or ACK_TYPE_RELEASE (2)"
        )
    return checked_ids("Acknowledge", request.versions, request.indexes)


def checked_ids(what: str, versions: Sequence[int], indexes: Sequence[int]) -> list[Run]:
    """Row ids from their two lists, as runs: ConfigError when their lengths differ,
    TooLarge past MAX_ACK_ROWS."""
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
    return runs_of_lists(versions, indexes)


def check_acquire_mode(mode: int) -> None:
    """ConfigError for a value that is not a ShareAcquireMode (proto3 keeps unknown ones)."""
    if mode not in ACQUIRE_MODES:
        raise ConfigError(
            f"PollRequest: acquire_mode {mode} is not SHARE_ACQUIRE_MODE_BATCH_OPTIMIZED (0) "
            "or SHARE_ACQUIRE_MODE_RECORD_LIMIT (1)"
        )


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
