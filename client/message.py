"""What a consumer hands the application: `Message` (one vgroup of one topic), its
`Block`s of Arrow rows, and `TopicPartition` (a topic's vgroup with an offset and the
vnode's retained range). `message_from_frames` builds a Message from the frames of one
`Vnode.Poll` answer (docs/protocol.md, `PollResponse`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pyarrow as pa

from sqltopic.client.rows import table_rows
from sqltopic.errors import Error
from sqltopic.proto.arrow_ipc import from_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

MessageKind = Literal["data", "meta", "data_lost"]
Row = tuple[Any, ...]


@dataclass(frozen=True)
class Block:
    """Rows from one source table (`table_name`), or a query topic's rows (`table_name`
    None when they come from several tables or `msg.with.table.name` is false).
    Iterating a block yields its rows as tuples, columns in `data`'s order."""

    table_name: str | None
    data: pa.Table

    def rows(self) -> list[Row]:
        return _rows(self.data)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def __len__(self) -> int:
        return int(self.data.num_rows)


@dataclass(frozen=True)
class Message:
    """One message from one vgroup of one topic.

    `offset` is the first version it covers and `end_offset` the position after it: the
    offset to commit once the message is processed. `kind` is `data` (rows in `blocks`),
    `meta` (a DDL event in `meta`, no blocks) or `data_lost` (retention removed versions
    `offset` .. `end_offset - 1` before they were read; no blocks). Iterating a message
    yields its blocks.
    """

    topic: str
    database: str
    vgroup: int
    offset: int
    end_offset: int
    kind: MessageKind
    blocks: list[Block] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    # shared groups: the rows' ids and delivery counts as the answer carried them, read
    # on first use (acknowledging whole messages hands them on without reading them)
    _wire: pb.DataMessage | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def delivery_counts(self) -> tuple[int, ...]:
        """Shared groups: each row's delivery count (1 on first delivery), aligned with
        rows(); () in other groups."""
        return tuple(self._wire.delivery_counts) if self._wire is not None else ()

    @functools.cached_property
    def row_versions(self) -> tuple[int, ...]:
        """Shared groups: the WAL version of each row's write, aligned with rows()."""
        return tuple(self._wire.row_versions) if self._wire is not None else ()

    @functools.cached_property
    def row_indexes(self) -> tuple[int, ...]:
        """Shared groups: each row's index in its write, aligned with rows()."""
        return tuple(self._wire.row_indexes) if self._wire is not None else ()

    @functools.cached_property
    def row_ids(self) -> tuple[tuple[int, int], ...]:
        """Shared groups: each row's id (WAL version, index in its write), aligned with
        rows()."""
        return tuple(zip(self.row_versions, self.row_indexes, strict=True))

    @property
    def id_count(self) -> int:
        """How many rows carry an id (shared groups: every row; 0 in other groups)."""
        return len(self._wire.row_versions) if self._wire is not None else 0

    def wire_ids(self) -> tuple[Sequence[int], Sequence[int]]:
        """The rows' versions and indexes as the answer carried them (not copied)."""
        if self._wire is None:
            return (), ()
        return self._wire.row_versions, self._wire.row_indexes

    @property
    def row_count(self) -> int:
        return sum(len(block) for block in self.blocks)

    @property
    def delivery_count(self) -> int | None:
        """The highest delivery count of the message's rows (shared groups; None in
        other groups, which do not count deliveries)."""
        return max(self.delivery_counts, default=None)

    def rows(self) -> list[Row]:
        """Every block's rows, in order."""
        return [row for block in self.blocks for row in block.rows()]

    def to_arrow(self) -> pa.Table:
        """All blocks as one table (an empty table for meta and data_lost messages).
        Raises sqltopic.Error when blocks disagree on their schema (a stable or database
        topic's tables with different columns): read `blocks` one by one then."""
        if not self.blocks:
            return pa.table({})
        first = self.blocks[0].data.schema
        for block in self.blocks[1:]:
            if not block.data.schema.equals(first):
                raise Error(
                    f"message of topic {self.topic} vgroup {self.vgroup}: block "
                    f"{block.table_name!r} has columns {block.data.schema.names}, block "
                    f"{self.blocks[0].table_name!r} {first.names}; read msg.blocks one by one"
                )
        return pa.concat_tables([block.data for block in self.blocks])

    def error(self) -> Error | None:
        """Always None: confluent-kafka's (and taospy's) `if msg.error()` check passes,
        because sqltopic raises errors from `poll` instead of returning them."""
        return None

    def value(self) -> list[Block] | None:
        """The payload as taospy's `Message.value()` gives it: the blocks (each iterates
        as row tuples), None for a meta message, [] for a data_lost one. Not bytes, as
        confluent-kafka's: rows travel as Arrow, there is no serialized payload."""
        return None if self.kind == "meta" else list(self.blocks)

    def __iter__(self) -> Iterator[Block]:
        return iter(self.blocks)

    def __len__(self) -> int:
        return len(self.blocks)


