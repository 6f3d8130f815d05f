"""Reading a topic by version ranges through the public protocol (`Vnode.ReadTopic`),
for readers that are not a consumer group's members and keep their own positions
(Spark's streaming source, spark_jobs/stream.py).

`read_topic` yields the topic's rows of one vgroup for versions [start, end), as the
server evaluates them for a consumer's poll, in blocks: each an Arrow table of the
topic's output columns plus `_version` (the row's WAL version), with the version the
read reached. Versions retention deleted fail with OffsetOutOfRange whose `begin` is the
first retained version.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from sqltopic.client.connection import Connection, _translated
from sqltopic.proto.arrow_ipc import from_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc


@dataclass(frozen=True)
class TopicRows:
    """One block of a ReadTopic answer: `rows` (None when the part read had none), and
    `next_version`: every version below it has been read."""

    rows: pa.Table | None
    next_version: int


def read_topic(conn: Connection, topic: str, vgroup: int, start: int, end: int) -> Iterator[
    TopicRows
]:  # fmt: skip
    """`topic`'s rows of `vgroup` for versions [start, end) (end 0: the vgroup's end when
    the call starts), block by block, read on `conn`'s node (the one hosting the vgroup).
    TopicNotFound, NoPermission (no SUBSCRIBE), ConfigError (not a query topic, or bad
    versions), OffsetOutOfRange (versions retention deleted, or past the end)."""
    request = pb.ReadTopicRequest(topic=topic, vgroup=vgroup, from_version=start, to_version=end)
    with _translated(conn._transport):
        parts: list[bytes] = []
        for frame in pb_grpc.VnodeStub(conn._channel).ReadTopic(
            request, metadata=conn._metadata, timeout=conn._timeout
        ):
            if frame.arrow_ipc:
                parts.append(frame.arrow_ipc)
            if frame.HasField("next_version"):
                rows = from_ipc(parts) if parts else None
                parts = []
                yield TopicRows(rows, frame.next_version)


def backlogs(conn: Connection, topic: str, positions: Sequence[tuple[int, int]]) -> list[int]:
    """The data rows in the WAL from each (vgroup, position) to the vgroup's end, in
    order, asked of `conn`'s node (the one hosting the vgroups) in one call; each is
    measured when the server reaches it, so a later one never counts fewer new writes."""
    request = pb.OffsetRangeRequest(
        vgroups=[pb.TopicVgroup(topic=topic, vgroup=v) for v, _ in positions],
        positions=[p for _, p in positions],
    )
    with _translated(conn._transport):
        answer = pb_grpc.VnodeStub(conn._channel).OffsetRange(
            request, metadata=conn._metadata, timeout=conn._timeout
        )
    return [r.lag_rows for r in answer.ranges]
