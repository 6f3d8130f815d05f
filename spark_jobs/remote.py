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
from sqltopic.client.topic_read import backlogs
from sqltopic.errors import BackfillError, VersionNotRetained
from sqltopic.spark_jobs.pieces import Extent, Piece
from sqltopic.sql.catalog_store import catalog_of
from sqltopic.sql.model import Catalog
from sqltopic.wal import EntryType

# WAL rows one task reads over the network, about: ~0.5 s of a live-engine task, well
# above Spark's ~50 ms per task, while a database of a few vgroups still gives every
# core tasks. (Pieces were 4,096 versions: 41M rows of 10,000-row entries, or a task
# per 4,096 rows of one-row entries.)
PIECE_ROWS = 4_000_000


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
    """Pieces of about PIECE_ROWS WAL rows covering [starts[v], ends[v]) of each vgroup
    (by default its retained versions), as `list_pieces` cuts the local files by bytes:
    the rows come from the WAL's running counts (`rows_between`), no entry is read."""
    low, high = within
    spans: dict[int, tuple[int, int]] = {}
    for vgroup, ext in sorted(extents(remote, vgroups).items()):
        if strict:
            _check_bounds(vgroup, ext, starts.get(vgroup), ends.get(vgroup))
        start = max(starts.get(vgroup, 0), ext.first, low)
        end = min(ends.get(vgroup, ext.next_version), ext.next_version)
        spans[vgroup] = (start, end if high is None else min(end, high))
    reading = {v: s for v, (s, e) in spans.items() if s < e}
    rows = rows_between(remote, reading, {v: spans[v][1] for v in reading})
    out: list[Piece] = []
    for vgroup in sorted(reading):
        start, end = spans[vgroup]
        step = piece_step(end - start, rows[vgroup], PIECE_ROWS)
        for seq, first in enumerate(range(start, end, step)):
            last = min(first + step, end)
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


def rows_between(source: Remote, start: dict[int, int], end: dict[int, int]) -> dict[int, int]:
    """Data rows in [start[v], end[v]) of each vgroup (each asked in one call)."""
    asks = {v: [end[v], start[v]] for v in start}  # the start last: never undercounted
    found = backlogs_at(source, asks)
    return {v: max(found[v][1] - found[v][0], 0) for v in start}


def backlogs_at(source: Remote, asks: dict[int, list[int]]) -> dict[int, list[int]]:
    """For each vgroup, the rows from each of its positions to its end, asked of the node
    hosting it: one call per node, a vgroup's positions in order."""
    by_node: dict[str, list[int]] = {}
    for v in sorted(asks):
        by_node.setdefault(source.endpoints.get(v, ""), []).append(v)
    out: dict[int, list[int]] = {}
    for some in by_node.values():
        pairs = [(v, p) for v in some for p in asks[v]]
        with source.connect(some[0]) as conn:
            lags = iter(backlogs(conn, source.topic, pairs))
        out |= {v: [next(lags) for _ in asks[v]] for v in some}
    return out


def piece_step(versions: int, rows: int, piece_rows: int) -> int:
    """Versions per piece cutting a range of `versions` versions holding `rows` WAL rows
    into pieces of about `piece_rows` rows (by its mean rows per version): at least 1,
    and the whole range for a range of fewer rows."""
    parts = max(1, min(versions, -(-rows // piece_rows)))
    return max(1, -(-versions // parts))
