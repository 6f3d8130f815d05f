"""`Vnode.ReadTopic` without the network: a query topic's rows of one vgroup for a range
of versions, evaluated as a consumer's poll evaluates them, for readers that are not a
group's members (Spark's streaming source, spark_jobs/stream.py).

`check_request` validates the request's fields; `plan` checks the caller's right
(SUBSCRIBE on the topic, as OffsetRange), the topic's kind and the range against the
vgroup's retained versions; `step` reads the next part of the range with the tracked
reader (server/core/tracked_reader.py: each row with its entry's WAL version) and frames
it. Nothing here keeps a position: the reader says where to read.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sqltopic.errors import ConfigError, OffsetOutOfRange, VersionNotRetained, excerpt
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, chunks, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core.engine import Engine
from sqltopic.sql.names import MAX_BYTES
from sqltopic.sql.topic.params import SUBSCRIPTION_SEP

# The column each row's WAL version is delivered in (the backfill's Parquet has it too).
VERSION_COLUMN = "_version"
# WAL body bytes one step evaluates at most: one DuckDB query amortised over many
# entries, while a step's rows (framed in memory before they are sent) stay bounded.
STEP_BYTES = 16 << 20
# WAL rows one step evaluates at most (it stops after the entry that reaches this):
# about a second of DuckDB work on one core, so a call's frames keep coming.
STEP_ROWS = 1 << 20
# The longest topic name a request may carry (TDengine's limit on topic names).
MAX_TOPIC_BYTES = MAX_BYTES["topic"]


@dataclass(frozen=True)
class Span:
    """The versions [start, end) a ReadTopic call reads."""

    start: int
    end: int


def check_request(request: pb.ReadTopicRequest) -> None:
    """ConfigError for a field no read can serve, before any look-up."""
    if not request.topic:
        raise ConfigError("ReadTopic: give the topic to read")
    if len(request.topic.encode()) > MAX_TOPIC_BYTES:
        raise ConfigError(
            f"ReadTopic: topic {excerpt(request.topic)} is longer than a topic name can be "
            f"({MAX_TOPIC_BYTES} bytes)"
        )
    if SUBSCRIPTION_SEP in request.topic:
        raise ConfigError(
            f"ReadTopic: {excerpt(request.topic)} names a binding of a parameterized topic; "
            "ReadTopic reads query topics without parameters"
        )
    if request.from_version < 0:
        raise ConfigError(f"ReadTopic: from_version {request.from_version} is negative")
    if request.to_version < 0:
        raise ConfigError(f"ReadTopic: to_version {request.to_version} is negative")
    if request.to_version and request.to_version < request.from_version:
        raise ConfigError(
            f"ReadTopic: to_version {request.to_version} is below from_version "
            f"{request.from_version}; give from_version <= to_version (0: the end)"
        )


def plan(engine: Engine, user: str, request: pb.ReadTopicRequest) -> Span:
    """The versions the call reads, once `user` may read the topic there. TopicNotFound,
    NoPermission, NotFoundError (a vgroup not the topic's), ConfigError (not a query
    topic, or a parameterized one), VgroupUnavailable (hosted elsewhere), and
    OffsetOutOfRange with the retained range for versions retention deleted or that are
    not readable yet."""
    engine.check_subscribe(user, request.topic)
    _check_kind(engine, request.topic)
    vnode = engine.vnode_of(request.topic, request.vgroup)
    state = vnode.wal.reader().state()
    first, end = state.first_version, state.next_version
    to = request.to_version or end
    where = f"topic {request.topic} vgroup {request.vgroup}"
    if request.from_version < state.removed_below:
        raise lost(where, request.from_version, first, end)
    if to > end:
        raise OffsetOutOfRange(
            f"ReadTopic: to_version {to} of {where} is past its readable end {end} (the "
            "next version it writes): ask OffsetRange for the end",
            begin=first, end=end,
        )  # fmt: skip
    # versions below the first retained one that retention did not delete never existed
    return Span(min(max(request.from_version, first), to), to)


def step(engine: Engine, topic: str, vgroup: int, version: int, end: int) -> tuple[
    list[pb.ReadTopicResponse], int
]:  # fmt: skip
    """The frames of the next part of [version, end), and the version after it. A part
    is at most STEP_BYTES of WAL bodies or STEP_ROWS rows (one evaluation)."""
    try:
        with engine.lock.shared():
            blocks, after = engine.read_tracked(
                topic, vgroup, version, STEP_ROWS, STEP_BYTES, end_version=end
            )
    except VersionNotRetained as gone:  # retention ran during the call
        where = f"topic {topic} vgroup {vgroup}"
        raise lost(where, version, gone.first_version, gone.next_version) from None
    if after == version:  # no entry left below `end` (versions may skip numbers)
        after = end
    tables = [
        b.block.data.append_column(VERSION_COLUMN, b.versions.cast(pa.int64()))
        for b in blocks
        if b.block.data.num_rows
    ]
    return frames_of(tables, after), after


def frames_of(tables: list[pa.Table], next_version: int) -> list[pb.ReadTopicResponse]:
    """`tables` (one read's rows) as one block's frames: its Arrow IPC stream in chunks
    of at most MAX_CHUNK_BYTES, the last frame carrying `next_version`."""
    if not tables:
        return [pb.ReadTopicResponse(next_version=next_version)]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    frames = [pb.ReadTopicResponse(arrow_ipc=c) for c in chunks(to_ipc(table), MAX_CHUNK_BYTES)]
    frames[-1].next_version = next_version
    return frames


def lost(where: str, start: int, first: int, end: int) -> OffsetOutOfRange:
    """The refusal of a read from versions retention deleted, with the retained range."""
    return OffsetOutOfRange(
        f"ReadTopic: versions {start}..{first - 1} of {where} were deleted by retention "
        f"(data lost); the vgroup retains {first}..{end - 1}: read from {first}",
        begin=first, end=end,
    )  # fmt: skip


def _check_kind(engine: Engine, name: str) -> None:
    topic = engine.catalog.topic(name)
    if topic.kind != "query":
        raise ConfigError(
            f"ReadTopic: topic {name} is a {topic.kind} topic; ReadTopic reads query topics "
            "(one schema, no meta events): consume it with a consumer group instead"
        )
    if topic.params:
        raise ConfigError(
            f"ReadTopic: topic {name} has parameters "
            f"({', '.join(p.name for p in topic.params)}); ReadTopic reads topics without "
            "them: create one with the values in its WHERE"
        )
