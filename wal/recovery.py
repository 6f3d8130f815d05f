"""Opening a WAL directory: find its segments, check them, and repair a torn tail.

Rules (docs/wal.md, "Recovery"):
* sealed segments were fsynced before anything after them was written, so any damage
  in them is corruption; they are checked cheaply here (sizes, index) and fully on read;
* the last segment is scanned record by record. A bad record with nothing good after it,
  beyond the bytes known to be synced, is a torn tail: it is cut and the index rewritten.
  A bad record followed by a good one, or below the synced size, is corruption: the
  open fails with the file and offset, and nothing is skipped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sqltopic.errors import WalCorruptionError, WalSegmentMissing
from sqltopic.wal.fsutil import fsync_dir
from sqltopic.wal.index import SegmentIndex
from sqltopic.wal.meta import SegmentMeta, WalMeta
from sqltopic.wal.segment import IDX_SUFFIX, LOG_SUFFIX, NAME_DIGITS, ScanResult, Segment, scan

_NAME = re.compile(rf"^(\d{{{NAME_DIGITS}}})\{LOG_SUFFIX}$")
_IDX_NAME = re.compile(rf"^(\d{{{NAME_DIGITS}}})\{IDX_SUFFIX}$")


@dataclass(frozen=True, slots=True)
class TailCut:
    """A torn tail that recovery removed."""

    path: str
    offset: int  # where the log now ends
    bytes_removed: int


@dataclass(slots=True)
class Recovered:
    segments: list[Segment]  # in version order; the last may be active (close_us None)
    next_version: int
    removed_below: int
    tail_cut: TailCut | None
    meta_stale: bool  # the metadata file no longer describes the segments


def recover(
    directory: Path, meta: WalMeta | None, *, repair: bool, initial_version: int, now_us: int
) -> Recovered:
    """The segments of `directory`, verified; with `repair`, a torn tail is cut on disk."""
    removed_below = meta.removed_below if meta else 0
    known = meta.by_first() if meta else {}
    firsts = _segment_firsts(directory, removed_below, repair)
    _check_listed(directory, meta, firsts)
    segments: list[Segment] = []
    cut: TailCut | None = None
    stale = False
    prev_last = -(2**63)
    for n, first in enumerate(firsts):
        info = known.get(first)
        last_file = n == len(firsts) - 1
        seg: Segment | None
        if info is not None and info.close_us is not None:
            seg = _open_sealed(directory, first, info, prev_last)
        elif not last_file:
            created = info.create_us if info else now_us
            seg, stale = _scan_sealed(directory, first, prev_last, created, now_us), True
        else:
            seg, cut = _recover_tail(
                directory, first, info, prev_last, repair=repair, now_us=now_us
            )
            stale = True
        if seg is None:
            continue
        segments.append(seg)
        prev_last = seg.last_version
    next_version = max(initial_version, removed_below, meta.next_version if meta else 0)
    if segments:
        next_version = max(next_version, segments[-1].last_version + 1)
    return Recovered(segments, next_version, removed_below, cut, stale or meta is None)


def _check_listed(directory: Path, meta: WalMeta | None, firsts: list[int]) -> None:
    """Every segment the metadata knows to hold records must still be on disk."""
    if meta is None:
        return
    on_disk = set(firsts)
    for info in meta.segments:
        gone = info.first_version not in on_disk
        if gone and info.entries and info.first_version >= meta.removed_below:
            path = directory / f"{info.first_version:0{NAME_DIGITS}d}{LOG_SUFFIX}"
            raise WalSegmentMissing(
                f"WAL segment with versions {info.first_version}..{info.last_version} is "
                "missing: it is listed in meta.json but gone from the directory",
                path=str(path),
                offset=0,
            )


def _segment_firsts(directory: Path, removed_below: int, repair: bool) -> list[int]:
    """First versions of the segments on disk; leftovers of a deletion are finished off."""
    firsts: list[int] = []
    for entry in os.listdir(directory):
        m = _NAME.match(entry)
        if m:
            firsts.append(int(m.group(1)))
    firsts.sort()
    if repair:
        _remove_orphan_indexes(directory, set(firsts))
    keep = [f for f in firsts if f >= removed_below]
    if repair and len(keep) < len(firsts):
        for first in firsts[: len(firsts) - len(keep)]:
            for suffix in (LOG_SUFFIX, IDX_SUFFIX):
                (directory / f"{first:0{NAME_DIGITS}d}{suffix}").unlink(missing_ok=True)
        fsync_dir(directory)
    return keep


def _remove_orphan_indexes(directory: Path, firsts: set[int]) -> None:
    """An .idx without its .log is what an interrupted create or delete leaves."""
    for entry in os.listdir(directory):
        m = _IDX_NAME.match(entry)
        if m and int(m.group(1)) not in firsts:
            (directory / entry).unlink()


def _segment(
    directory: Path,
    first: int,
    *,
    index: SegmentIndex,
    size: int,
    create_us: int,
    close_us: int | None,
    synced: int,
) -> Segment:
    return Segment(
        directory,
        first,
        index=index,
        size=size,
        create_us=create_us,
        close_us=close_us,
        synced_size=synced,
    )


def _open_sealed(directory: Path, first: int, info: SegmentMeta, prev_last: int) -> Segment:
    seg = _segment(
        directory,
        first,
        index=SegmentIndex(),
        size=info.size,
        create_us=info.create_us,
        close_us=info.close_us,
        synced=info.size,
    )
    size = _file_size(seg.log_path)
    if size != info.size:
        raise WalCorruptionError(
            f"sealed WAL segment is {size} bytes but was sealed at {info.size}",
            path=str(seg.log_path),
            offset=min(size, info.size),
        )
    index = _read_index(seg.idx_path)
    if index is None or not _index_matches(index, first, info, size):
        seg.reindex(prev_last)  # the index is derived data: rebuild it
    else:
        seg.index = index
    _check_order(seg, prev_last)
    return seg


def _scan_sealed(
    directory: Path, first: int, prev_last: int, create_us: int, now_us: int
) -> Segment:
    """A segment that is not the last but was never recorded as sealed: scan it whole."""
    seg = _segment(
        directory,
        first,
        index=SegmentIndex(),
        size=0,
        create_us=create_us,
        close_us=now_us,
        synced=0,
    )
    seg.size = seg.synced_size = _file_size(seg.log_path)
    seg.reindex(prev_last)
    _check_order(seg, prev_last)
    return seg


def _recover_tail(
    directory: Path,
    first: int,
    info: SegmentMeta | None,
    prev_last: int,
    *,
    repair: bool,
    now_us: int,
) -> tuple[Segment | None, TailCut | None]:
    synced = info.synced_size if info else 0
    create_us = info.create_us if info else now_us
    seg = _segment(
        directory,
        first,
        index=SegmentIndex(),
        size=0,
        create_us=create_us,
        close_us=None,
        synced=synced,
    )
    seg.size = _file_size(seg.log_path)
    if seg.size < synced:
        raise WalCorruptionError(
            f"WAL segment is {seg.size} bytes, shorter than the {synced} known synced",
            path=str(seg.log_path),
            offset=seg.size,
        )
    result = scan(seg.view(seg.size), prev_last)
    _refuse_corruption(seg, result, synced)
    result = _whole_groups(seg, result, synced)
    seg.index = result.index
    _check_order(seg, prev_last)
    cut = None
    if result.valid_end < seg.size:
        cut = TailCut(str(seg.log_path), result.valid_end, seg.size - result.valid_end)
    seg.size = result.valid_end
    seg.release()
    if not repair:
        return (seg if len(seg.index) else None), cut
    if not len(seg.index):  # not one record survived: the segment never held an ack
        seg.delete_files()
        fsync_dir(directory)
        return None, cut
    _rewrite_tail(seg, result)
    seg.synced_size = seg.size  # fsynced just now: from here on damage is corruption
    seg.open_for_append()
    return seg, cut


def _whole_groups(seg: Segment, result: ScanResult, synced: int) -> ScanResult:
    """The scan cut back to the last record that ended an append: the records after it
    belong to an append that a crash interrupted, which acknowledged nothing."""
    if result.group_end == result.valid_end:
        return result
    if result.group_end < synced:
        raise WalCorruptionError(
            "the synced part of the WAL ends inside an append", path=str(seg.log_path),
            offset=result.group_end,
        )  # fmt: skip
    result.index.truncate(result.group_entries)
    bad = result.bad_offset if result.bad_offset is not None else result.group_end
    return ScanResult(
        result.index, result.group_end, bad, result.good_after_bad, result.last_ingest_us,
        result.group_end, result.group_entries,
    )  # fmt: skip


def _refuse_corruption(seg: Segment, result: ScanResult, synced: int) -> None:
    bad = result.bad_offset
    if bad is None:
        return
    if result.good_after_bad is not None:
        raise WalCorruptionError(
            f"bad WAL record followed by a good one at offset {result.good_after_bad}",
            path=str(seg.log_path),
            offset=bad,
        )
    if bad < synced:
        raise WalCorruptionError(
            f"bad WAL record below the last synced size ({synced} bytes)",
            path=str(seg.log_path),
            offset=bad,
        )


def _rewrite_tail(seg: Segment, result: ScanResult) -> None:
    """Cut the log after its last good record and make the index match it, durably.

    The log is fsynced even when nothing was cut: after a process crash its last records
    may sit only in the page cache, and readers must not see what an OS crash could
    still take back.
    """
    with open(seg.log_path, "r+b") as log:
        if _file_size(seg.log_path) != result.valid_end:
            log.truncate(result.valid_end)
        os.fsync(log.fileno())
    wanted = result.index.encode()
    if _read_bytes(seg.idx_path) != wanted:
        with open(seg.idx_path, "wb") as idx:
            idx.write(wanted)
            os.fsync(idx.fileno())
    fsync_dir(seg.directory)


def _check_order(seg: Segment, prev_last: int) -> None:
    if len(seg.index) and seg.index.versions[0] != seg.first_version:
        raise WalCorruptionError(
            f"segment's first record has version {seg.index.versions[0]}, not the "
            f"{seg.first_version} its name promises",
            path=str(seg.log_path),
            offset=0,
        )
    if seg.first_version <= prev_last:
        raise WalCorruptionError(
            f"segment starts at version {seg.first_version}, not above the previous "
            f"segment's last version {prev_last}",
            path=str(seg.log_path),
            offset=0,
        )


def _index_matches(index: SegmentIndex, first: int, info: SegmentMeta, size: int) -> bool:
    return (
        len(index) == info.entries
        and index.plausible(first, size)
        and (not len(index) or index.versions[-1] == info.last_version)
    )


def _read_index(path: Path) -> SegmentIndex | None:
    data = _read_bytes(path)
    return None if data is None else SegmentIndex.decode(data)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise WalSegmentMissing("WAL segment file is missing", path=str(path), offset=0) from None
