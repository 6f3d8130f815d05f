"""Consumer-group administration through the public protocol, for tools that act on a
group without being one of its consumers (`sqltopic backfill --group`).

* `offset_ranges` — each vgroup's retained versions [begin, end) (`Vnode.OffsetRange`).
* `committed` — a group's committed offsets (`Vnode.Committed`).
* `commit_group` — a standalone commit (`Vnode.Commit` with consumer_id 0): every offset
  in one call, so the server stores all or none, and only while no live consumer of the
  group holds those vgroups (else `ConsumerFenced`).
* `live_consumers` — the group's live consumers of a topic (`SHOW CONSUMERS`).

The vnode calls go to the connection's own address: one server process hosts the mnode
and every vnode (an `Assignment` with an empty endpoint says the same). Vgroup ids are
the caller's to give: the protocol has no call that lists a topic's vgroups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqltopic.client.connection import Connection, _translated
from sqltopic.client.tls import Transport
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc

# A standalone commit names no consumer (proto: CommitRequest.consumer_id).
STANDALONE = 0


@dataclass(frozen=True)
class VgroupRange:
    """A vgroup's retained versions: [begin, end); end = the next version it writes."""

    vgroup: int
    begin: int
    end: int


@dataclass(frozen=True)
class LiveConsumer:
    """A consumer of the group subscribed to the topic, as SHOW CONSUMERS shows it."""

    consumer_id: str
    client_id: str
    user: str
    fqdn: str
    status: str

    def __str__(self) -> str:
        client = f" ({self.client_id})" if self.client_id else ""
        return f"{self.consumer_id}{client} on {self.fqdn or '?'}"


def offset_ranges(conn: Connection, topic: str, vgroups: Iterable[int]) -> dict[int, VgroupRange]:
    """Each vgroup's retained range, by vgroup id (TopicNotFound, NotFoundError for a
    vgroup that is not the topic's)."""
    request = pb.OffsetRangeRequest(vgroups=_vgroups(topic, vgroups))
    with _translated(_transport(conn)):
        answer = _vnode(conn).OffsetRange(request, metadata=_metadata(conn), timeout=_timeout(conn))
    return {r.vgroup: VgroupRange(r.vgroup, r.begin, r.end) for r in answer.ranges}


def committed(
    conn: Connection, topic: str, group: str, vgroups: Iterable[int]
) -> dict[int, int | None]:
    """The group's committed offset per vgroup; None where it never committed."""
    request = pb.CommittedRequest(group_id=group, vgroups=_vgroups(topic, vgroups))
    with _translated(_transport(conn)):
        answer = _vnode(conn).Committed(request, metadata=_metadata(conn), timeout=_timeout(conn))
    return {o.vgroup: o.offset if o.HasField("offset") else None for o in answer.offsets}


def commit_group(
    conn: Connection, topic: str, group: str, offsets: Mapping[int, int], evict: bool = False
) -> None:
    """Store `offsets` (vgroup → next version to read) as the group's committed offsets,
    all or none. ConsumerFenced while a live consumer of the group holds one of the
    vgroups, unless `evict`: then the server removes the group's consumers of the topic
    first (they rejoin by themselves and resume from `offsets`). OffsetOutOfRange for an
    offset past a vgroup's next version to write."""
    items = [pb.TopicVgroupOffset(topic=topic, vgroup=v, offset=o) for v, o in offsets.items()]
    request = pb.CommitRequest(consumer_id=STANDALONE, group_id=group, offsets=items, evict=evict)
    with _translated(_transport(conn)):
        _vnode(conn).Commit(request, metadata=_metadata(conn), timeout=_timeout(conn))


def live_consumers(conn: Connection, topic: str, group: str) -> list[LiveConsumer]:
    """The group's live consumers subscribed to `topic`, by consumer id."""
    rows = conn.execute("SHOW CONSUMERS").to_arrow().to_pylist()
    return [
        LiveConsumer(r["consumer_id"], r["client_id"] or "", r["user"] or "", r["fqdn"] or "",
                     r["status"] or "")
        for r in rows
        if r["consumer_group"] == group and r["topic"] == topic
    ]  # fmt: skip


def _vgroups(topic: str, vgroups: Iterable[int]) -> list[pb.TopicVgroup]:
    return [pb.TopicVgroup(topic=topic, vgroup=v) for v in vgroups]


# The connection's channel and session token serve these calls too; they are private
# to the client package, which this module is part of.
def _vnode(conn: Connection) -> pb_grpc.VnodeStub:
    return pb_grpc.VnodeStub(conn._channel)


def _metadata(conn: Connection) -> tuple[tuple[str, str], ...]:
    return conn._metadata


def _timeout(conn: Connection) -> float:
    return conn._timeout


def _transport(conn: Connection) -> Transport:
    return conn._transport
