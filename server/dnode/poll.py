"""One poll of one (topic, vgroup) for a group, without the network: where to start, and
what the next message is.

`start_position` applies the group's committed offset or `auto.offset.reset`. `read_message`
gathers one message: a run of data blocks, or one meta event, or the `data_lost` notice
when retention removed the position. It reads in growing steps until it holds
`min_rows` matching rows, the vnode runs out of entries, or a per-poll budget is spent,
so a selective topic still answers with full messages, and one poll never runs for long.
Waiting for new writes (push) is the gRPC service's part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from sqltopic.errors import NoCommittedOffset, OffsetOutOfRange
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock, TopicItem, TopicMeta
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.topic.params import topic_of

Reset = Literal["earliest", "latest", "none"]
Kind = Literal["data", "meta", "data_lost", "empty"]

# The version a vnode gives its first WAL entry: no position is below it.
FIRST_VERSION = 1
# TDengine's min.poll.rows default: a message gathers at least this many rows when the
# backlog has them.
DEFAULT_MIN_ROWS = 4096
# Arrow bytes one message may carry by default: large enough to amortise a round trip,
# far inside the 64 MiB request limit and the client's memory.
DEFAULT_MAX_BYTES = 64 << 20
# WAL rows a poll reads at least when entries are waiting, whatever min_rows says: a
# poll costs ~1 ms before its first row, so a message of 100k rows drains a backlog far
# faster than messages of a few thousand, for about the same latency per message.
READ_AHEAD_ROWS = 100_000
# WAL rows one poll may scan before it answers with what it has: a very selective topic
# over a long backlog then still answers within about a second, moving its position on.
SCAN_BUDGET_ROWS = 8_000_000
# The most WAL rows one step reads (one DuckDB query), whatever the selectivity guess.
MAX_STEP_ROWS = 2_000_000
# Selectivity assumed at least this high when sizing the next step: a step never grows
# beyond (rows still wanted / this).
MIN_SELECTIVITY = 0.001


@dataclass(frozen=True)
class PollLimits:
    min_rows: int = DEFAULT_MIN_ROWS
    max_rows: int = 0  # 0 = no limit
    max_bytes: int = DEFAULT_MAX_BYTES
    read_ahead: int = READ_AHEAD_ROWS


@dataclass
class Message:
    """What one poll answers: `offset` is where it read from, `end_offset` the next
    position."""

    kind: Kind
    offset: int
    end_offset: int
    blocks: list[TopicBlock] = field(default_factory=list)
    meta: TopicMeta | None = None

    @property
    def rows(self) -> int:
        return sum(b.data.num_rows for b in self.blocks)


def start_position(vnode: Vnode, topic: str, group: str, reset: Reset) -> int:
    """Where the group starts on this vnode: its committed offset, else the reset policy."""
    committed = vnode.offsets.get(topic, group)
    if committed is not None:
        return committed
    if reset == "earliest":
        return vnode.wal.first_version
    if reset == "latest":
        return vnode.wal.next_version
    raise NoCommittedOffset(
        f"group {group} has no committed offset on vgroup {vnode.vgroup} of topic {topic} "
        "and auto.offset.reset is none: commit or seek a position, or use earliest/latest",
        begin=vnode.wal.first_version,
        end=vnode.wal.next_version,
    )


def requested_position(vnode: Vnode, position: int) -> int:
    """The position a poll names, as read: 0 (before version 1, the first any vnode
    writes) reads as 1, so that below the first retained version it is `data_lost`
    like any other position there, and on a vnode that lost nothing it is the start. A
    negative one is no version at all: OffsetOutOfRange."""
    if position < 0:
        check_position(vnode, position)
    return max(position, FIRST_VERSION)


def check_position(vnode: Vnode, position: int) -> None:
    """OffsetOutOfRange for a position past the vnode's next version to write."""
    end = vnode.wal.next_version
    if position > end or position < FIRST_VERSION:
        begin = vnode.wal.first_version
        raise OffsetOutOfRange(
            f"position {position} is outside vgroup {vnode.vgroup}'s versions [{begin}, {end}]",
            begin=begin,
            end=end,
        )


