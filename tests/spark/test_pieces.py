"""Partition listing: pieces cover each vgroup's versions exactly once, in order, each
inside one segment and bounded in bytes; bounds move inside the WAL, or with `strict`
are refused."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sqltopic.client import Connection
from sqltopic.errors import BackfillError
from sqltopic.spark_jobs import remote
from sqltopic.spark_jobs.pieces import list_pieces
from sqltopic.spark_jobs.remote import Remote
from tests.live_server import ServerProcess
from tests.spark.conftest import HistoryFactory

DDL = """
CREATE DATABASE p VGROUPS 2 WAL_SEGMENT_SIZE 4; USE p;
CREATE TABLE a (ts TIMESTAMP, v INT); CREATE TABLE b (ts TIMESTAMP, v INT);
"""


def _history(make_history: HistoryFactory) -> tuple[Path, dict[int, list[int]]]:
    engine = make_history(DDL)
    for i in range(60):
        engine.execute(f"INSERT INTO a VALUES ({1_700_000_000_000 + i}, {i}) "
                       f"b VALUES ({1_700_000_000_000 + i}, {i})")  # fmt: skip
    versions = {}
    for vgroup, vnode in engine.state.vnodes.items():
        reader = vnode.reader()
        versions[vgroup] = [r.version for batch in reader.batches(0) for r in batch]
    return engine.state.data_dir, versions


def test_pieces_cover_every_version_once_in_order(make_history: HistoryFactory) -> None:
    data_dir, versions = _history(make_history)
    pieces = list_pieces(data_dir, tuple(versions), {}, {}, piece_bytes=1500)
    assert sum(1 for v in versions.values() if len(v) > 60) >= 1
    for vgroup, expected in versions.items():
        if not expected:
            continue
        mine = [p for p in pieces if p.vgroup == vgroup]
        assert [p.seq for p in mine] == list(range(len(mine)))
        assert len({p.segment for p in mine}) > 1, "the WAL should have several segments"
        covered = [v for p in mine for v in expected if p.start <= v < p.end]
        assert covered == expected
        assert sum(p.entries for p in mine) == len(expected)
        # a piece ends with the first entry that starts beyond 1500 bytes: entries here
        # are a few hundred bytes
        assert all(p.bytes < 1500 + 1000 for p in mine)
        assert len(mine) > len({p.segment for p in mine}), "segments should be split"
        assert all(p.segment <= p.start for p in mine)


def test_bounds_and_strict_bounds(make_history: HistoryFactory) -> None:
    data_dir, versions = _history(make_history)
    vgroup = max(versions, key=lambda v: len(versions[v]))
    vs = versions[vgroup]
    start, end = vs[10], vs[20]
    pieces = list_pieces(data_dir, (vgroup,), {vgroup: start}, {vgroup: end})
    assert [v for p in pieces for v in vs if p.start <= v < p.end] == vs[10:20]
    beyond = {vgroup: vs[-1] + 100}
    assert list_pieces(data_dir, (vgroup,), {}, beyond)[-1].end == vs[-1] + 1
    with pytest.raises(BackfillError, match="past the WAL's end"):
        list_pieces(data_dir, (vgroup,), {}, beyond, strict=True)


def test_within_bounds_versions_and_is_never_refused(make_history: HistoryFactory) -> None:
    data_dir, versions = _history(make_history)
    vgroup = max(versions, key=lambda v: len(versions[v]))
    vs = versions[vgroup]
    pieces = list_pieces(data_dir, (vgroup,), {}, {}, within=(vs[5], vs[15]))
    assert [v for p in pieces for v in vs if p.start <= v < p.end] == vs[5:15]
    beyond = (vs[-1] + 10, None)
    assert list_pieces(data_dir, (vgroup,), {}, {}, strict=True, within=beyond) == []


def test_pieces_through_the_server_are_cut_by_rows(
    server: ServerProcess, live_power: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remote.pieces` cuts each vgroup's range into pieces of about PIECE_ROWS rows (from
    the WAL's running row counts), contiguous, numbered in version order; a range of no
    rows is one piece."""
    live_power.execute("CREATE TOPIC every AS SELECT * FROM power.meters")
    for i in range(12):  # 12 one-row entries in d1's vgroup
        live_power.execute(
            f"INSERT INTO power.d1 USING power.meters TAGS ('a', 1) "
            f"VALUES ({1_700_000_000_000 + i}, 1.0, 220, 0.1)"
        )
    monkeypatch.setattr(remote, "PIECE_ROWS", 5)
    source = Remote(server.address, "root", "taosdata", "every").located("power")
    found = remote.extents(source, (1, 2))
    pieces = remote.pieces(source, (1, 2), {}, {})
    rows = remote.rows_between(
        source,
        {v: e.first for v, e in found.items()},
        {v: e.next_version for v, e in found.items()},
    )
    assert sorted(rows.values()) == [0, 12]
    for vgroup, ext in found.items():
        mine = [p for p in pieces if p.vgroup == vgroup]
        assert [p.seq for p in mine] == list(range(len(mine)))
        assert [(p.start, p.end) for p in mine] == [
            (a.start, b.start) for a, b in itertools.pairwise(mine)
        ] + [(mine[-1].start, ext.next_version)]
        assert mine[0].start == ext.first
        assert len(mine) == (3 if rows[vgroup] == 12 else 1)  # ceil(12 / 5); no rows: one
