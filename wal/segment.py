"""One WAL segment: the `.log` file of records, its `.idx` file, and their memory map.

A segment is named by its first version, zero-padded to 20 digits. While it is the
active segment the writer appends to it; once sealed (fsynced and recorded in the
metadata file) it never changes until retention deletes it.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from sqltopic.errors import WalCorruptionError
from sqltopic.wal.fsutil import fsync_dir, write_all
from sqltopic.wal.index import SegmentIndex
from sqltopic.wal.record import (
    ALIGN,
    HEADER_SIZE,
    MAGIC,
    Header,
    body_ok,
    decode_header,
)
from sqltopic.wal.rows import RowCounts

NAME_DIGITS = 20
LOG_SUFFIX = ".log"
IDX_SUFFIX = ".idx"


def segment_name(first_version: int) -> str:
    return f"{first_version:0{NAME_DIGITS}d}"


@dataclass(slots=True)
class ScanResult:
    """What a front-to-back scan of a segment's bytes found."""

    index: SegmentIndex
    valid_end: int  # offset just after the last good record
    bad_offset: int | None  # first offset that does not hold a good record, if any
    good_after_bad: int | None  # offset of a good record beyond bad_offset, if any
    last_ingest_us: int
    group_end: int = 0  # offset just after the last good record that ends an append
    group_entries: int = 0  # records up to group_end


def scan(
    buf: memoryview, above_version: int, *, start: int = 0, index: SegmentIndex | None = None
) -> ScanResult:
    """Verify records from `start` until the first bad one; look for good ones beyond.

    A record is good when its magic, header checksum and body checksum hold and its
    version is above the previous one (the first above `above_version`). Records found
    are added to `index` (the records before `start`, if any).
    """
    index = index if index is not None else SegmentIndex()
    offset, prev, last_ingest = start, above_version, 0
    group_end, group_entries = start, len(index)
    size = len(buf)
    bad: int | None = None
    while offset < size:
        header = _good_header(buf, offset, prev)
        if header is None:
            bad = offset
            break
        index.add(header.version, offset)
        prev, last_ingest = header.version, header.ingest_us
        offset += header.record_size
        if header.ends_group:
            group_end, group_entries = offset, len(index)
    after = _find_good(buf, bad + ALIGN) if bad is not None else None
    return ScanResult(index, offset, bad, after, last_ingest, group_end, group_entries)


def _good_header(buf: memoryview, offset: int, above_version: int) -> Header | None:
    header = decode_header(buf, offset)
    if header is None or header.version <= above_version:
        return None
    if offset + header.record_size > len(buf) or not body_ok(buf, offset, header):
        return None
    return header


def _find_good(buf: memoryview, start: int) -> int | None:
    """The offset of the first good record at or after `start`, on the 8-byte grid."""
    pos = start - start % ALIGN
    raw: bytes | mmap.mmap
    if isinstance(buf.obj, (bytes, mmap.mmap)) and len(buf.obj) == buf.nbytes:
        raw = buf.obj  # search the mapping itself rather than a copy of it
    else:
        raw = bytes(buf)
    while True:
        pos = raw.find(MAGIC, pos, len(buf))
        if pos < 0:
            return None
        if pos % ALIGN == 0 and _good_header(buf, pos, -(2**63)) is not None:
            return pos
        pos += 1


def _map(fd: int, size: int) -> mmap.mmap:
    """A read-only map of a log's first `size` bytes. Before Python 3.13 a map keeps a
    duplicate of `fd` open for as long as it lives (one descriptor per mapped segment);
    from 3.13 on it keeps none: the map alone holds the bytes."""
    if sys.version_info >= (3, 13):
        return mmap.mmap(fd, size, prot=mmap.PROT_READ, trackfd=False)
    return mmap.mmap(fd, size, prot=mmap.PROT_READ)


