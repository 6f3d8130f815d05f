"""Partition listing: a database's WAL cut into pieces that Spark tasks read alone.

A piece is a version range [start, end) inside one WAL segment of one vgroup, of about
`PIECE_BYTES` of records. Listing opens each vnode's WAL read-only (docs/wal.md §5.5:
no lock, no repair) and reads only segment names and indexes, never a record. Pieces of
one vgroup are numbered in version order (`seq`), so rows can be put back in WAL order.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sqltopic.errors import BackfillError
from sqltopic.sql.entries import vnode_dir
from sqltopic.wal import WalReader, open_readonly
from sqltopic.wal.reader import WalState

# Bytes of WAL records one Spark task reads (a piece ends with the first entry that starts
# beyond them): a 64 MiB segment (the default roll size) is 2-3 tasks, so two cores are kept
# busy even on a database of few vnodes, while a task stays long enough (~0.5 s) that
# Spark's per-task cost (~10 ms) does not matter.
PIECE_BYTES = 24 << 20


@dataclass(frozen=True, slots=True)
class Piece:
    """Versions [start, end) of one segment (named by its first version) of a vgroup."""

    vgroup: int
    segment: int
    start: int
    end: int
    entries: int
    bytes: int
    seq: int = 0  # its place among the vgroup's pieces, in version order


@dataclass(frozen=True, slots=True)
class Extent:
    """What a vgroup's WAL retains now: versions [first, next_version)."""

    first: int
    next_version: int


def wal_dir(data_dir: Path, vgroup: int) -> Path:
    return vnode_dir(data_dir, vgroup) / "wal"


def open_wal(data_dir: Path, vgroup: int) -> WalReader:
    """A read-only snapshot of one vgroup's WAL."""
    path = wal_dir(data_dir, vgroup)
    if not path.is_dir():
        raise BackfillError(f"vgroup {vgroup} has no WAL at {path}: is {data_dir} the data "
                            "directory of the server that holds this database?")  # fmt: skip
    return open_readonly(path)


def extent(data_dir: Path, vgroup: int) -> Extent:
    st = open_wal(data_dir, vgroup).state()
    return Extent(st.first_version, st.next_version)


def list_pieces(
    data_dir: Path,
    vgroups: tuple[int, ...],
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    piece_bytes: int = PIECE_BYTES,
    *,
    strict: bool = False,
    within: tuple[int, int | None] = (0, None),
) -> list[Piece]:
    """Pieces covering versions [starts[v], ends[v]) of each vgroup v (by default from
    the first retained version to the end of the snapshot). A start before the first
    retained version or an end past the WAL's is moved inside it, or with `strict` (the
    backfill, whose manifest records them) refused. `within` (low, high or None): only
    versions in [low, high) besides (Spark's pushed filters: never refused)."""
    low, high = within
    pieces: list[Piece] = []
    for vgroup in vgroups:
        st = open_wal(data_dir, vgroup).state()
        if strict:
            _check_bounds(st, vgroup, starts.get(vgroup), ends.get(vgroup))
        start = max(starts.get(vgroup, 0), st.first_version, low)
        end = min(ends.get(vgroup, st.next_version), st.next_version)
        end = end if high is None else min(end, high)
        found = _vgroup_pieces(st, vgroup, start, end, piece_bytes)
        pieces += [_numbered(p, i) for i, p in enumerate(found)]
    return pieces


def _check_bounds(st: WalState, vgroup: int, start: int | None, end: int | None) -> None:
    if start is not None and start < st.first_version and start < st.removed_below:
        raise BackfillError(
            f"vgroup {vgroup}: retention deleted versions {start}..{st.first_version - 1} "
            "before the job read them; run the backfill again"
        )
    if end is not None and end > st.next_version:
        raise BackfillError(
            f"vgroup {vgroup}: the end version {end} is past the WAL's end in the data "
            f"directory ({st.next_version}); give the server's own data directory"
        )


def _numbered(piece: Piece, seq: int) -> Piece:
    return Piece(piece.vgroup, piece.segment, piece.start, piece.end, piece.entries,
                 piece.bytes, seq)  # fmt: skip


def _vgroup_pieces(
    st: WalState, vgroup: int, start: int, end: int, piece_bytes: int
) -> list[Piece]:
    pieces: list[Piece] = []
    for seg in st.segments:
        count = seg.index.position(min(end, st.next_version))
        first = seg.index.position(start, count)
        if first >= count:
            continue
        versions, offsets = seg.index.versions, seg.index.offsets
        limit = seg.size if count == len(offsets) else offsets[count]
        i = first
        while i < count:
            # the last entry starting within piece_bytes of entry i ends this piece
            j = bisect.bisect_left(offsets, offsets[i] + piece_bytes, i + 1, count)
            stop = offsets[j] if j < count else limit
            last = versions[j] if j < count else versions[count - 1] + 1
            pieces.append(Piece(vgroup, seg.first_version, versions[i], min(last, end),
                                j - i, stop - offsets[i]))  # fmt: skip
            i = j
    return pieces
