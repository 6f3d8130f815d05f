"""taospy's TMQ `Consumer` over `sqltopic.Consumer` (see `sqltopic.taos`): the same
methods, arguments, return values and TmqError as `taos.tmq.Consumer`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TypeVar

from sqltopic.client.consumer import Consumer as SqlConsumer
from sqltopic.client.message import TopicPartition as SqlPartition
from sqltopic.client.taos_config import tmq_settings
from sqltopic.client.taos_errors import INVALID_TOPIC, INVALID_VGID, TmqError, tmq_error
from sqltopic.client.taos_message import Message, TopicPartition
from sqltopic.errors import Error, NoCommittedOffset

log = logging.getLogger("sqltopic.taos")
T = TypeVar("T")
# As TDengine: an offset that is not known (-1 is its OFFSET_INVALID).
NO_OFFSET = -1
# `for msg in consumer` waits in slices this long (taospy's default poll timeout).
ITERATION_POLL_S = 1.0


def _tmq(call: Callable[[], T]) -> T:
    """`call()`, with a sqltopic.Error raised as a TmqError (of the same class too)."""
    try:
        return call()
    except Error as err:
        raise tmq_error(err) from None


class Consumer:
    """taospy's `taos.tmq.Consumer(configs)`: `td.connect.*` keys and the TMQ keys of
    TDengine's docs (see docs/client.md for the mapping)."""

    def __init__(self, configs: Mapping[str, object]) -> None:
        settings = tmq_settings(configs)
        self._decode_binary = settings.decode_binary
        self._reset = settings.config.auto_offset_reset
        self._consumer = _tmq(lambda: SqlConsumer(settings.config))
        self._subscribed = False
        self._closed = False

    def subscribe(self, topics: Sequence[str]) -> None:
        if not topics:
            raise TmqError("Unset topic for Consumer")
        _tmq(lambda: self._consumer.subscribe(topics))
        self._subscribed = True

    def unsubscribe(self) -> None:
        _tmq(self._consumer.unsubscribe)
        self._subscribed = False

    def poll(self, timeout: float | None = 1.0) -> Message | None:
        """A Message or None after `timeout` seconds (negative or None: no limit, as
        tmq_consumer_poll's -1); errors are raised as TmqError."""
        if not self._subscribed:
            raise TmqError("unsubscribe topic: poll needs subscribe(topics) first")
        wait = None if timeout is not None and timeout < 0 else timeout  # C: -1 = no limit
        message = _tmq(lambda: self._consumer.poll(wait))
        if message is None:
            return None
        if message.kind == "data_lost":
            log.warning(
                "topic %s vgroup %s: versions %s..%s were removed by retention before they "
                "were read",
                message.topic, message.vgroup, message.offset, message.end_offset - 1,
            )  # fmt: skip
        return Message(message, decode_binary=self._decode_binary)

    def commit(
        self, message: Message | None = None, offsets: Sequence[TopicPartition] | None = None
    ) -> None:
        """Commit `message`'s vgroup past it, the given `offsets` (those without one, -1,
        are skipped), or every assigned vgroup's position."""
        if message:
            if not isinstance(message, Message) or message.message is None:
                raise TmqError(msg="Invalid message type")
            sql_message = message.message
            _tmq(lambda: self._consumer.commit(sql_message))
            return
        if offsets and isinstance(offsets, list):
            if not all(isinstance(p, TopicPartition) for p in offsets):
                raise TmqError(msg="Invalid offset type")
            parts = [SqlPartition(p.topic, p.partition, p.offset) for p in offsets]
            _tmq(lambda: self._consumer.commit(offsets=parts))
            return
        _tmq(self._consumer.commit)

    def assignment(self) -> list[TopicPartition] | None:
        """The assigned vgroups (None before subscribe): `offset` is the position, or
        before the first poll where the consumer will start (the committed offset, else
        `begin` for earliest, `end` for latest, -1 for none); begin/end the vnode's range."""
        if not self._consumer.subscription():
            return None
        parts = _tmq(self._consumer.assignment)
        return self._starts(parts)

    def seek(self, partition: TopicPartition) -> None:
        """Read `partition.partition` from `partition.offset` on (0: the first retained
        version); outside the vnode's [begin, end] a TmqError (OffsetOutOfRange)."""
        target = SqlPartition(partition.topic, partition.partition, partition.offset)
        try:
            self._consumer.seek(target)
        except Error as err:
            errno = None
            if type(err) is Error:  # not assigned: TDengine tells a topic from a vgroup
                subscribed = partition.topic in self._consumer.subscription()
                errno = INVALID_VGID if subscribed else INVALID_TOPIC
            raise tmq_error(err, errno) from None

    def committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Fills in each partition's committed offset (a TmqError where there is none,
        as taospy) and returns the list."""
        self._check(partitions)
        parts = [SqlPartition(p.topic, p.partition) for p in partitions]
        found = _tmq(lambda: self._consumer.committed(parts))
        for partition, part in zip(partitions, found, strict=True):
            if part.offset is None:
                raise tmq_error(NoCommittedOffset(
                    f"committed: group has no committed offset on topic {part.topic} "
                    f"vgroup {part.vgroup}"
                ))  # fmt: skip
            partition.offset = part.offset
        return partitions

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Fills in each partition's position (where the consumer will read next) and
        returns the list."""
        self._check(partitions)
        assigned = _tmq(self._consumer.assignment)
        starts = {(p.topic, p.partition): p for p in self._starts(assigned)}
        for partition in partitions:
            start = starts.get((partition.topic, partition.partition))
            if start is None:
                raise TmqError(
                    f"position: topic {partition.topic} vgroup {partition.partition} is not "
                    "assigned to this consumer; see assignment()"
                )
            partition.offset = start.offset
        return partitions

    def list_topics(self) -> list[str]:
        """The subscribed topics."""
        return self._consumer.subscription()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _tmq(self._consumer.close)

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        while True:
            if self._closed:
                raise StopIteration("Tmq consumer is closed")
            message = self.poll(ITERATION_POLL_S)
            if message is not None:
                return message

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _starts(self, parts: list[SqlPartition]) -> list[TopicPartition]:
        """`parts` as taospy's, an unset position replaced by where polling will start."""
        unset = [p for p in parts if p.offset is None]
        committed = {}
        if unset:
            found = _tmq(lambda: self._consumer.committed(unset))
            committed = {(p.topic, p.vgroup): p.offset for p in found}
        result = []
        for p in parts:
            offset = p.offset if p.offset is not None else committed.get((p.topic, p.vgroup))
            if offset is None:
                offset = {"earliest": p.begin, "latest": p.end}.get(self._reset)
            offset = NO_OFFSET if offset is None else offset
            result.append(TopicPartition(p.topic, p.vgroup, offset, p.begin or 0, p.end or 0))
        return result

    @staticmethod
    def _check(partitions: list[TopicPartition]) -> None:
        if not all(isinstance(p, TopicPartition) for p in partitions):
            raise TmqError(msg="Invalid partition type")
