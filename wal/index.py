"""A segment's index: version -> byte offset, fixed-width entries on disk and in memory.

Entry i of `NNN.idx` is the i-th record of `NNN.log`. When a segment's versions are
contiguous (the vnode's normal case) the entry of version v sits at i = v - first,
found in O(1); with gaps the guess is checked and a binary search takes over.
"""

from __future__ import annotations

import bisect
import sys
from array import array

import pyarrow as pa
import pyarrow.compute as pc

from sqltopic.wal.record import INDEX_ENTRY, INDEX_ENTRY_SIZE


class SegmentIndex:
    """Versions and offsets of one segment's records, in append order."""

    __slots__ = ("offsets", "versions")

    def __init__(self) -> None:
        self.versions = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.versions)

    def add(self, version: int, offset: int) -> None:
        self.versions.append(version)
        self.offsets.append(offset)

    def truncate(self, count: int) -> None:
        del self.versions[count:]
        del self.offsets[count:]

    def position(self, version: int, count: int | None = None) -> int:
        """Index of the first of the first `count` entries with a version >= `version`.

        Returns `count` when every entry is below `version`.
        """
        n = len(self.versions) if count is None else count
        if n == 0:
            return 0
        guess = version - self.versions[0]
        if guess <= 0:
            return 0
        if guess < n and self.versions[guess] == version:
            return guess
        return bisect.bisect_left(self.versions, version, 0, n)

    def encode(self, start: int = 0) -> bytes:
        """Entries from `start` on, in the on-disk format."""
        pack = INDEX_ENTRY.pack
        v, o = self.versions, self.offsets
        return b"".join(pack(v[i], o[i]) for i in range(start, len(v)))

    @classmethod
    def decode(cls, data: bytes) -> SegmentIndex | None:
        """The index in `data`, or None if its length is not a whole number of entries."""
        if len(data) % INDEX_ENTRY_SIZE:
            return None
        index = cls()
        flat = array("q")
        flat.frombytes(data)
        if sys.byteorder == "big":  # the format is little-endian everywhere
            flat.byteswap()
        index.versions = flat[0::2]
        index.offsets = flat[1::2]
        return index

    def plausible(self, first_version: int, log_size: int) -> bool:
        """Cheap consistency: versions rise, offsets rise from 0 and stay inside the log."""
        v, o = self.versions, self.offsets
        if not v:
            return log_size == 0
        if v[0] != first_version or o[0] != 0 or o[-1] >= log_size:
            return False
        return _rising(v) and _rising(o)


def _rising(values: array[int]) -> bool:
    """Strictly increasing, checked by Arrow over the array's own memory (no Python loop:
    a sealed segment can hold a million entries)."""
    n = len(values)
    if n < 2:
        return True
    arr = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(values)])
    return bool(pc.all(pc.less(arr.slice(0, n - 1), arr.slice(1))).as_py())
