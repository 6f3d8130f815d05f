"""The mnode's consumer coordinator: group membership, assignments, epochs and fencing.

Consumers join a group with a topic list; for every (topic, group) the coordinator
plans the topic's vgroups among the group's consumers subscribed to that topic
(`assign.assign`: balanced and sticky) and applies the plan cooperatively: a vgroup
leaves a live holder only once it let go (committed it, stopped listing it, left, or
timed out). Every change to a consumer's assignment raises its epoch. Vnodes ask
`check_owner` before serving a poll or commit, so a consumer that lost a vgroup is
fenced off at once. A consumer silent for `session.timeout.ms`, or without a poll for
`max.poll.interval.ms`, is removed by `expire`, which the server calls on a timer. The
state is saved in the data directory (`coordinator_store`), so a restart keeps groups.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from sqltopic.errors import (
    ConfigError,
    ConsumerFenced,
    GroupConflict,
    NotFoundError,
    RebalanceInProgress,
    UnsupportedStatement,
)
from sqltopic.server.common.group_names import (
    DEFAULT_GROUP_TYPE,
    GroupType,
    check_client_id,
    check_group_id,
    group_of,
    lane,
    of_group,
    shares,
)
from sqltopic.server.common.logs import event_fields
from sqltopic.server.mnode.assign import assign
from sqltopic.server.mnode.coordinator_store import (
    CoordinatorStore,
    GroupDoc,
    ProgressRows,
    Snapshot,
    empty_doc,
)
from sqltopic.server.mnode.rebalances import Cause, Rebalance, RebalanceLog
from sqltopic.server.mnode.share_settings import ShareSettings
from sqltopic.sql.topic.params import topic_of
from sqltopic.wal.stats import SETTLE_BUCKETS, Timings

log = logging.getLogger("sqltopic.groups")

Status = Literal["ready", "rebalancing", "removed"]
Clock = Callable[[], float]

# Defaults and ranges of the liveness settings (TDengine's), in ms (docs/client.md).
DEFAULT_SESSION_TIMEOUT_MS = 12_000
SESSION_TIMEOUT_RANGE_MS = (6_000, 1_800_000)
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
MIN_MAX_POLL_INTERVAL_MS = 1_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
MIN_HEARTBEAT_INTERVAL_MS = 1_000
# Groups whose documents a save copies per hold of the lock: a group's is tens of
# microseconds, so the event loop waits a millisecond or so, and a save of ten thousand
# groups lets it in a few hundred times, not ten thousand (each a switch of threads).
GROUPS_PER_LOCK = 32


@dataclass(frozen=True)
class Liveness:
    """A consumer's timing settings, in ms, validated."""

    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS

    @classmethod
    def of(cls, session_ms: int, max_poll_ms: int, heartbeat_ms: int) -> Liveness:
        """From request fields, where 0 means the default; ConfigError on a bad value."""
        live = cls(
            session_ms or DEFAULT_SESSION_TIMEOUT_MS,
            max_poll_ms or DEFAULT_MAX_POLL_INTERVAL_MS,
            heartbeat_ms or DEFAULT_HEARTBEAT_INTERVAL_MS,
        )
        low, high = SESSION_TIMEOUT_RANGE_MS
        if not low <= live.session_timeout_ms <= high:
            raise ConfigError(
                f"session.timeout.ms: {live.session_timeout_ms} is out of range {low}..{high}"
            )
        if live.max_poll_interval_ms < MIN_MAX_POLL_INTERVAL_MS:
            raise ConfigError(
                f"max.poll.interval.ms: {live.max_poll_interval_ms} is below "
                f"{MIN_MAX_POLL_INTERVAL_MS}"
            )
        if not MIN_HEARTBEAT_INTERVAL_MS <= live.heartbeat_interval_ms < live.session_timeout_ms:
            raise ConfigError(
                f"heartbeat.interval.ms: {live.heartbeat_interval_ms} must be in "
                f"{MIN_HEARTBEAT_INTERVAL_MS}..session.timeout.ms - 1 "
                f"({live.session_timeout_ms - 1})"
            )
        return live


@dataclass
class Member:
    """One consumer of one group."""

    id: int
    group: str
    client_id: str
    user: str
    fqdn: str
    topics: tuple[str, ...]
    liveness: Liveness
    parameters: dict[str, str]
    last_heartbeat: float  # on the coordinator's (monotonic) clock
    last_poll: float
    joined_us: int = 0  # wall-clock µs, for SHOW CONSUMERS (0 = never)
    subscribed_us: int = 0
    rebalanced_us: int = 0
    epoch: int = 1
    status: Status = "ready"
    assignment: frozenset[tuple[str, int]] = frozenset()
    mode: GroupType = DEFAULT_GROUP_TYPE  # the group's group.type
    share: ShareSettings | None = None  # a shared group's settings (None in the others)
    # since when (coordinator clock) it waits for vgroups a holder still lets go
    rebalancing_since: float | None = None
    # the vgroups its last full progress listing named: a heartbeat listing only what
    # changed holds these still (None: not known, after a restart or a listing that
    # named another; its next answer asks for a full one)
    listed: frozenset[tuple[str, int]] | None = None

    @property
    def group_id(self) -> str:
        """The consumer's group.id (`group` is its lane in a broadcast group)."""
        return group_of(self.group)


@dataclass(frozen=True)
class AssignmentView:
    """A member's assignment as GetAssignment answers it: all read at one instant."""

    epoch: int
    status: Status
    vgroups: tuple[tuple[str, int, int], ...]  # (topic, vgroup, granted epoch)


class Progress(NamedTuple):
    """What a consumer last reported for a vgroup it holds: its position (None before
    its first poll there) and the rows delivered since it got the vgroup. A named tuple:
    a hundred are made per heartbeat, at a third of a frozen dataclass's cost."""

    position: int | None
    rows: int


SubKey = tuple[str, str, int]  # (topic, group, vgroup)


