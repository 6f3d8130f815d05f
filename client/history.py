"""Reading history through the public protocol, for readers outside the server (the
backfill's Spark tasks, users' jobs) that cannot see its data directory:

* `read_catalog` — the catalog objects a reader of a topic (or of a table) needs
  (`Mnode.ReadCatalog`), as (kind, key, JSON body) rows;
* `endpoints` — the endpoint serving each of a database's vgroups ("" = the server
  connected to; `Mnode.Routes`);
* `read_entries` — a vgroup's raw WAL entries between two versions (`Vnode.ReadEntries`),
  from the node that hosts it;
* `ranges` — each vgroup's retained versions, asked where it is hosted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sqltopic.client import admin
from sqltopic.client.connection import Connection, _translated, connect_with
from sqltopic.client.routing import HERE
from sqltopic.client.tls import Transport
from sqltopic.errors import NotFoundError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc

CatalogRow = tuple[str, str, str]
# The connection's channel, token and routes serve these calls too; they are private to
# the client package, which this module is part of (as admin.py).


def read_catalog(
    conn: Connection, topic: str = "", database: str = "", table: str = ""
) -> list[CatalogRow]:
    """The objects a reader of `topic` (or `database.table`) needs; TopicNotFound,
    NoPermission as the server says."""
    request = pb.ReadCatalogRequest(topic=topic, database=database, table=table)
    with _translated(conn._transport):
        frames = pb_grpc.MnodeStub(conn._channel).ReadCatalog(
            request, metadata=conn._metadata, timeout=conn._timeout
        )
        return [(o.kind, o.key, o.body) for frame in frames for o in frame.objects]


def endpoints(conn: Connection, database: str) -> dict[int, str]:
    """vgroup -> the endpoint hosting it, for each vgroup of `database` ({} from a
    server that hosts every vgroup itself: read them all there)."""
    routes = conn._read_routes()
    if not routes.routed:
        return {}
    found = routes.databases.get(database.lower())
    if found is None:
        raise NotFoundError(f"database {database} is not among the routes the server gave")
    return dict(found)


def read_entries(
    conn: Connection, vgroup: int, start: int, end: int, topic: str = "", database: str = ""
) -> Iterator[pb.RawEntry]:
    """`vgroup`'s entries from `start` to `end` (excluded), in order, read on `conn`'s
    node (the one hosting the vgroup)."""
    request = pb.ReadEntriesRequest(
        topic=topic, database=database, vgroup=vgroup, from_version=start, to_version=end
    )
    with _translated(conn._transport):
        for frame in pb_grpc.VnodeStub(conn._channel).ReadEntries(
            request, metadata=conn._metadata, timeout=conn._timeout
        ):
            yield from frame.entries


def ranges(
    conn: Connection, topic: str, vgroups: Mapping[int, str], transport: Transport,
    login: tuple[str, str],
) -> dict[int, admin.VgroupRange]:  # fmt: skip
    """Each vgroup's retained range, asked of the node hosting it (`vgroups`: vgroup ->
    endpoint, HERE for `conn`'s own node)."""
    out: dict[int, admin.VgroupRange] = {}
    by_node: dict[str, list[int]] = {}
    for vgroup, endpoint in vgroups.items():
        by_node.setdefault(endpoint, []).append(vgroup)
    for endpoint, some in sorted(by_node.items()):
        if endpoint == HERE:
            out |= admin.offset_ranges(conn, topic, some)
            continue
        with connect_with(transport, endpoint, *login, timeout=conn._timeout) as node:
            out |= admin.offset_ranges(node, topic, some)
    return out