class Segment:
    """A `.log`/`.idx` pair; appendable while active, immutable once sealed."""

    def __init__(
        self,
        directory: Path,
        first_version: int,
        *,
        index: SegmentIndex,
        size: int,
        create_us: int,
        close_us: int | None,
        synced_size: int,
    ) -> None:
        self.directory = directory
        self.first_version = first_version
        self.index = index
        self.size = size
        self.create_us = create_us
        self.close_us = close_us
        self.synced_size = synced_size
        self._log_fd = -1
        self._idx_fd = -1
        self._map: mmap.mmap | None = None
        self._view: memoryview | None = None
        self._map_lock = threading.Lock()
        # the log's path as a string: a reader of the active segment remaps at each new
        # record, and building the Path costs more than the mmap call
        self._log_name = os.fspath(self.log_path)
        self.broken = False  # a failed write could not be cut back
        self.rows = RowCounts()  # data rows before each record (lag in rows)

    # --- names and facts -------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.directory / (segment_name(self.first_version) + LOG_SUFFIX)

    @property
    def idx_path(self) -> Path:
        return self.directory / (segment_name(self.first_version) + IDX_SUFFIX)

    @property
    def sealed(self) -> bool:
        return self.close_us is not None

    @property
    def is_open(self) -> bool:
        """Whether the files are open for appending."""
        return self._log_fd >= 0

    @property
    def last_version(self) -> int:
        """The last version held; first_version - 1 when empty."""
        return self.index.versions[-1] if len(self.index) else self.first_version - 1

    # --- writing ---------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, first_version: int, now_us: int) -> Segment:
        """A new, empty active segment whose files exist durably."""
        seg = cls(
            directory,
            first_version,
            index=SegmentIndex(),
            size=0,
            create_us=now_us,
            close_us=None,
            synced_size=0,
        )
        # The log must be new; an index left by an interrupted create is just replaced.
        os.close(os.open(seg.log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.close(os.open(seg.idx_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        fsync_dir(directory)
        seg.open_for_append()
        return seg

    def open_for_append(self) -> None:
        # read-write: the reader's remaps of the active segment map through it
        self._log_fd = os.open(self.log_path, os.O_RDWR)
        self._idx_fd = os.open(self.idx_path, os.O_WRONLY)
        os.lseek(self._log_fd, self.size, os.SEEK_SET)
        os.lseek(self._idx_fd, len(self.index) * 16, os.SEEK_SET)

    def append(self, buffers: list[object], versions: list[int], sizes: list[int]) -> None:
        """Write whole records (header, body, padding per record) and index them.

        On a failed write the log is cut back, so no partial record stays behind.
        """
        start, count = self.size, len(self.index)
        try:
            write_all(self._log_fd, buffers)
            # The size grows before the entries appear, so whoever sees an entry can
            # map all of its bytes.
            self.size = start + sum(sizes)
            offset = start
            for version, size in zip(versions, sizes, strict=True):
                self.index.add(version, offset)
                offset += size
            write_all(self._idx_fd, [self.index.encode(count)])
        except OSError:
            try:
                self._rollback(start, count)
            except OSError:
                # The file now holds a partial record at an unknown length: nothing may
                # be appended after it. The writer stops taking writes.
                self.broken = True
            raise

    def _rollback(self, size: int, count: int) -> None:
        self.index.truncate(count)
        self.size = size
        os.ftruncate(self._log_fd, size)
        os.lseek(self._log_fd, size, os.SEEK_SET)
        os.ftruncate(self._idx_fd, count * 16)
        os.lseek(self._idx_fd, count * 16, os.SEEK_SET)

    def dup_log_fd(self) -> int:
        """A duplicate of the log descriptor, for an fsync that may outlive a roll."""
        return os.dup(self._log_fd)

    def seal(self, now_us: int) -> None:
        """Make the segment durable and immutable."""
        os.fsync(self._log_fd)
        os.fsync(self._idx_fd)
        self.synced_size = self.size
        self.close_us = now_us
        self.close_files()

    def sync_all(self) -> None:
        """fsync both files of the active segment (clean shutdown)."""
        os.fsync(self._log_fd)
        os.fsync(self._idx_fd)
        self.synced_size = self.size

    def close_files(self) -> None:
        with self._map_lock:  # a remap may be mapping through the log's descriptor
            fds, self._log_fd, self._idx_fd = (self._log_fd, self._idx_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    # --- reading ---------------------------------------------------------------------

    def view(self, need: int) -> memoryview:
        """A read-only view of the log covering at least its first `need` bytes.

        The map is widened to the current size when too short; views handed out before
        stay valid (an old map lives on while anything still references it).
        """
        current = self._view
        if current is not None and len(current) >= need:
            return current
        with self._map_lock:
            if self._view is None or len(self._view) < need:
                self._remap()
            assert self._view is not None
            return self._view

    def _remap(self) -> None:
        size = self.size
        if size == 0:
            self._view = memoryview(b"")
            return
        if self._log_fd >= 0:  # the active segment, remapped at every new record read
            self._map = _map(self._log_fd, size)
        else:
            fd = os.open(self._log_name, os.O_RDONLY)
            try:
                self._map = _map(fd, size)
            finally:
                os.close(fd)
        self._view = memoryview(self._map)

    def record(self, i: int, end: int) -> tuple[Header, memoryview]:
        """The verified header and body of entry `i`; `end` bounds the bytes mapped."""
        found = self._check(i, end)
        if found is None and self.sealed:
            # A sealed segment's index came from its .idx file, which is derived data and
            # may be the damaged part: rebuild it from the log, then look again.
            self.reindex(self.first_version - 1)
            found = self._check(i, self.end_of(i))
        if found is None:
            raise WalCorruptionError(
                f"WAL record for version {self.index.versions[i]} failed its checks",
                path=str(self.log_path),
                offset=self.index.offsets[i],
            )
        return found

    def _check(self, i: int, end: int) -> tuple[Header, memoryview] | None:
        offset = self.index.offsets[i]
        buf = self.view(end)
        header = decode_header(buf, offset)
        if header is None or header.version != self.index.versions[i]:
            return None
        if not body_ok(buf, offset, header):
            return None
        start = offset + HEADER_SIZE
        return header, buf[start : start + header.body_len]

    def reindex(self, above_version: int) -> None:
        """Rebuild the index by a full scan of a sealed log; any bad record is corruption."""
        result = scan(self.view(self.size), above_version)
        if result.bad_offset is not None:
            raise WalCorruptionError(
                "bad WAL record inside a sealed segment",
                path=str(self.log_path),
                offset=result.bad_offset,
            )
        self.index = result.index

    def header_of(self, i: int) -> Header:
        """Entry i's header alone, checked by its own hash (the body is neither read
        nor checked): what look-ups by time and row counts probe."""
        header = decode_header(self.view(self.end_of(i)), self.index.offsets[i])
        if header is None or header.version != self.index.versions[i]:
            header = self.record(i, self.end_of(i))[0]  # rebuilds a damaged index, or raises
        return header

    def ingest_of(self, i: int) -> int:
        """Entry i's ingest time (from its header)."""
        return self.header_of(i).ingest_us

    def end_of(self, i: int) -> int:
        """The byte offset where entry i's record ends (the next one starts)."""
        if i + 1 < len(self.index):
            return self.index.offsets[i + 1]
        return self.size

    def release(self) -> None:
        """Drop this object's hold on files and maps (views handed out stay valid)."""
        self.close_files()
        with self._map_lock:
            self._view = None
            self._map = None

    def delete_files(self) -> None:
        self.release()
        for path in (self.log_path, self.idx_path):
            path.unlink(missing_ok=True)