@dataclass(frozen=True)
class Owner:
    """Who holds a vgroup of a (topic, group): the consumer and the epoch it got it at.
    A vgroup `revoking` stays with its holder, which may still commit but no longer
    poll it, until the holder lets go (commits it, stops reporting it, leaves) or times
    out; only then does the next owner get it, so two consumers never read it at once."""

    consumer: int
    epoch: int
    revoking: bool = False
    since: float = 0.0  # when the revocation started (coordinator clock)
    # the holder's epoch that announced the revocation (0 until set): only a commit at
    # that epoch or later is its final commit; an older one was sent before it knew
    revoked_at: int = 0


@dataclass
class Coordinator:
    """All groups' members and assignments. Thread-safe."""

    vgroups_of: Callable[[str], list[int]]
    clock: Clock = time.monotonic
    wall_us: Callable[[], int] = lambda: time.time_ns() // 1000
    members: dict[int, Member] = field(default_factory=dict)
    # (topic, group) -> vgroup -> owner
    owners: dict[tuple[str, str], dict[int, Owner]] = field(default_factory=dict)
    # called (in the changing thread) after any assignment changed: wakes held polls
    listeners: list[Callable[[], None]] = field(default_factory=list)
    # called (in the changing thread, under the lock) when a shared group's member leaves
    # (topics None) or stops reading topics: the vnodes release its leases there
    departures: list[Callable[[int, tuple[str, ...] | None], None]] = field(default_factory=list)
    # the holder's last report per (topic, group, vgroup), and rows of earlier holders
    progress: dict[SubKey, Progress] = field(default_factory=dict)
    # the last plan per (topic, group): vgroup -> the consumer it is meant for
    plans: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    rows_before: dict[SubKey, int] = field(default_factory=dict)
    # where the state is kept across restarts; None: in memory only
    store: CoordinatorStore | None = None
    # a dnode's copy of its mnode's assignments (`follow`): it fences polls and commits
    # but decides nothing, and a consumer it does not know yet is told to retry
    follower: bool = False
    # members' assignments changed by rebalances since the start (/metrics)
    assignment_changes: int = 0
    # members removed for missing heartbeats or polls since the start (/metrics)
    removed: int = 0
    # how long members waited in `rebalancing` for vgroups to be let go (/metrics)
    settles: Timings = field(default_factory=lambda: Timings(buckets=SETTLE_BUCKETS))
    # the recent rebalances that changed assignments (the web console)
    rebalances: RebalanceLog = field(default_factory=RebalanceLog)
    # what set off the rebalances running now, and by which consumer (`rebalances`)
    _cause: tuple[Cause, int] = ("subscribe", 0)
    _next_id: int = 1
    _version: int = 0  # raised by every change of members or assignments
    _saved: int = 0  # the version the store holds
    # groups whose members or assignments changed since their last save, and groups
    # with progress reports not saved yet: a save writes only these
    _dirty: set[str] = field(default_factory=set)
    _progress_dirty: set[str] = field(default_factory=set)
    _revoking_cache: tuple[int, list[tuple[str, str, int, int]]] | None = None
    _save_lock: threading.Lock = field(default_factory=threading.Lock)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    # the members of each group.id (a broadcast group's lanes together): a rebalance or
    # a save looks at one group's members, not at every member of the server
    _in_group: dict[str, dict[int, Member]] = field(default_factory=dict)
    # group (or lane) -> subscription -> vgroups it may have state of: see `_note`
    _subs: dict[str, dict[str, set[int]]] = field(default_factory=dict)

    def _add_member(self, member: Member) -> None:
        self.members[member.id] = member
        self._in_group.setdefault(member.group_id, {})[member.id] = member

    def _drop_member(self, member: Member) -> None:
        log.info(
            "consumer %d left group %s", member.id, member.group,
            extra=event_fields("leave", consumer_id=member.id, group=member.group),
        )  # fmt: skip
        del self.members[member.id]
        group = self._in_group[member.group_id]
        del group[member.id]
        if not group:
            del self._in_group[member.group_id]

    def _note(self, topic: str, group: str, *vgroups: int) -> None:
        """(topic, group) has state in owners, plans or counters on `vgroups`: a save of
        the group looks there (what is gone since is skipped, and forgotten then)."""
        self._subs.setdefault(group, {}).setdefault(topic, set()).update(vgroups)

    def _of_group(self, key: str) -> list[Member]:
        """The members coordinated as `key` (a group.id, or a broadcast lane)."""
        return [m for m in self._in_group.get(group_of(key), {}).values() if m.group == key]

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    @property
    def unsaved(self) -> bool:
        """Whether members or assignments changed since the last save (a hint, read
        without the lock: `persist` decides under it)."""
        return self._version != self._saved

    def close_store(self) -> None:
        """Close the store (the owner's last call, after the last `persist`)."""
        if self.store is not None:
            self.store.close()

    def persist(self, progress: bool = False) -> None:
        """Save the state if members or assignments changed since the last save (and,
        with `progress`, if progress reports did). Call before answering the change.
        The state is copied under the lock, a group at a time, and written (an fsync)
        outside it, so that polls and heartbeats, which check the assignment on the
        event loop, never wait for a disk or for a whole save's copy; callers that
        arrive during a save share the next one. Only the groups that changed are
        written."""
        with self._lock:
            if self.store is None:
                return
            if self._version == self._saved and not (progress and self._progress_dirty):
                return
            wanted = self._version
        with self._save_lock:
            # saves are group commits: whoever gets here first saves the state as it is
            # then, which covers every change made while the save before it ran; the
            # callers of those changes find them saved and return at once
            with self._lock:
                if self._saved >= wanted and not (progress and self._progress_dirty):
                    return
                changed = set(self._dirty)
                groups = changed | (self._progress_dirty if progress else set())
                version = self._version
                self._dirty.clear()
                self._progress_dirty -= groups
            # a few groups' documents at a time under the lock: a progress save of ten
            # thousand subscriptions takes a good part of a second, and the polls,
            # commits and heartbeats on the event loop take the lock too. A group whose
            # progress alone changed saves its progress alone. Each group's document is
            # at least as new as `version`; the next id is read after the last one, so
            # that it is above every member id they hold.
            docs: dict[str, GroupDoc | None] = {}
            reports: dict[str, ProgressRows] = {}
            ordered = sorted(groups)
            for start in range(0, len(ordered), GROUPS_PER_LOCK):
                with self._lock:
                    for group in ordered[start : start + GROUPS_PER_LOCK]:
                        if group in changed:
                            docs |= self._group_docs({group})
                        else:
                            reports[group] = self._progress_rows(group)
                time.sleep(0)  # let a thread waiting for the lock (the event loop) in
            with self._lock:
                next_id = self._next_id
            try:
                self.store.save(next_id, docs, reports)
            except BaseException:
                with self._lock:  # the next save writes them
                    self._dirty |= changed
                    self._progress_dirty |= groups - changed
                raise
            with self._lock:
                self._saved = max(self._saved, version)

    def restore(self) -> None:
        """Load the saved state: members get a full session timeout to come back."""
        with self._lock:
            snap = self.store.load() if self.store is not None else None
            if snap is None:
                return
            try:
                self._restore(snap)
            except (ValueError, TypeError, KeyError) as exc:
                assert self.store is not None
                self.members.clear()
                self._in_group.clear()
                self.owners.clear()
                raise self.store.damaged(exc) from None
        if snap.legacy:
            self.persist()  # into mnode.sqlite now, so mnode.json goes at once

    def _restore(self, snap: Snapshot) -> None:
        """Install a loaded snapshot (the lock held); raises on a malformed one."""
        now = self.clock()
        self._next_id = int(snap.next_id)
        for doc in snap.members:
            member = _member_of(doc, now)
            self._add_member(member)
        for topic, group, vgroup, consumer, epoch, revoking, *rest in snap.owners:
            revoked_at = int(rest[0]) if rest else 0  # files before revoked_at: any commit
            owner = Owner(consumer, epoch, revoking=revoking, since=now, revoked_at=revoked_at)
            self.owners.setdefault((topic, group), {})[vgroup] = owner
            self._note(topic, group, vgroup)
        for topic, group, vgroup, planned in snap.plans:
            self.plans.setdefault((topic, group), {})[vgroup] = planned
            self._note(topic, group, vgroup)
        for topic, group, vgroup, rows in snap.rows_before:
            self.rows_before[topic, group, vgroup] = rows
            self._note(topic, group, vgroup)
        for topic, group, vgroup, position, rows in snap.progress:
            self.progress[topic, group, vgroup] = Progress(position, rows)
            self._note(topic, group, vgroup)
        self._saved = self._version
        self._revoking_cache = None
        if snap.legacy:  # read from mnode.json: the next save writes every group
            self._touch(*self._groups())

    def _groups(self) -> set[str]:
        """Every group with state."""
        found = {m.group for m in self.members.values()}
        for table in (self.owners, self.plans, self.rows_before, self.progress):
            found.update(key[1] for key in table)
        return found

    def _touch(self, *groups: str) -> None:
        """The groups' members or assignments changed: save them before answering."""
        self._version += 1
        self._dirty.update(groups)

    def _group_docs(self, groups: set[str]) -> dict[str, GroupDoc | None]:
        """The durable state of `groups` (None for a group with none left)."""
        docs = {group: empty_doc() for group in groups}
        for group_id in {group_of(g) for g in groups}:
            for m in self._in_group.get(group_id, {}).values():
                if m.group in docs:
                    docs[m.group]["members"].append(_member_doc(m))
        for g, doc in docs.items():
            kept: dict[str, set[int]] = {}
            for t, vgroups in self._subs.get(g, {}).items():
                owners, plan = self.owners.get((t, g), {}), self.plans.get((t, g), {})
                doc["owners"] += [[t, g, v, o.consumer, o.epoch, o.revoking, o.revoked_at]
                                  for v, o in owners.items()]  # fmt: skip
                doc["plans"] += [[t, g, v, c] for v, c in plan.items()]
                counted = set()
                for v in sorted(vgroups):
                    if (n := self.rows_before.get((t, g, v))) is not None:
                        doc["rows_before"].append([t, g, v, n])
                        counted.add(v)
                    if (p := self.progress.get((t, g, v))) is not None:
                        doc["progress"].append([t, g, v, p.position, p.rows])
                        counted.add(v)
                if owners or plan or counted:
                    kept[t] = {*owners, *plan, *counted}
            if kept:
                self._subs[g] = kept
            else:
                self._subs.pop(g, None)
        return {g: doc if any(doc.values()) else None for g, doc in docs.items()}

    def _progress_rows(self, group: str) -> ProgressRows:
        """The progress reports of `group`, as its document holds them."""
        rows: ProgressRows = []
        for t, vgroups in self._subs.get(group, {}).items():
            for v in sorted(vgroups):
                if (p := self.progress.get((t, group, v))) is not None:
                    rows.append([t, group, v, p.position, p.rows])
        return rows

    def subscribe(
        self,
        consumer_id: int,
        group: str,
        topics: Iterable[str],
        *,
        client_id: str = "",
        user: str = "root",
        fqdn: str = "",
        liveness: Liveness | None = None,
        parameters: dict[str, str] | None = None,
        mode: GroupType = DEFAULT_GROUP_TYPE,
        share: ShareSettings | None = None,
    ) -> Member:
        """Join `group` (as a consumer of its `mode`, with the group's `share` settings
        if it shares), or change the topics of a member; returns the member.
        GroupConflict when the group refuses it."""
        check_group_id(group)
        check_client_id(client_id, required=mode == "broadcast")
        wanted = tuple(dict.fromkeys(topics))
        key = lane(group, client_id) if mode == "broadcast" else group
        share = (share or ShareSettings()) if shares(mode) else None
        with self._lock:
            self._admit(consumer_id, group, key, mode, share)
            now = self.clock()
            member = self.members.get(consumer_id)
            if member is not None and member.group != key:
                self._leave(member)  # moving to another group or lane: out of the old one
                member = None
            joined = member is None
            if member is None:
                member = Member(
                    self._new_id(), key, client_id, user, fqdn, (),
                    liveness or Liveness(), parameters or {}, now, now, self.wall_us(),
                    mode=mode,
                )  # fmt: skip
                self._add_member(member)
                log.info(
                    "consumer %d (%s) of user %s joined group %s as %s", member.id,
                    client_id or "no client.id", user, key, mode,
                    extra=event_fields(
                        "join", consumer_id=member.id, group=key, client_id=client_id,
                        user=user, mode=mode,
                    ),
                )  # fmt: skip
            member.mode, member.share = mode, share  # its group's only member may change them
            self._touch(key)
            member.last_heartbeat = member.last_poll = now
            held, epoch = member.assignment, member.epoch
            for topic in set(member.topics) - set(wanted):
                self._let_go(member, topic)  # the client committed before it asked
            touched = set(member.topics) | set(wanted)
            member.topics = wanted
            member.subscribed_us = self.wall_us()
            self._cause = ("join" if joined else "subscribe", member.id)
            for topic in touched:
                self._rebalance(topic, key)
            if member.assignment != held and member.epoch == epoch:
                # vgroups let go here left the rebalance nothing to compare: the
                # assignment changed all the same, so the epoch rises (GetAssignment
                # with the old epoch must not answer `unchanged`)
                member.epoch += 1
                member.rebalanced_us = self.wall_us()
                for listener in self.listeners:
                    listener()
            return member

    def _admit(
        self, consumer_id: int, group: str, key: str, mode: GroupType,
        share: ShareSettings | None,
    ) -> None:  # fmt: skip
        """GroupConflict unless a consumer of `mode` may join `group` (as `key`): the
        group's live members agree on the mode (and a shared group's settings), an
        exclusive group has no other member, and a broadcast lane no other consumer
        (refused, not taken over: two consumers with one client.id would take it from
        each other forever)."""
        others = [m for m in self._in_group.get(group, {}).values() if m.id != consumer_id]
        if not others:
            return
        there = others[0].mode
        ids = ", ".join(str(m.id) for m in others[:5]) + (", ..." if len(others) > 5 else "")
        if there != mode:
            raise GroupConflict(
                f"consumer group {group} has group.type {there} (consumers {ids}); this "
                f"consumer asks for group.type {mode}: use group.type {there}, or another "
                "group.id"
            )
        fixed = others[0].share
        if fixed is not None and share is not None and fixed != share:
            raise GroupConflict(
                f"consumer group {group} has the settings its first member fixed: "
                f"{'; '.join(fixed.differences(share))}. Use the group's settings, or "
                "another group.id"
            )
        holder = next((m for m in others if m.group == key), None)
        if mode == "exclusive" or (mode == "broadcast" and holder is not None):
            holder = holder or others[0]
            what = "is exclusive" if mode == "exclusive" else f"has client.id {holder.client_id}"
            raise GroupConflict(
                f"consumer group {group} {what}, and consumer {holder.id} holds it: close that "
                "consumer first (a crashed one is removed after its session timeout, "
                f"{holder.liveness.session_timeout_ms} ms), or use another "
                f"{'group.id' if mode == 'exclusive' else 'client.id'}"
            )

    def unsubscribe(
        self, consumer_id: int, progress: Iterable[tuple[str, int, Progress]] = ()
    ) -> Member:
        """Drop every topic of the member (it stays a member); its vgroups move at once."""
        with self._lock:
            member = self._member(consumer_id)
            self._report(member, progress)
            return self.subscribe(
                member.id, member.group_id, (), client_id=member.client_id, mode=member.mode
            )

    def close(self, consumer_id: int, progress: Iterable[tuple[str, int, Progress]] = ()) -> None:
        """The member leaves; its vgroups move at once. Unknown ids are ignored."""
        with self._lock:
            member = self.members.get(consumer_id)
            if member is not None:
                self._report(member, progress)
                self._leave(member)

    def _leave(self, member: Member) -> None:
        """The member is gone: its vgroups move at once (its leases end, if it shared)."""
        self._drop_member(member)
        self._touch(member.group)
        self._cause = ("removed" if member.status == "removed" else "leave", member.id)
        self._rebalance_all(member)
        if shares(member.mode):
            self._departed(member.id, None)

    def _departed(self, consumer_id: int, topics: tuple[str, ...] | None) -> None:
        for departure in self.departures:
            departure(consumer_id, topics)

    def heartbeat(
        self, consumer_id: int, polled: bool, progress: Iterable[tuple[str, int, Progress]] = (),
        changed_only: bool = False,
    ) -> Member | None:  # fmt: skip
        """Note the member alive (and polling) and its progress on the vgroups it holds
        (all of them, or with `changed_only` those whose progress changed since its last
        heartbeat: it holds the others still); None when it is not a member (removed).
        The member's `listed` is None after it when a full listing is wanted."""
        with self._lock:
            member = self.members.get(consumer_id)
            if member is None:
                return None
            member.last_heartbeat = self.clock()
            if polled:
                member.last_poll = member.last_heartbeat
            reported = self._report(member, progress)
            if not changed_only:
                member.listed = frozenset(reported)
            elif member.listed is not None and not reported <= member.listed:
                member.listed = None  # it holds another vgroup: it must list them all
            if member.listed is not None:
                self._release_unreported(member, member.listed)
            return member

    def _release_unreported(self, member: Member, reported: AbstractSet[tuple[str, int]]) -> None:
        """A heartbeat lists every vgroup the consumer still holds: revoked ones it no
        longer lists were let go."""
        for topic, group, vgroup, consumer in self._revoking():
            if consumer == member.id and (topic, vgroup) not in reported:
                self.release(member.id, group, topic, vgroup)

    def _revoking(self) -> list[tuple[str, str, int, int]]:
        """Every vgroup being revoked, with its holder: a heartbeat looks only at these
        (a scan of every owner per heartbeat costs O(subscriptions) each time), kept
        until the assignments next change (every change raises `_version`)."""
        cached = self._revoking_cache
        if cached is not None and cached[0] == self._version:
            return cached[1]
        found = [
            (topic, group, vgroup, owner.consumer)
            for (topic, group), owners in self.owners.items()
            for vgroup, owner in owners.items()
            if owner.revoking
        ]
        self._revoking_cache = (self._version, found)
        return found

    def _report(
        self, member: Member, progress: Iterable[tuple[str, int, Progress]]
    ) -> set[tuple[str, int]]:
        """Keep progress reports for vgroups the member still holds (a late report of a
        vgroup that moved on must not count its rows twice); the (topic, vgroup) listed."""
        listed: set[tuple[str, int]] = set()
        group, known = member.group, self.progress
        for topic, vgroup, report in progress:
            listed.add((topic, vgroup))
            key = (topic, group, vgroup)
            if known.get(key) == report:
                continue  # unchanged, as most are between two beats: nothing to save
            owner = self.owners.get((topic, group), {}).get(vgroup)
            if owner is not None and owner.consumer == member.id:
                known[key] = report
                self._note(topic, group, vgroup)
                self._progress_dirty.add(group)
        return listed

    def rows(self, topic: str, group: str, vgroup: int) -> int | None:
        """Rows the group consumed from the vgroup over all its holders; None if none
        ever reported."""
        with self._lock:
            key = (topic, group, vgroup)
            current = self.progress.get(key)
            before = self.rows_before.get(key)
            if current is None and before is None:
                return None
            return (before or 0) + (current.rows if current else 0)

    def member(self, consumer_id: int) -> Member | None:
        with self._lock:
            return self.members.get(consumer_id)

    @property
    def version(self) -> int:
        """Raised by every change of members or assignments (a dnode's copy compares)."""
        return self._version

    def fences(self, vgroups: Collection[int]) -> str:
        """What fences the polls and commits of `vgroups` on a dnode, as JSON: their
        owners in every group and the members those name, with the shared groups'
        members reading them (docs/cluster.md, "Consumers on a cluster")."""
        with self._lock:
            owners = [
                [t, g, v, o.consumer, o.epoch, o.revoking, o.revoked_at]
                for (t, g), by_vgroup in self.owners.items()
                for v, o in by_vgroup.items()
                if v in vgroups
            ]
            ids = {o.consumer for by in self.owners.values() for v, o in by.items() if v in vgroups}
            ids |= {
                m.id
                for m in self.members.values()
                if shares(m.mode) and any(v in vgroups for _t, v in m.assignment)
            }
            members = [_member_doc(self.members[i]) for i in sorted(ids) if i in self.members]
        return json.dumps({"members": members, "owners": owners})

    def follow(self, fences: str) -> None:
        """A dnode: take the mnode's `fences` as the members and owners, and tell the
        listeners (held polls whose consumer moved on answer)."""
        doc = json.loads(fences)
        now = self.clock()
        with self._lock:
            before = self._shared_topics()
            self.members.clear()
            self._in_group.clear()
            self.owners.clear()
            for raw in doc["members"]:
                self._add_member(_member_of(raw, now))
            for topic, group, vgroup, consumer, epoch, revoking, revoked_at in doc["owners"]:
                owner = Owner(consumer, epoch, revoking=revoking, since=now, revoked_at=revoked_at)
                self.owners.setdefault((topic, group), {})[vgroup] = owner
            self._revoking_cache = None
            self._version += 1
            after = self._shared_topics()
        # sharing members gone from here, or from some topics here: their leases end
        for consumer_id, topics in before.items():
            gone = topics - after.get(consumer_id, set())
            if gone:
                self._departed(consumer_id, None if consumer_id not in after else tuple(gone))
        for listener in self.listeners:
            listener()

    def _shared_topics(self) -> dict[int, set[str]]:
        """The topics each sharing member reads, by its assignment."""
        return {
            m.id: {t for t, _v in m.assignment} for m in self.members.values() if shares(m.mode)
        }

    def epoch_of(self, consumer_id: int) -> int:
        """The consumer's current epoch (0 once it is no member): a poll answers with it,
        so a consumer whose assignment moved past the poll's learns it at once, not at
        its next heartbeat."""
        member = self.member(consumer_id)
        return member.epoch if member is not None else 0

    def snapshot(self) -> tuple[list[Member], dict[tuple[str, str], dict[int, Owner]]]:
        """Copies of the members and owners, for SHOW: consistent with each other."""
        with self._lock:
            members = [replace(m) for m in self.members.values()]
            return members, {k: dict(v) for k, v in self.owners.items()}

    def assignment_of(self, consumer_id: int) -> AssignmentView | None:
        """The member's epoch, status and vgroups (with the epoch each was granted at),
        read together; None when it is not a member."""
        with self._lock:
            member = self.members.get(consumer_id)
            if member is None:
                return None
            vgroups = []
            for topic, vgroup in sorted(member.assignment):
                owner = self.owners.get((topic, member.group), {}).get(vgroup)
                granted = owner.epoch if owner is not None and owner.consumer == member.id else 0
                vgroups.append((topic, vgroup, granted))
            return AssignmentView(member.epoch, member.status, tuple(vgroups))

    def progress_of(self, topic: str, group: str, vgroup: int) -> Progress | None:
        with self._lock:
            return self.progress.get((topic, group, vgroup))

    def subscribers(self, topic: str, group: str | None = None) -> list[Member]:
        """Live members subscribed to `topic` (in `group`, if given: its lanes too)."""
        with self._lock:
            return [
                m for m in self.members.values()
                if any(topic_of(t) == topic for t in m.topics)
                and (group is None or m.group_id == group)
            ]  # fmt: skip

    def remove(self, consumer_ids: Iterable[int]) -> None:
        """Remove members now (DROP CONSUMER GROUP ... FORCE): they are told REMOVED at
        their next heartbeat and fenced off at once."""
        with self._lock:
            for consumer_id in consumer_ids:
                member = self.members.get(consumer_id)
                if member is not None:
                    member.status = "removed"
                    self._leave(member)

    def evict(
        self, group: str, topics: Iterable[str], then: Callable[[], None],
        check: Callable[[Member], None] = lambda member: None,
    ) -> list[int]:  # fmt: skip
        """Remove `group`'s members subscribed to any of `topics`, and run `then` before
        anyone can subscribe again (a removed client rejoins by itself at once); the ids
        removed. `check` may refuse (raise) for any of them first: then nothing changes.
        A failing `then` leaves the members removed."""
        if self.follower:
            raise UnsupportedStatement(
                "a commit that evicts a group's consumers changes the group, which the "
                "cluster's mnode keeps: on a cluster, stop the group's consumers (or DROP "
                "CONSUMER GROUP on the mnode) and commit without evict"
            )
        with self._lock:
            wanted = set(topics)
            members = [m for m in self._in_group.get(group, {}).values() if wanted & set(m.topics)]
            for member in members:
                check(member)
            self.remove(m.id for m in members)
            then()
            return [m.id for m in members]

    def forget_topic(self, topic: str, group: str | None = None) -> None:
        """Drop the assignments and counters of a dropped topic, its bindings' included
        (or of one group on it); subscribers keep the name and learn from their heartbeat
        that it is gone."""
        with self._lock:
            self._touch()
            tables: tuple[dict[Any, Any], ...] = (self.owners, self.progress, self.rows_before)
            for table in tables:
                for key in [k for k in table if _of(k, topic, group)]:
                    del table[key]
                    self._dirty.add(key[1])

    def expire(self) -> list[Member]:
        """Remove members past their session timeout or max poll interval."""
        with self._lock:
            now = self.clock()
            dead = [m for m in self.members.values() if _expired(m, now)]
            for member in dead:
                member.status = "removed"
                self._leave(member)
            self.removed += len(dead)
            self._expire_revocations(now)
            return dead

    def next_deadline(self) -> float | None:
        """When (coordinator clock) the next member or revocation runs out, if nothing
        arrives before: the timer wakes then, so a dead consumer's vgroups move on at its
        session timeout, not up to a tick later."""
        with self._lock:
            times = [_deadline(m) for m in self.members.values()]
            for topic, group, vgroup, consumer in self._revoking():
                holder = self.members.get(consumer)
                if holder is not None:
                    since = self.owners[topic, group][vgroup].since
                    times.append(since + holder.liveness.session_timeout_ms / 1000)
            return min(times, default=None)

    def _expire_revocations(self, now: float) -> None:
        """A holder that neither commits nor drops a revoked vgroup within its session
        timeout (a stuck client) loses it anyway."""
        for topic, group, vgroup, consumer in list(self._revoking()):
            owner = self.owners.get((topic, group), {}).get(vgroup)
            if owner is None or owner.consumer != consumer:
                continue  # moved on by a release earlier in this loop
            holder = self.members.get(consumer)
            limit = holder.liveness.session_timeout_ms / 1000 if holder else 0.0
            if now - owner.since > limit:
                self.release(consumer, group, topic, vgroup)

    def check_owner(
        self, consumer_id: int, group: str, topic: str, vgroup: int, epoch: int,
        *, commit: bool = False,
    ) -> None:  # fmt: skip
        """Fencing: pass only if the consumer holds the vgroup at an epoch it knows (and,
        to poll, is not letting go of it: a revoked vgroup may still be committed)."""
        with self._lock:
            owner = self.owners.get((topic, group), {}).get(vgroup)
            member = self.members.get(consumer_id)
            if self.follower and (member is None or epoch > member.epoch):
                raise RebalanceInProgress(
                    f"consumer {consumer_id} at epoch {epoch}: this dnode has not learnt that "
                    "epoch from the mnode yet (it does within a heartbeat); retry"
                )
            if member is not None and member.group == group and shares(member.mode):
                self._check_sharer(member, topic, vgroup, epoch, commit)
                return
            if member is not None and member.group == group:
                _check_epoch(member, epoch)
            if owner is None or owner.consumer != consumer_id or epoch < owner.epoch:
                holder = "nobody" if owner is None else f"consumer {owner.consumer}"
                raise ConsumerFenced(
                    f"vgroup {vgroup} of topic {topic} is held by {holder} in group "
                    f"{group}, not by consumer {consumer_id} at epoch {epoch}: refresh the "
                    "assignment"
                )
            if owner.revoking and not commit:
                raise ConsumerFenced(
                    f"vgroup {vgroup} of topic {topic} moves to another consumer of group "
                    f"{group}: commit its position and refresh the assignment"
                )

    def _check_sharer(
        self, member: Member, topic: str, vgroup: int, epoch: int, commit: bool
    ) -> None:
        """A shared group's member may poll (and acknowledge) every vgroup of its topics,
        at any epoch it was given; it never commits offsets."""
        if commit:
            raise ConfigError(
                f"consumer group {member.group} is {member.mode}: its consumers acknowledge "
                "rows (consumer.ack) instead of committing offsets"
            )
        _check_epoch(member, epoch)
        if (topic, vgroup) not in member.assignment:
            raise ConsumerFenced(
                f"consumer {member.id} of shared group {member.group} is not subscribed to "
                f"vgroup {vgroup} of topic {topic}: refresh the assignment"
            )

    def held(self, group: str, topic: str, vgroup: int) -> bool:
        """Whether a live consumer of `group` holds the vgroup, or reads it in a shared
        group (refuses standalone commits)."""
        with self._lock:
            if vgroup in self.owners.get((topic, group), {}):
                return True
            return any(
                shares(m.mode) and (topic, vgroup) in m.assignment
                for m in self._in_group.get(group_of(group), {}).values()
                if m.group == group
            )

    def _member(self, consumer_id: int) -> Member:
        member = self.members.get(consumer_id)
        if member is None:
            raise ConsumerFenced(f"consumer {consumer_id} is not a member: subscribe again")
        return member

    def _vgroups(self, topic: str) -> list[int]:
        """The topic's vgroups; none once it was dropped (its subscribers hold nothing)."""
        try:
            return self.vgroups_of(topic)
        except NotFoundError:
            return []

    def _rebalance_all(self, member: Member) -> None:
        for topic in member.topics:
            self._rebalance(topic, member.group)

    def _rebalance(self, topic: str, group: str) -> None:
        """Plan the topic's vgroups among the group's subscribers (balanced, sticky) and
        apply the plan cooperatively: a free vgroup goes to its planned consumer at once;
        one a live consumer holds is first revoked from it (see Owner). Every member
        whose assignment changed gets a new epoch; held polls are woken."""
        self._touch(group)
        members = self._of_group(group)
        if members and shares(members[0].mode):
            self._share(topic, members)
            return
        subscribers = [m for m in members if topic in m.topics]
        key = (topic, group)
        before = dict(self.owners.get(key, {}))
        holders = {v: o.consumer for v, o in before.items() if o.consumer in self.members}
        vgroups = self._vgroups(topic) if subscribers else []
        wanted = assign(vgroups, [m.id for m in subscribers], holders)
        now = self.clock()
        after: dict[int, Owner] = {}
        for vgroup in set(before) | set(wanted):
            old, target = before.get(vgroup), wanted.get(vgroup)
            if old is not None and old.consumer in self.members:
                if old.consumer == target:
                    after[vgroup] = Owner(old.consumer, old.epoch)
                elif old.revoking:  # still letting go
                    after[vgroup] = old
                else:  # a live holder lets go first
                    after[vgroup] = Owner(old.consumer, old.epoch, revoking=True, since=now)
                continue
            self._fold_rows((topic, group, vgroup))
            if target is not None:
                after[vgroup] = Owner(target, 0)  # epoch set below, after the bump
        self.plans[key] = wanted
        self._note(topic, group, *wanted, *before)
        changed = self._apply_owners(topic, group, before, after)
        if changed or before != after:  # the last consumer's leave changes owners only
            self._record(topic, group, len(subscribers), changed)
        if changed:
            for listener in self.listeners:
                listener()

    def _share(self, topic: str, members: list[Member]) -> None:
        """A shared group: each subscriber of `topic` is given all its vgroups, and the
        vnodes lease rows to them (server/dnode/share_polls.py); there are no owners. An epoch
        rises when a member's assignment changes (the topic's vgroups did)."""
        vgroups = self._vgroups(topic)
        now_us = self.wall_us()
        changed: set[int] = set()
        for member in members:
            mine = {(topic, v) for v in vgroups} if topic in member.topics else set()
            assignment = frozenset({(t, v) for t, v in member.assignment if t != topic} | mine)
            if not mine and any(t == topic for t, _ in member.assignment):
                self._departed(member.id, (topic,))  # it stopped reading the topic
            if assignment != member.assignment:
                member.assignment = assignment
                member.epoch += 1
                member.rebalanced_us = now_us
                changed.add(member.id)
                self.assignment_changes += 1
                _log_assigned(member, topic, {v for _, v in mine})
            self._set_status(member, "ready")
        if changed:
            subscribers = sum(topic in m.topics for m in members)
            self._record(topic, members[0].group, subscribers, changed)
            for listener in self.listeners:
                listener()

    def _record(self, topic: str, group: str, consumers: int, changed: set[int]) -> None:
        """Note a rebalance of (topic, group) that changed these members' assignments."""
        cause, by = self._cause
        assigned = tuple(
            (m, tuple(sorted(v for t, v in self.members[m].assignment if t == topic)))
            for m in sorted(changed) if m in self.members
        )  # fmt: skip
        self.rebalances.add(Rebalance(self.wall_us(), topic, group, cause, by, consumers, assigned))

    def _apply_owners(
        self, topic: str, group: str, before: dict[int, Owner], after: dict[int, Owner]
    ) -> set[int]:
        """Install `after` as the owners and bring members' assignments, epochs and
        status in line with it; the ids of members whose assignment changed."""

        def serving(owners: dict[int, Owner], member: int) -> set[int]:
            return {v for v, o in owners.items() if o.consumer == member and not o.revoking}

        changed: set[int] = set()
        now_us = self.wall_us()
        members = self._of_group(group)
        for member in members:
            mine = serving(after, member.id)
            if mine != serving(before, member.id):
                changed.add(member.id)
                member.epoch += 1
                member.rebalanced_us = now_us
                self.assignment_changes += 1
                _log_assigned(member, topic, mine)
            kept = {(t, v) for t, v in member.assignment if t != topic}
            member.assignment = frozenset(kept | {(topic, v) for v in mine})
        for vgroup, owner in after.items():
            if owner.epoch == 0:
                after[vgroup] = Owner(owner.consumer, self.members[owner.consumer].epoch)
            elif owner.revoking and not owner.revoked_at:
                holder = self.members[owner.consumer].epoch  # raised above: it lost one
                after[vgroup] = replace(owner, revoked_at=holder)
        if after:
            self.owners[topic, group] = after
        else:
            self.owners.pop((topic, group), None)
        for member in members:  # after the owners: status reads them
            self._set_status(member, "rebalancing" if self._incoming(member) else "ready")
        return changed

    def _set_status(self, member: Member, status: Status) -> None:
        """`member`'s status; the time it was `rebalancing` goes to `settles` when it
        turns `ready` (how long a rebalance took to settle for it: /metrics)."""
        if status == "rebalancing" and member.status != "rebalancing":
            member.rebalancing_since = self.clock()
        elif status == "ready" and member.rebalancing_since is not None:
            self.settles.observe(max(0.0, self.clock() - member.rebalancing_since))
            member.rebalancing_since = None
        member.status = status

    def _incoming(self, member: Member) -> bool:
        """Whether the member waits for a vgroup that its holder is still letting go
        (only its own topics' plans can name it: a rebalance replans a topic it left)."""
        for topic in member.topics:
            plan = self.plans.get((topic, member.group), {})
            owners = self.owners.get((topic, member.group), {})
            for vgroup, planned in plan.items():
                owner = owners.get(vgroup)
                if planned == member.id and owner is not None and owner.consumer != member.id:
                    return True
        return False

    def _let_go(self, member: Member, topic: str) -> None:
        """The member stops consuming `topic`: its vgroups there are free at once."""
        owners = self.owners.get((topic, member.group), {})
        for vgroup in [v for v, o in owners.items() if o.consumer == member.id]:
            del owners[vgroup]
            self._fold_rows((topic, member.group, vgroup))

    def _fold_rows(self, sub: SubKey) -> None:
        """The leaving holder's rows stay with the group."""
        done = self.progress.pop(sub, None)
        if done is not None:
            self.rows_before[sub] = self.rows_before.get(sub, 0) + done.rows
            self._note(*sub)

    def committed_all(
        self, consumer_id: int, group: str, vgroups: Iterable[tuple[str, int]], epoch: int
    ) -> None:
        """`committed` for each (subscription, vgroup) of one commit, looked at only
        when some vgroup is being revoked at all: a consumer of many bindings commits
        hundreds at once, and almost always nothing is being revoked."""
        if self.follower:
            return
        with self._lock:
            if not self._revoking():
                return
            for topic, vgroup in vgroups:
                self.committed(consumer_id, group, topic, vgroup, epoch)

    def committed(self, consumer_id: int, group: str, topic: str, vgroup: int, epoch: int) -> None:
        """The holder committed the vgroup at `epoch`: if the vgroup is being revoked
        and the commit was sent knowing it (at the revoking epoch or later), that was
        its final commit and it lets go. An older commit (auto-commit racing the
        revocation) is stored but lets nothing go, so the final commit is still taken. A
        dnode's copy decides nothing: the holder drops the vgroup from its next heartbeat
        to the mnode, which lets it go there."""
        if self.follower:
            return
        with self._lock:
            owner = self.owners.get((topic, group), {}).get(vgroup)
            if owner is not None and owner.revoking and epoch >= owner.revoked_at:
                self.release(consumer_id, group, topic, vgroup)

    def release(self, consumer_id: int, group: str, topic: str, vgroup: int) -> None:
        """The holder let go of a vgroup being revoked: it goes to its next owner."""
        with self._lock:
            owners = self.owners.get((topic, group), {})
            owner = owners.get(vgroup)
            if owner is None or owner.consumer != consumer_id or not owner.revoking:
                return
            del owners[vgroup]
            self._fold_rows((topic, group, vgroup))
            self._cause = ("handover", consumer_id)
            self._rebalance(topic, group)


