"""The mnode's consumer coordinator: group membership, assignments, epochs and fencing.

Consumers join a group with a topic list; for every (topic, group) the coordinator
assigns the topic's vgroups among the group's consumers subscribed to that topic
(`assign.assign`: balanced and sticky). Every change to a consumer's assignment raises
its epoch. Vnodes ask `check_owner` before serving a poll or commit, so a consumer that
lost a vgroup is fenced off at once. A consumer silent for `session.timeout.ms`, or
without a poll for `max.poll.interval.ms`, is removed by `expire`, which the server calls
on a timer. State is in memory: after a server restart consumers are unknown, get
REMOVED on their next heartbeat, rejoin, and resume from their committed offsets.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

from sqltopic.errors import ConfigError, ConsumerFenced, NotFoundError, RebalanceInProgress
from sqltopic.server.assign import assign

Status = Literal["ready", "rebalancing", "removed"]
Clock = Callable[[], float]

# SPEC §4 defaults and ranges of the liveness settings (TDengine's), in ms.
DEFAULT_SESSION_TIMEOUT_MS = 12_000
SESSION_TIMEOUT_RANGE_MS = (6_000, 1_800_000)
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000
MIN_MAX_POLL_INTERVAL_MS = 1_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
MIN_HEARTBEAT_INTERVAL_MS = 1_000
# group.id limits (TDengine: 192 characters; ':' separates group and topic in its keys).
MAX_GROUP_ID = 192
MAX_CLIENT_ID = 255


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


@dataclass(frozen=True)
class Progress:
    """What a consumer last reported for a vgroup it holds: its position (None before
    its first poll there) and the rows delivered since it got the vgroup."""

    position: int | None
    rows: int


SubKey = tuple[str, str, int]  # (topic, group, vgroup)


@dataclass(frozen=True)
class Owner:
    """Who holds a vgroup of a (topic, group): the consumer and the epoch it got it at."""

    consumer: int
    epoch: int


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
    # the holder's last report per (topic, group, vgroup), and rows of earlier holders
    progress: dict[SubKey, Progress] = field(default_factory=dict)
    rows_before: dict[SubKey, int] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.RLock = field(default_factory=threading.RLock)

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
    ) -> Member:
        """Join `group`, or change the topics of a member; returns the member."""
        _check_group(group, client_id)
        wanted = tuple(dict.fromkeys(topics))
        with self._lock:
            now = self.clock()
            member = self.members.get(consumer_id)
            if member is None or member.group != group:
                member = Member(
                    next(self._ids), group, client_id, user, fqdn, (),
                    liveness or Liveness(), parameters or {}, now, now, self.wall_us(),
                )  # fmt: skip
                self.members[member.id] = member
            member.last_heartbeat = member.last_poll = now
            touched = set(member.topics) | set(wanted)
            member.topics = wanted
            member.subscribed_us = self.wall_us()
            for topic in touched:
                self._rebalance(topic, group)
            return member

    def unsubscribe(
        self, consumer_id: int, progress: Iterable[tuple[str, int, Progress]] = ()
    ) -> Member:
        """Drop every topic of the member (it stays a member); its vgroups move at once."""
        with self._lock:
            member = self._member(consumer_id)
            self._report(member, progress)
            return self.subscribe(member.id, member.group, (), client_id=member.client_id)

    def close(self, consumer_id: int, progress: Iterable[tuple[str, int, Progress]] = ()) -> None:
        """The member leaves; its vgroups move at once. Unknown ids are ignored."""
        with self._lock:
            member = self.members.get(consumer_id)
            if member is not None:
                self._report(member, progress)
                del self.members[consumer_id]
                self._rebalance_all(member)

    def heartbeat(
        self, consumer_id: int, polled: bool, progress: Iterable[tuple[str, int, Progress]] = ()
    ) -> Member | None:
        """Note the member alive (and polling) and its progress on the vgroups it holds;
        None when it is not a member (removed)."""
        with self._lock:
            member = self.members.get(consumer_id)
            if member is None:
                return None
            member.last_heartbeat = self.clock()
            if polled:
                member.last_poll = member.last_heartbeat
            self._report(member, progress)
            return member

    def _report(self, member: Member, progress: Iterable[tuple[str, int, Progress]]) -> None:
        """Keep progress reports for vgroups the member still holds (a late report of a
        vgroup that moved on must not count its rows twice)."""
        for topic, vgroup, report in progress:
            owner = self.owners.get((topic, member.group), {}).get(vgroup)
            if owner is not None and owner.consumer == member.id:
                self.progress[topic, member.group, vgroup] = report

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

    def snapshot(self) -> tuple[list[Member], dict[tuple[str, str], dict[int, Owner]]]:
        """Copies of the members and owners, for SHOW: consistent with each other."""
        with self._lock:
            members = [replace(m) for m in self.members.values()]
            return members, {k: dict(v) for k, v in self.owners.items()}

    def progress_of(self, topic: str, group: str, vgroup: int) -> Progress | None:
        with self._lock:
            return self.progress.get((topic, group, vgroup))

    def subscribers(self, topic: str, group: str | None = None) -> list[Member]:
        """Live members subscribed to `topic` (in `group`, if given)."""
        with self._lock:
            return [
                m for m in self.members.values()
                if topic in m.topics and (group is None or m.group == group)
            ]  # fmt: skip

    def remove(self, consumer_ids: Iterable[int]) -> None:
        """Remove members now (DROP CONSUMER GROUP ... FORCE): they are told REMOVED at
        their next heartbeat and fenced off at once."""
        with self._lock:
            for consumer_id in consumer_ids:
                member = self.members.pop(consumer_id, None)
                if member is not None:
                    member.status = "removed"
                    self._rebalance_all(member)

    def forget_topic(self, topic: str, group: str | None = None) -> None:
        """Drop the assignments and counters of a dropped topic (or of one group on it);
        subscribers keep the name and learn from their heartbeat that it is gone."""
        with self._lock:
            for key in [k for k in self.owners if k[0] == topic and group in (None, k[1])]:
                del self.owners[key]
            for table in (self.progress, self.rows_before):
                for sub in [k for k in table if k[0] == topic and group in (None, k[1])]:
                    del table[sub]

    def expire(self) -> list[Member]:
        """Remove members past their session timeout or max poll interval."""
        with self._lock:
            now = self.clock()
            dead = [m for m in self.members.values() if _expired(m, now)]
            for member in dead:
                del self.members[member.id]
                member.status = "removed"
                self._rebalance_all(member)
            return dead

    def check_owner(
        self, consumer_id: int, group: str, topic: str, vgroup: int, epoch: int
    ) -> None:
        """Fencing: pass only if the consumer holds the vgroup at an epoch it knows."""
        with self._lock:
            owner = self.owners.get((topic, group), {}).get(vgroup)
            member = self.members.get(consumer_id)
            if member is not None and member.group == group and epoch > member.epoch:
                raise RebalanceInProgress(
                    f"consumer {consumer_id} sent epoch {epoch}, the mnode is at "
                    f"{member.epoch}: retry shortly"
                )
            if owner is None or owner.consumer != consumer_id or epoch < owner.epoch:
                holder = "nobody" if owner is None else f"consumer {owner.consumer}"
                raise ConsumerFenced(
                    f"vgroup {vgroup} of topic {topic} is held by {holder} in group "
                    f"{group}, not by consumer {consumer_id} at epoch {epoch}: refresh the "
                    "assignment"
                )

    def held(self, group: str, topic: str, vgroup: int) -> bool:
        """Whether a live consumer of `group` holds the vgroup (refuses standalone commits)."""
        with self._lock:
            return vgroup in self.owners.get((topic, group), {})

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
        """Reassign the topic's vgroups among the group's subscribers; bump the epoch of
        every member whose assignment changed."""
        subscribers = [m for m in self.members.values() if m.group == group and topic in m.topics]
        key = (topic, group)
        current = {v: o.consumer for v, o in self.owners.get(key, {}).items()}
        vgroups = self._vgroups(topic) if subscribers else []
        wanted = assign(vgroups, [m.id for m in subscribers], current)
        changed = {c for v, c in current.items() if wanted.get(v) != c}
        changed |= {c for v, c in wanted.items() if current.get(v) != c}
        now_us = self.wall_us()
        for member in self.members.values():
            if member.id in changed:
                member.epoch += 1
                member.rebalanced_us = now_us
            if member.group == group:
                kept = {(t, v) for t, v in member.assignment if t != topic}
                mine = {(topic, v) for v, c in wanted.items() if c == member.id}
                member.assignment = frozenset(kept | mine)
        for vgroup, holder in current.items():
            if wanted.get(vgroup) != holder:  # the holder's rows stay with the group
                sub = (topic, group, vgroup)
                done = self.progress.pop(sub, None)
                if done is not None:
                    self.rows_before[sub] = self.rows_before.get(sub, 0) + done.rows
        owners = {v: Owner(c, self.members[c].epoch) for v, c in wanted.items()}
        previous = self.owners.get(key, {})
        # an unchanged holder keeps the epoch it got the vgroup at: its polls stay valid
        owners.update({v: previous[v] for v, c in wanted.items() if current.get(v) == c})
        if owners:
            self.owners[key] = owners
        else:
            self.owners.pop(key, None)
        if changed:
            for listener in self.listeners:
                listener()


def _expired(member: Member, now: float) -> bool:
    live = member.liveness
    return (
        now - member.last_heartbeat > live.session_timeout_ms / 1000
        or now - member.last_poll > live.max_poll_interval_ms / 1000
    )


def _check_group(group: str, client_id: str) -> None:
    if not group:
        raise ConfigError("group.id: required; give the consumer group's name")
    if len(group) > MAX_GROUP_ID or ":" in group:
        raise ConfigError(f"group.id: {group!r} must be 1..{MAX_GROUP_ID} characters without ':'")
    if len(client_id) > MAX_CLIENT_ID:
        raise ConfigError(f"client.id: longer than {MAX_CLIENT_ID} characters")
