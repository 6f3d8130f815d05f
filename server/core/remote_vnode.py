"""A cluster's mnode reading a vgroup a dnode hosts, as it reads a local vnode: what its
SELECT and SHOW SUBSCRIPTIONS need (a reader of entries, the retained range, the
committed offsets), each read a call to the dnode (`Dnode.Entries`, `Dnode.Offsets`:
server/rpc/dnode_calls.py). Read-only: writes and polls go to the dnodes themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from sqltopic.errors import VersionNotRetained
from sqltopic.server.vnode.entry_names import EntryNames
from sqltopic.server.vnode.vnode import Lag
from sqltopic.sql.topic.params import topic_of
from sqltopic.wal import EntryType
from sqltopic.wal.codec import decode_arrow_keyed

# Entries one read asks a dnode for unless told (a dnode answers at most 4 MiB of them).
READ_ENTRIES = 1024
# (version, entry type, ingest µs, body) of one entry read from a dnode
RawRecord = tuple[int, int, int, bytes]


class DnodeReads(Protocol):
    """The mnode's reads of a dnode's vgroups (server/rpc/dnode_calls.py)."""

    def entries(
        self, endpoint: str, vgroup: int, from_version: int, max_entries: int
    ) -> tuple[int, int, list[RawRecord]]:
        """(first retained version, next version, entries from `from_version`)."""
        ...

    def offsets(self, endpoint: str, vgroup: int, topic: str) -> list[tuple[str, str, int]]:
        """(subscription, group, offset) committed there on `topic` and its bindings."""
        ...

    def lags(
        self, endpoint: str, vgroup: int, subscriptions: list[tuple[str, str, int | None]]
    ) -> list[Lag]:
        """The Lag of each (subscription, group, position) there."""
        ...


@dataclass(frozen=True)
class RemoteRecord:
    """One entry as a WAL reader's record gives it (what the readers use of one)."""

    version: int
    entry_type: EntryType
    ingest_us: int
    body: pa.Buffer

    def arrow_keyed(self) -> tuple[pa.RecordBatch, bytes]:
        return decode_arrow_keyed(self.body)


class RemoteReader:
    """A reader of a dnode's vgroup. Like a WalReader it reads up to the end it saw: a
    read at or past the end an earlier answer gave returns nothing without a call."""

    def __init__(self, vnode: RemoteVnode) -> None:
        self._vnode = vnode
        self._end: int | None = None

    @property
    def first_version(self) -> int:
        v = self._vnode
        first, self._end, _ = v.reads.entries(v.endpoint, v.vgroup, 0, 0)
        return first

    def read(self, from_version: int, *, max_entries: int = READ_ENTRIES) -> list[RemoteRecord]:
        """Entries from `from_version`, as WalReader.read: VersionNotRetained below the
        first retained one."""
        if self._end is not None and from_version >= self._end:
            return []
        v = self._vnode
        first, end, raw = v.reads.entries(v.endpoint, v.vgroup, from_version, max_entries)
        if from_version < first:
            raise VersionNotRetained(from_version, first, end)
        self._end = end
        return [
            RemoteRecord(n, EntryType(kind), us, pa.py_buffer(body)) for n, kind, us, body in raw
        ]


class RemoteWal:
    """The retained range of a dnode's vgroup, asked at each look."""

    def __init__(self, vnode: RemoteVnode) -> None:
        self._vnode = vnode

    def _range(self) -> tuple[int, int]:
        v = self._vnode
        first, end, _ = v.reads.entries(v.endpoint, v.vgroup, 0, 0)
        return first, end

    @property
    def first_version(self) -> int:
        return self._range()[0]

    @property
    def next_version(self) -> int:
        return self._range()[1]


class RemoteOffsets:
    def __init__(self, vnode: RemoteVnode) -> None:
        self._vnode = vnode

    def subscriptions(self, topic: str) -> list[tuple[str, str]]:
        v = self._vnode
        return [(t, g) for t, g, _ in v.reads.offsets(v.endpoint, v.vgroup, topic)]

    def get(self, topic: str, group: str) -> int | None:
        v = self._vnode
        found = v.reads.offsets(v.endpoint, v.vgroup, topic_of(topic))
        return next((offset for t, g, offset in found if (t, g) == (topic, group)), None)


class RemoteVnode:
    """A dnode's vgroup, seen from the mnode."""

    def __init__(self, endpoint: str, vgroup: int, reads: DnodeReads) -> None:
        self.endpoint = endpoint
        self.vgroup = vgroup
        self.reads = reads
        self.wal = RemoteWal(self)
        self.offsets = RemoteOffsets(self)
        self.entry_names = EntryNames()  # as a local vnode's (server/vnode/entry_names.py)

    def reader(self) -> RemoteReader:
        return RemoteReader(self)

    def lags(self, subscriptions: list[tuple[str, str, int | None]]) -> list[Lag]:
        """The lag of each (subscription, group, position) here, asked of the dnode."""
        return self.reads.lags(self.endpoint, self.vgroup, subscriptions)
