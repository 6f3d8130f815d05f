"""A shared group's acknowledgements as flows: `ack` and `nack` of a message's rows, and
the implicit acknowledgement of every row handed out (with `enable.auto.commit`).

In a shared group the vnodes lease rows to consumers; each row of a message carries its
id, and the consumer settles it with `Vnode.Acknowledge`: accepted (done) or released
(delivered again). The state keeps the data messages handed out with rows not settled
yet (`unsettled`), so that an implicit acknowledgement (the next poll, a commit, close)
accepts exactly those rows, and a row is never settled twice by this consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqltopic.client.config import SHARING_TYPES
from sqltopic.client.effects import Flow
from sqltopic.client.message import Message
from sqltopic.client.state import CoreState, Key, RowIds
from sqltopic.errors import ConfigError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

# Rows one Acknowledge names at most (the server's limit is 1,000,000): larger
# settlements go in several calls.
ACK_BATCH_ROWS = 100_000


@dataclass
class Delivered:
    """A data message handed out in a shared group, and its rows settled so far."""

    message: Message
    settled: set[int] = field(default_factory=set)


class Acks(CoreState):
    """Flows of a shared group's acknowledgements."""

    @property
    def sharing(self) -> bool:
        return self.config.group_type in SHARING_TYPES

    def delivered(self, message: Message) -> None:
        """`message` goes to the application: its rows wait to be settled."""
        if self.sharing and message.id_count:
            self.unsettled[id(message)] = Delivered(message)

    def settle(
        self, what: str, message: Message, rows: Sequence[int] | None, kind: int
    ) -> Flow[int]:
        """Accept or release `rows` (positions in `message.rows()`; None: all) of the
        message; the rows the vnode settled (rows whose lease ran out are not)."""
        self.check_open()
        if not self.sharing:
            raise ConfigError(
                f"{what}: group.type is {self.config.group_type}; only shared groups "
                "acknowledge rows (commit offsets with commit(message))"
            )
        if not isinstance(message, Message):
            raise ConfigError(f"{what}: expected a Message from poll, got {type(message).__name__}")
        positions = _positions(what, message, rows)
        record = self.unsettled.get(id(message))
        if record is not None:
            positions = [i for i in positions if i not in record.settled]
        settled = yield from self._acknowledge(
            (message.topic, message.vgroup), _ids(message, positions), kind
        )
        if record is not None:
            record.settled.update(positions)
            if len(record.settled) == message.id_count:
                del self.unsettled[id(message)]
        return settled

    def queue_unsettled(self) -> None:
        """Accept every row handed out and not settled yet (implicit acknowledgement),
        lazily: each vgroup's next poll carries them (`ConsumerCore._launch`)."""
        records, self.unsettled = list(self.unsettled.values()), {}
        for record in records:
            message = record.message
            key = (message.topic, message.vgroup)
            pending = self.pending_acks.setdefault(key, RowIds())
            left = [i for i in range(message.id_count) if i not in record.settled]
            pending.extend(_ids(message, left))

    def accept_unsettled(self) -> Flow[None]:
        """Accept every row handed out and not settled yet, and send every accepted row
        not sent yet, now (close, unsubscribe: no later poll will carry them)."""
        self.queue_unsettled()
        pending, self.pending_acks = self.pending_acks, {}
        for key, ids in self.acks_in_flight.values():  # maybe not applied: again
            pending.setdefault(key, RowIds()).extend(ids)
        self.acks_in_flight.clear()
        for key, ids in pending.items():
            yield from self._acknowledge(key, ids, pb.ACK_TYPE_ACCEPT)

    def _acknowledge(self, key: Key, ids: RowIds, kind: int) -> Flow[int]:
        held = self.held.get(key)
        endpoint = held.endpoint if held is not None else ""
        settled = 0
        batches = [ids]
        if len(ids) > ACK_BATCH_ROWS:
            versions, indexes = ids.lists()
            batches = [
                RowIds([(versions[at : at + ACK_BATCH_ROWS], indexes[at : at + ACK_BATCH_ROWS])])
                for at in range(0, len(versions), ACK_BATCH_ROWS)
            ]
        for batch in batches:
            request = pb.AcknowledgeRequest(
                consumer_id=self.consumer_id, group_id=self.offsets_group, topic=key[0],
                vgroup=key[1], epoch=self.epoch, type=kind,  # type: ignore[arg-type]
            )  # fmt: skip
            batch.into(request.versions, request.indexes)
            answer: pb.AcknowledgeResponse = yield from self._rpc(
                "vnode", "Acknowledge", request, endpoint
            )
            settled += answer.settled
        return settled


def _ids(message: Message, positions: list[int]) -> RowIds:
    """The ids of the message's rows at `positions` (unique, sorted)."""
    ids = RowIds()
    if len(positions) == message.id_count:  # every row: as the answer carried them
        ids.add(*message.wire_ids())
    else:
        versions, indexes = message.row_versions, message.row_indexes
        ids.add([versions[i] for i in positions], [indexes[i] for i in positions])
    return ids


def _positions(what: str, message: Message, rows: Iterable[int] | None) -> list[int]:
    """The row positions asked for, checked against the message."""
    count = message.id_count
    if not count:
        raise ConfigError(
            f"{what}: the message ({message.kind}, topic {message.topic} vgroup "
            f"{message.vgroup}) has no rows to acknowledge"
        )
    if rows is None:
        return list(range(count))
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
        raise ConfigError(f"{what}: rows must be a list of row positions, got {rows!r}")
    out = []
    for i in rows:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count:
            raise ConfigError(
                f"{what}: row {i!r} is not a position in the message's rows (0..{count - 1})"
            )
        out.append(i)
    return sorted(set(out))
