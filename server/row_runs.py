"""Row ids in bulk: the runs (server/share_window.py's `Run`) of a block's id columns
and of a request's id lists.

A shared group's poll hands out, and its acknowledgements name, whole entries' worth of
rows at a time; the window keeps them as runs. Turning a 1,000-row block's id columns
into its one run, or 1,000 acknowledged ids from the wire into theirs, costs a few list
operations done in C here instead of a Python tuple per row.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from sqltopic.server.share_window import Run, runs_of


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
