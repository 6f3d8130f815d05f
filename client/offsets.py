"""The consumer's offsets as flows: what a commit stores and storing it (auto-commit
included), committed offsets, positions, seek, and the vnodes' retained ranges.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial

from sqltopic.client.acks import Acks
from sqltopic.client.effects import Cancel, Flow
from sqltopic.client.message import Message, TopicPartition, VgroupLag
from sqltopic.client.state import Key, offset_of
from sqltopic.errors import ConfigError, ConsumerFenced, Error, OffsetOutOfRange
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

# TDengine's examples rewind with seek(offset 0): its versions start at 0, ours at 1, so
# 0 means "the first retained version" here.
REWIND = 0


class Offsets(Acks):
    """Flows on positions and committed offsets."""

    def offsets_to_commit(
        self, message: Message | None, offsets: Sequence[TopicPartition] | None
    ) -> list[pb.TopicVgroupOffset]:
        """What `commit(message, offsets)` stores: `message`'s end_offset, the given
        offsets, or (neither) every assigned vgroup's position."""
        self.check_open()
        if message is not None and offsets is not None:
            raise ConfigError("commit: give a message or offsets, not both")
        if self.sharing:
            raise ConfigError(
                f"commit: group.type is {self.config.group_type}, which acknowledges rows "
                "instead of committing offsets: use ack(message)"
            )
        if message is not None:
            return [offset_of(message.topic, message.vgroup, message.end_offset)]
        if offsets is None:
            return self.positions(self.held)
        # As TDengine: a vgroup with no position yet (offset None or negative, e.g. from
        # assignment() before the first poll) is skipped, so commit(offsets=assignment())
        # stores what there is to store.
        return [
            offset_of(p.topic, p.vgroup, p.offset)
            for p in offsets
            if p.offset is not None and p.offset >= 0
        ]

    def commit(self, offsets: list[pb.TopicVgroupOffset]) -> Flow[None]:
        """Store `offsets` on their vnodes; ConsumerFenced (vgroup no longer ours) also
        schedules a refresh of the assignment."""
        for endpoint, items in self._by_endpoint(offsets, lambda o: (o.topic, o.vgroup)):
            request = pb.CommitRequest(
                consumer_id=self.consumer_id,
                group_id=self.offsets_group,
                epoch=self.epoch,
                offsets=items,
            )
            try:
                yield from self._retrying(partial(self._rpc, "vnode", "Commit", request, endpoint))
            except ConsumerFenced:
                self.need_refresh = True
                for o in items:
                    if (o.topic, o.vgroup) in self.held:
                        self.held[(o.topic, o.vgroup)].fenced = True
                raise
            self._committed.update({(o.topic, o.vgroup): o.offset for o in items})

    def background_commit(self, offsets: list[pb.TopicVgroupOffset]) -> Flow[None]:
        """The periodic auto-commit of `offsets` (taken when it was due, before the
        poll handed out its message), run on its own (a `Spawn` of poll): one at a
        time, so that an older commit never lands after a newer one."""
        try:
            yield from self._quietly("auto-commit", self.commit(offsets), logging.WARNING)
        finally:
            self.auto_committing = False

    def changed_offsets(self) -> list[pb.TopicVgroupOffset]:
        """The positions of the vgroups held that changed since we last stored them."""
        offsets = self.positions(self.held)
        return [o for o in offsets if self._committed.get((o.topic, o.vgroup)) != o.offset]

    def _auto_commit(
        self, changed_only: bool, keys: Iterable[Key] | None = None, level: int = logging.WARNING
    ) -> Flow[None]:
        if not self.config.enable_auto_commit or not self.consumer_id:
            return
        if self.sharing:  # the rows handed out are done: the application polls again
            if changed_only:  # a poll: the next polls carry them
                self.queue_unsettled()
            else:  # close, unsubscribe, subscribe: send them now
                yield from self._quietly("acknowledging", self.accept_unsettled(), level)
            return
        if keys is None:  # a commit of a few vgroups (being let go) is not the periodic one
            self._commit_at = self.next_commit_at()
        # (the periodic commit, of changed positions only, is poll's background_commit)
        offsets = self.positions(self.held if keys is None else keys)
        if offsets:
            yield from self._quietly("auto-commit", self.commit(offsets), level)

    def position(self, parts: Sequence[TopicPartition]) -> list[TopicPartition]:
        self.check_open()
        return [replace(p, offset=self._position_of((p.topic, p.vgroup))) for p in parts]

    def committed(
        self, parts: Sequence[TopicPartition], timeout: float | None = None
    ) -> Flow[list[TopicPartition]]:
        """The group's committed offsets (offset None where it never committed). With a
        `timeout` (seconds, as confluent-kafka's), each call may take that long at most."""
        self.check_open()
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"committed: timeout {timeout} is not a number of seconds > 0")
        found: dict[Key, int | None] = {}
        for endpoint, items in self._by_endpoint(parts, lambda p: (p.topic, p.vgroup)):
            vgroups = [pb.TopicVgroup(topic=p.topic, vgroup=p.vgroup) for p in items]
            request = pb.CommittedRequest(group_id=self.offsets_group, vgroups=vgroups)
            answer: pb.CommittedResponse = yield from self._rpc(
                "vnode", "Committed", request, endpoint, timeout
            )
            for o in answer.offsets:
                found[(o.topic, o.vgroup)] = o.offset if o.HasField("offset") else None
        return [replace(p, offset=found.get((p.topic, p.vgroup))) for p in parts]

    def seek(self, part: TopicPartition) -> Flow[None]:
        """Move the position of an assigned vgroup (never its committed offset) to a
        version in the vnode's [begin, end], or to `begin` for offset 0 (REWIND); what was
        fetched from the old one is dropped."""
        self.check_open()
        key = (part.topic, part.vgroup)
        if part.offset is None:
            raise ConfigError(f"seek: {part} has no offset; set .offset to the version to read")
        if key not in self.held:
            raise Error(
                f"seek: topic {part.topic} vgroup {part.vgroup} is not assigned to this "
                f"consumer (assigned: {sorted(self.held) or 'none'}); see assignment()"
            )
        begin, end = (yield from self._ranges([key]))[key]
        target = begin if part.offset == REWIND else part.offset
        if not begin <= target <= end:
            raise OffsetOutOfRange(
                f"seek: offset {part.offset} of topic {part.topic} vgroup {part.vgroup} is "
                f"outside the retained range {begin}..{end}",
                begin=begin,
                end=end,
            )
        yield from self._move(key, target)

    def _move(self, key: Key, target: int) -> Flow[None]:
        """The position of assigned vgroup `key` to `target`; what was fetched from the
        old one is dropped."""
        held = self.held.get(key)
        if held is not None:
            stale, held.ticket = held.ticket, None
            held.position, held.ready, held.retry_at = target, None, 0.0
            held.more.clear()
            if stale is not None:
                self._in_flight.pop(stale, None)
                self.grants.pop(stale, None)
                yield Cancel((stale,))

    def lag(self) -> Flow[list[VgroupLag]]:
        """Each assigned vgroup's lag from this consumer's position (see VgroupLag), in
        (topic, vgroup) order: one OffsetRange call per vnode host."""
        self.check_open()
        keys = sorted(self.held)
        found: dict[Key, VgroupLag] = {}
        for endpoint, items in self._by_endpoint(keys, lambda key: key):
            positions = [self._position_of(key) for key in items]
            request = pb.OffsetRangeRequest(
                vgroups=[pb.TopicVgroup(topic=t, vgroup=v) for t, v in items],
                positions=[-1 if p is None else p for p in positions],
            )
            answer: pb.OffsetRangeResponse = yield from self._rpc(
                "vnode", "OffsetRange", request, endpoint
            )
            for key, position, r in zip(items, positions, answer.ranges, strict=True):
                known = position is not None
                found[key] = VgroupLag(
                    key[0], key[1], position, r.end, r.lag_rows if known else None,
                    r.lag_ms if known else None,
                )  # fmt: skip
        return [found[key] for key in keys]

    def offsets_for_times(
        self, parts: Sequence[TopicPartition], timeout: float | None = None
    ) -> Flow[list[TopicPartition]]:
        """Kafka's offsetsForTimes: `parts` with `offset` a time in milliseconds since
        the epoch; answers them with `offset` the first version ingested at or after it
        (the vnode's `end` when none was; its first retained version for a time before
        it), and `begin`/`end` the retained range. Any vgroup of a topic the user may
        consume, assigned or not."""
        self.check_open()
        if timeout is not None and timeout <= 0:
            raise ConfigError(
                f"offsets_for_times: timeout {timeout} is not a number of seconds > 0"
            )
        times = [check_time_ms("offsets_for_times", part.offset, part) for part in parts]
        numbered = list(enumerate(parts))
        found: dict[int, pb.VgroupTimeOffset] = {}
        for endpoint, items in self._by_endpoint(numbered, lambda n: (n[1].topic, n[1].vgroup)):
            request = pb.OffsetsForTimesRequest(
                vgroups=[
                    pb.TopicVgroupTime(topic=p.topic, vgroup=p.vgroup, time_ms=times[i])
                    for i, p in items
                ]
            )
            answer: pb.OffsetsForTimesResponse = yield from self._rpc(
                "vnode", "OffsetsForTimes", request, endpoint, timeout
            )
            if len(answer.offsets) != len(items):
                raise Error(
                    f"offsets_for_times: the server answered {len(answer.offsets)} look-ups "
                    f"of {len(items)}"
                )
            found.update((i, o) for (i, _), o in zip(items, answer.offsets, strict=True))
        return [
            replace(p, offset=found[i].offset, begin=found[i].begin, end=found[i].end)
            for i, p in numbered
        ]

    def seek_to_time(self, when: int | datetime) -> Flow[list[TopicPartition]]:
        """Every assigned vgroup's position to the first version ingested at or after
        `when` (milliseconds since the epoch, or a datetime: naive ones are local time;
        see offsets_for_times); the positions set, with the retained ranges."""
        self.check_open()
        when_ms = check_time_ms("seek_to_time", time_ms(when), None)
        parts = [TopicPartition(t, v, when_ms) for t, v in self.held]
        found = yield from self.offsets_for_times(parts)
        for part in found:
            assert part.offset is not None
            yield from self._move((part.topic, part.vgroup), part.offset)
        return found

    def _ranges(self, keys: Sequence[Key]) -> Flow[dict[Key, tuple[int, int]]]:
        ranges: dict[Key, tuple[int, int]] = {}
        for endpoint, items in self._by_endpoint(keys, lambda key: key):
            vgroups = [pb.TopicVgroup(topic=t, vgroup=v) for t, v in items]
            request = pb.OffsetRangeRequest(vgroups=vgroups)
            answer: pb.OffsetRangeResponse = yield from self._rpc(
                "vnode", "OffsetRange", request, endpoint
            )
            ranges.update({(r.topic, r.vgroup): (r.begin, r.end) for r in answer.ranges})
        return ranges


def time_ms(when: object) -> object:
    """A datetime as milliseconds since the epoch (naive: local time, as Python reads
    it); anything else as given, for `check_time_ms` to judge."""
    if isinstance(when, datetime):
        return int(when.timestamp() * 1000)
    return when


def check_time_ms(call: str, value: object, part: TopicPartition | None) -> int:
    """`value`, milliseconds since the epoch; ConfigError unless it is an int >= 0."""
    where = f" of {part}" if part is not None else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{call}: the time{where} is {value!r}; give milliseconds since the epoch (an int)"
        )
    if value < 0:
        raise ConfigError(
            f"{call}: the time{where} is {value}, before the epoch; give milliseconds "
            "since 1970-01-01 UTC"
        )
    return value