def read_message(
    engine: Engine, vnode: Vnode, topic: str, position: int, limits: PollLimits
) -> Message:
    """The next message from `position` (data, meta, data_lost, or empty when nothing
    matched in the entries read)."""
    check_position(vnode, position)
    first = vnode.wal.first_version
    if position < first:
        return Message("data_lost", position, first)
    blocks: list[TopicBlock] = []
    matched = scanned = size = 0
    step = _cap(limits, max(limits.min_rows, limits.read_ahead), 0)
    at = position
    while True:
        items, next_version = engine.read_topic(
            topic, vnode.vgroup, at, step, limits.max_bytes - size
        )
        meta_at = next((i for i, item in enumerate(items) if isinstance(item, TopicMeta)), None)
        if meta_at is not None:
            return _before_meta(items, meta_at, blocks, position, at)
        for item in items:
            assert isinstance(item, TopicBlock)
            blocks.append(item)
            matched += item.data.num_rows
            size += item.data.nbytes
        scanned += step if next_version > at else 0  # about: a read stops past its step
        at = next_version
        if _done(vnode, limits, matched, scanned, size, at):
            break
        step = _next_step(limits, matched, scanned)
    if not matched:
        return Message("empty", position, at)
    return Message("data", position, at, _merged(blocks, _is_query(engine, topic)))


def first_message(
    engine: Engine, topic: str, items: list[TopicItem], position: int, next_version: int,
    made: FirstMessages | None = None,
) -> Message:  # fmt: skip
    """The message `read_message` answers from `position` when one read of everything up
    to the WAL's end gave `items` and `next_version`: what a shared pass
    (server/dnode/live.py) found for a caught-up poll. `made`: the messages this pass
    made already (the same object for the same items, so that it is framed once)."""
    if made is None:
        return _first_message(engine, topic, items, position, next_version)
    key = (_is_query(engine, topic), *map(id, items))
    found = made.get(key)
    if found is None:
        found = made[key] = _first_message(engine, topic, items, position, next_version)
    return found


# (whether a query topic, its items' identities) -> the message of those items, in one
# pass (at one position): topics of one form over the same entries share their blocks
FirstMessages = dict[tuple[object, ...], "Message"]


def _first_message(
    engine: Engine, topic: str, items: list[TopicItem], position: int, next_version: int
) -> Message:
    meta_at = next((i for i, item in enumerate(items) if isinstance(item, TopicMeta)), None)
    if meta_at is not None:
        return _before_meta(items, meta_at, [], position, position)
    blocks = [item for item in items if isinstance(item, TopicBlock) and item.data.num_rows]
    if not blocks:
        return Message("empty", position, next_version)
    return Message("data", position, next_version, _merged(blocks, _is_query(engine, topic)))


def _before_meta(
    items: list[TopicItem], meta_at: int, blocks: list[TopicBlock],
    position: int, at: int,
) -> Message:  # fmt: skip
    """A meta event ends a message: the blocks before it go first, the event next time."""
    meta = items[meta_at]
    assert isinstance(meta, TopicMeta)
    before = blocks + [b for b in items[:meta_at] if isinstance(b, TopicBlock)]
    before = [b for b in before if b.data.num_rows]
    if before or meta.version > at:
        # entries between the blocks and the event hold nothing for the topic
        return Message("data" if before else "empty", position, meta.version, _merged(before))
    return Message("meta", position, meta.version + 1, meta=meta)


def _done(vnode: Vnode, limits: PollLimits, matched: int, scanned: int, size: int, at: int) -> bool:
    if at >= vnode.wal.next_version or size >= limits.max_bytes:
        return True
    if limits.max_rows and matched >= limits.max_rows:
        return True
    return matched >= limits.min_rows or scanned >= SCAN_BUDGET_ROWS


def _next_step(limits: PollLimits, matched: int, scanned: int) -> int:
    """Rows to read next: enough, at the selectivity seen so far, to reach min_rows."""
    wanted = max(limits.min_rows - matched, 1)
    selectivity = max(matched / scanned if scanned else 1.0, MIN_SELECTIVITY)
    return _cap(limits, int(wanted / selectivity) + 1, matched)


def _cap(limits: PollLimits, rows: int, matched: int) -> int:
    step = min(max(rows, 1), MAX_STEP_ROWS)
    if limits.max_rows:
        step = min(step, max(limits.max_rows - matched, 1))
    return step


def _is_query(engine: Engine, topic: str) -> bool:
    return engine.catalog.topic(topic_of(topic)).kind == "query"


def _merged(blocks: list[TopicBlock], query: bool = False) -> list[TopicBlock]:
    """Adjacent blocks of the same source table as one block; a query topic's rows as a
    single block (named after its table when they all come from one)."""
    out: list[TopicBlock] = []
    for block in blocks:
        if not block.data.num_rows:
            continue
        last = out[-1] if out else None
        if last is not None and (query or last.table_name == block.table_name):
            name = last.table_name if last.table_name == block.table_name else None
            data = pa.concat_tables([last.data, block.data])
            out[-1] = TopicBlock(name, data, last.first_version, block.last_version)
        else:
            out.append(block)
    return out