@dataclass(init=False)
class TopicPartition:
    """One vgroup of one topic (Kafka's partition, TDengine's vgroup), with `offset` (a
    position, a committed offset or a seek target: the next version to read; None =
    unknown or unset) and the vnode's retained range: `begin` its first retained version,
    `end` the next one it will write (None where not looked up). Mutable, so an
    application can set `offset` on what `assignment()` returned and pass it to `seek`.

    As confluent-kafka's, the vgroup may be given as `partition=` and read or set as
    `.partition` (the same attribute as `.vgroup`)."""

    topic: str
    vgroup: int
    offset: int | None = None
    begin: int | None = None
    end: int | None = None

    def __init__(
        self,
        topic: str,
        vgroup: int | None = None,
        offset: int | None = None,
        begin: int | None = None,
        end: int | None = None,
        *,
        partition: int | None = None,
    ) -> None:
        if vgroup is None and partition is None:
            raise TypeError(f"TopicPartition({topic!r}): give the vgroup (or partition=)")
        if vgroup is not None and partition is not None and vgroup != partition:
            raise TypeError(
                f"TopicPartition({topic!r}): vgroup {vgroup} and partition {partition} "
                "differ; partition is another name of the vgroup, give one"
            )
        self.topic = topic
        self.vgroup = vgroup if vgroup is not None else cast("int", partition)
        self.offset, self.begin, self.end = offset, begin, end

    @property
    def partition(self) -> int:
        """confluent-kafka's name of the vgroup."""
        return self.vgroup

    @partition.setter
    def partition(self, value: int) -> None:
        self.vgroup = value


@dataclass(frozen=True)
class Empty:
    """A poll that matched nothing within `fetch.max.wait.ms`: not delivered, but the
    position moves from `offset` to `end_offset`."""

    offset: int
    end_offset: int


def message_from_frames(
    topic: str, database: str, vgroup: int, frames: Iterable[pb.PollResponse]
) -> Message | Empty:
    """The message that one Vnode.Poll answer carries: the first frame has the message,
    every frame may carry BlockParts (a block's parts are consecutive; its IPC stream is
    their `arrow_ipc` concatenated)."""
    head: pb.PollResponse | None = None
    names: dict[int, str | None] = {}
    parts: dict[int, list[bytes]] = {}
    for frame in frames:
        if head is None:
            head = frame
        for part in frame.blocks:
            if part.block not in parts:
                names[part.block] = part.table_name if part.HasField("table_name") else None
                parts[part.block] = []
            parts[part.block].append(part.arrow_ipc)
    kind = head.WhichOneof("message") if head is not None else None
    if head is None or kind is None:
        raise Error(f"poll of topic {topic} vgroup {vgroup}: the answer carries no message")
    if kind == "empty":
        return Empty(head.empty.offset, head.empty.end_offset)
    blocks = [Block(names[i], from_ipc(parts[i])) for i in sorted(parts)]
    where = (topic, database, vgroup)
    if kind == "data":
        if len(blocks) != head.data.block_count:
            raise Error(
                f"poll of topic {topic} vgroup {vgroup}: the answer announces "
                f"{head.data.block_count} blocks but carries {len(blocks)}"
            )
        data = head.data
        ids = (len(data.row_versions), len(data.row_indexes), len(data.delivery_counts))
        if any(ids) and not (ids[0] == ids[1] == ids[2] == sum(len(b) for b in blocks)):
            raise Error(
                f"poll of topic {topic} vgroup {vgroup}: the answer's row ids and delivery "
                "counts do not match its rows"
            )
        return Message(*where, data.offset, data.end_offset, "data", blocks,
                       _wire=data if any(ids) else None)  # fmt: skip
    if kind == "meta":
        event = _with_int_ids(json.loads(head.meta.event_json)) if head.meta.event_json else {}
        return Message(*where, head.meta.offset, head.meta.end_offset, "meta", meta=event)
    lost = head.data_lost
    return Message(*where, lost.offset, lost.end_offset, "data_lost")


# Keys of a meta event whose values are ids: decimal strings on the wire (so that every
# language's JSON parser reads them exactly), ints in Python.
ID_KEYS = frozenset({"uid", "colId"})


def _with_int_ids(value: Any) -> Any:
    """`value` (a parsed event) with its ids as ints again, at any depth."""
    if isinstance(value, dict):
        return {
            k: int(v) if k in ID_KEYS and isinstance(v, str) else _with_int_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_with_int_ids(v) for v in value]
    return value


def _rows(table: pa.Table) -> list[Row]:
    return table_rows(table)


@dataclass(frozen=True)
class VgroupLag:
    """How far a consumer is behind on one assigned vgroup (`Consumer.lag()`): its
    `position`, the vnode's `end`, the data rows in the WAL between them (`rows`: every
    table's rows, those the topic will look at) and the milliseconds since the first of
    them was written (`ms`; 0 when caught up). `rows` and `ms` are None while the vgroup
    has no position (before its first poll)."""

    topic: str
    vgroup: int
    position: int | None
    end: int
    rows: int | None
    ms: int | None
