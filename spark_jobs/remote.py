"""Reading a topic's WAL through the server instead of its files: for a cluster (each
vgroup's entries come from the dnode hosting it) and for any server whose data
directory the job cannot see. Executors need network access to the nodes and the
user's credentials, nothing else (docs/backfill.md).

The driver reads the catalog objects the read needs (`Mnode.ReadCatalog`), the node
hosting each vgroup (`Mnode.Routes`) and each vgroup's retained versions (`Vnode.
OffsetRange`, where it is hosted); a task streams its piece's raw entries from that node
(`Vnode.ReadEntries`). The user needs READ on all of the topic's database (the WAL holds
every table's rows) and SUBSCRIBE on the topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqltopic.client import history
from sqltopic.client.connection import Connection, connect_with
from sqltopic.client.tls import NO_FILES, TlsFiles, load_transport
from sqltopic.errors import BackfillError, VersionNotRetained
from sqltopic.spark_jobs.pieces import Extent, Piece
from sqltopic.sql.catalog_store import catalog_of
from sqltopic.sql.model import Catalog
from sqltopic.wal import EntryType

# Versions one task reads over the network: a piece of a few thousand entries (a few
# MB to a few tens of MB of rows) keeps two cores busy on a small database while a
# task stays well above Spark's ~10 ms per-task cost.
PIECE_VERSIONS = 4096


@dataclass(frozen=True)
class Remote:
    """How a read reaches the server (picklable: shipped to every task)."""

    server: str  # host:port of the server, or of a cluster's mnode
    user: str
    password: str
    topic: str  # the topic read (SUBSCRIBE on it, and READ on its database)
    tls: TlsFiles = NO_FILES
    # vgroup -> the endpoint hosting it; a vgroup not here is read from `server`
    endpoints: dict[int, str] = field(default_factory=dict)

    def connect(self, vgroup: int | None = None) -> Connection:
        """A session on the node hosting `vgroup` (the server for None)."""
        address = self.endpoints.get(vgroup, "") if vgroup is not None else ""
        transport = load_transport(self.tls)
        return connect_with(transport, address or self.server, self.user, self.password)

    def located(self, database: str) -> Remote:
        """These settings with the endpoint of each of `database`'s vgroups."""
        with self.connect() as conn:
            found = history.endpoints(conn, database)
        return Remote(self.server, self.user, self.password, self.topic, self.tls, found)


def catalog(remote: Remote) -> Catalog:
    """The catalog objects the topic's read needs, as the server holds them now."""
    with remote.connect() as conn:
        return catalog_of(history.read_catalog(conn, topic=remote.topic))


def extents(remote: Remote, vgroups: tuple[int, ...]) -> dict[int, Extent]:
    """Each vgroup's retained versions, asked where it is hosted."""
    login = (remote.user, remote.password)
    with remote.connect() as conn:
        where = {v: remote.endpoints.get(v, "") for v in vgroups}
        found = history.ranges(conn, remote.topic, where, load_transport(remote.tls), login)
    return {v: Extent(r.begin, r.end) for v, r in found.items()}


def pieces(
    remote: Remote, vgroups: tuple[int, ...], starts: dict[int, int], ends: dict[int, int],
    *, strict: bool = False, within: tuple[int, int | None] = (0, None),
) -> list[Piece]:  # fmt: skip
    """Pieces of PIECE_VERSIONS versions covering [starts[v], ends[v]) of each vgroup
    (by default its retained versions), as `list_pieces` cuts the local files."""
    low, high = within
    out: list[Piece] = []
    for vgroup, ext in sorted(extents(remote, vgroups).items()):
        if strict:
            _check_bounds(vgroup, ext, starts.get(vgroup), ends.get(vgroup))
        start = max(starts.get(vgroup, 0), ext.first, low)
        end = min(ends.get(vgroup, ext.next_version), ext.next_version)
        end = end if high is None else min(end, high)
        for seq, first in enumerate(range(start, end, PIECE_VERSIONS)):
            last = min(first + PIECE_VERSIONS, end)
            out.append(Piece(vgroup, 0, first, last, last - first, 0, seq))
    return out


def _check_bounds(vgroup: int, ext: Extent, start: int | None, end: int | None) -> None:
    if start is not None and start < ext.first:
        raise BackfillError(
            f"vgroup {vgroup}: retention deleted versions {start}..{ext.first - 1} before "
            "the job read them; run the backfill again"
        )
    if end is not None and end > ext.next_version:
        raise BackfillError(
            f"vgroup {vgroup}: the end version {end} is past the vgroup's end on its node "
            f"({ext.next_version})"
        )


def entries(remote: Remote, piece: Piece) -> Iterator[tuple[int, EntryType, bytes]]:
    """(version, type, body) of the piece's entries, in order, from the node hosting its
    vgroup."""
    try:
        with remote.connect(piece.vgroup) as conn:
            for entry in history.read_entries(
                conn, piece.vgroup, piece.start, piece.end, topic=remote.topic
            ):
                yield entry.version, EntryType(entry.entry_type), entry.body
    except VersionNotRetained:
        raise BackfillError(
            f"vgroup {piece.vgroup}: retention deleted versions from {piece.start} while "
            "the backfill ran; run it again (it starts from the first retained version)"
        ) from None