def _member_doc(m: Member) -> dict[str, Any]:
    live = m.liveness
    return {
        "id": m.id, "group": m.group, "client_id": m.client_id, "user": m.user,
        "fqdn": m.fqdn, "topics": list(m.topics),
        "liveness": [live.session_timeout_ms, live.max_poll_interval_ms,
                     live.heartbeat_interval_ms],
        "parameters": m.parameters, "joined_us": m.joined_us,
        "subscribed_us": m.subscribed_us, "rebalanced_us": m.rebalanced_us,
        "epoch": m.epoch, "status": m.status,
        "assignment": [list(a) for a in sorted(m.assignment)], "mode": m.mode,
        "share": m.share.doc() if m.share is not None else None,
    }  # fmt: skip


def _member_of(doc: dict[str, Any], now: float) -> Member:
    return Member(
        doc["id"], doc["group"], doc["client_id"], doc["user"], doc["fqdn"],
        tuple(doc["topics"]), Liveness(*doc["liveness"]), doc["parameters"], now, now,
        joined_us=doc["joined_us"], subscribed_us=doc["subscribed_us"],
        rebalanced_us=doc["rebalanced_us"], epoch=doc["epoch"], status=doc["status"],
        assignment=frozenset((t, v) for t, v in doc["assignment"]),
        mode=doc.get("mode", DEFAULT_GROUP_TYPE),  # files before group.type: vgroup groups
        share=ShareSettings.of_doc(doc["share"]) if doc.get("share") else None,
    )  # fmt: skip


