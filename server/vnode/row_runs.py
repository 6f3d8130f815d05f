"""Row ids in bulk: the runs (server/vnode/share_window.py's `Run`) of a block's id columns
and of a request's id lists.

A shared group's poll hands out, and its acknowledgements name, whole entries' worth of
rows at a time; the window keeps them as runs. Turning a 1,000-row block's id columns
into its one run, or 1,000 acknowledged ids from the wire into theirs, costs a few list
operations done in C here instead of a Python tuple per row.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from sqltopic.proto.wire import varint
from sqltopic.server.vnode.share_window import Run, runs_of


def runs_of_lists(versions: Sequence[int], indexes: Sequence[int]) -> list[Run]:
    """The rows (versions[i], indexes[i]) as runs: sorted, repeats dropped, consecutive
    rows of a version joined. Ids in order, each version's rows consecutive (a whole
    entry, as a poll hands them out and a client gives them back), cost a few list
    operations in C per version."""
    vs, xs = list(versions), list(indexes)
    if len(vs) != len(xs):
        raise ValueError(f"{len(vs)} versions but {len(xs)} indexes")
    if not vs:
        return []
    if vs.count(vs[0]) == len(vs):  # one version (the common case): sorted already
        lo = xs[0]
        if xs == list(range(lo, lo + len(xs))):
            return [(vs[0], lo, lo + len(xs))]
    if vs != sorted(vs):
        return runs_of(zip(vs, xs, strict=True))
    out: list[Run] = []
    at = 0
    while at < len(vs):
        version = vs[at]
        end = bisect.bisect_right(vs, version, at)
        lo = xs[at]
        if xs[at:end] == list(range(lo, lo + end - at)):
            out.append((version, lo, lo + end - at))
        else:  # out of order, with gaps or repeats: row by row
            out += runs_of((version, x) for x in xs[at:end])
        at = end
    return out


# DataMessage's id fields (sqltopic.proto), packed: their numbers and wire type 2.
_VERSIONS_FIELD, _INDEXES_FIELD, _COUNTS_FIELD = 5, 6, 7
# Row indexes 0 .. 65,535 as varints in one buffer, with where each starts: the indexes
# of a run of an entry's rows are one slice of it (an entry's rows usually fit).
_COUNTED = 1 << 16


_INDEX_VARINTS = [varint(i) for i in range(_COUNTED + 1)]
_INDEX_AT = [0]
for _piece in _INDEX_VARINTS:
    _INDEX_AT.append(_INDEX_AT[-1] + len(_piece))
_INDEX_BYTES = b"".join(_INDEX_VARINTS)


def encode_ids(runs: Sequence[tuple[Run, int]]) -> bytes:
    """DataMessage's `row_versions`, `row_indexes` and `delivery_counts` for rows given
    as runs with their delivery count, in message order, serialised: merged into a
    message (MergeFromString) they cost a few byte operations per run, where filling
    the repeated fields from lists cost ~0.13 µs per row (docs/performance.md §10)."""
    versions = b"".join(varint(v) * (hi - lo) for (v, lo, hi), _ in runs)
    indexes = b"".join(_indexes(lo, hi) for (_, lo, hi), _ in runs)
    counts = b"".join(varint(count) * (hi - lo) for (_, lo, hi), count in runs)
    return (
        _field(_VERSIONS_FIELD, versions)
        + _field(_INDEXES_FIELD, indexes)
        + _field(_COUNTS_FIELD, counts)
    )


def _indexes(lo: int, hi: int) -> bytes:
    if hi <= _COUNTED:
        return _INDEX_BYTES[_INDEX_AT[lo] : _INDEX_AT[hi]]
    return b"".join(varint(i) for i in range(lo, hi))


def _field(number: int, payload: bytes) -> bytes:
    """A packed repeated field: its key, length and payload (nothing when empty)."""
    if not payload:
        return b""
    return varint(number << 3 | 2) + varint(len(payload)) + payload