def _check_epoch(member: Member, epoch: int) -> None:
    """The vnodes share the mnode's state, so no epoch is newer than they know: one above
    the member's was never given out, and retrying it cannot succeed."""
    if epoch > member.epoch:
        raise ConsumerFenced(
            f"consumer {member.id} sent epoch {epoch}, above its current epoch "
            f"{member.epoch}: refresh the assignment and use its epoch"
        )


def _expired(member: Member, now: float) -> bool:
    return now > _deadline(member)


def _deadline(member: Member) -> float:
    """When the member runs out of session or poll interval, unless it calls again."""
    live = member.liveness
    return min(
        member.last_heartbeat + live.session_timeout_ms / 1000,
        member.last_poll + live.max_poll_interval_ms / 1000,
    )


def _of(key: tuple[str, str, *tuple[object, ...]], topic: str, group: str | None) -> bool:
    """Whether a (subscription, group, ...) key is of `topic` (and `group` or one of its
    lanes, if given)."""
    return topic_of(key[0]) == topic and (group is None or of_group(key[1], group))


def _log_assigned(member: Member, topic: str, vgroups: set[int]) -> None:
    """The `assign` event: the member now serves these vgroups of `topic`, at its new
    epoch (a vgroup it gave up is being revoked, or moved: the others' events say)."""
    log.info(
        "rebalance: consumer %d of group %s serves vgroups %s of topic %s at epoch %d",
        member.id, member.group, sorted(vgroups), topic, member.epoch,
        extra=event_fields(
            "assign", consumer_id=member.id, group=member.group, topic=topic,
            vgroups=sorted(vgroups), epoch=member.epoch,
        ),
    )  # fmt: skip
