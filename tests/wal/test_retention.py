"""Retention on a real WAL, with an injected clock: whole closed segments go, by age
and by total size; the retained range survives a reopen."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from sqltopic.errors import VersionNotRetained
from sqltopic.wal import data_entry

if TYPE_CHECKING:
    from tests.conftest import FakeClock, WalFactory

Meters = Callable[..., pa.RecordBatch]


def test_by_period_deletes_old_closed_segments(
    open_wal: WalFactory, wal_dir: Path, clock: FakeClock, meters: Meters
) -> None:
    wal = open_wal(segment_size_kb=1, retention_period_s=3600)
    for i in range(4):  # four segments closed at t = 0 s (each entry fills one)
        wal.append([data_entry(meters(30, start=i))])
    wal.roll()
    clock.advance(1800)
    for i in range(4):  # and more closed at t = 1800 s
        wal.append([data_entry(meters(30, start=i))])
    segments_before = len(list(wal_dir.glob("*.log")))
    clock.advance(1799)
    assert wal.maintain() == []
    clock.advance(2)  # the first group is now older than an hour
    deleted = wal.maintain()
    assert deleted == [1, 2, 3, 4]
    assert len(list(wal_dir.glob("*.log"))) == segments_before - 4
    assert not (wal_dir / "00000000000000000001.log").exists()
    assert not (wal_dir / "00000000000000000001.idx").exists()
    assert wal.first_version == 5
    assert [r.version for r in wal.reader().read(5)] == [5, 6, 7, 8]


def test_by_size_keeps_the_newest_under_the_cap(
    open_wal: WalFactory, wal_dir: Path, meters: Meters
) -> None:
    wal = open_wal(segment_size_kb=1, retention_period_s=-1, retention_size_kb=4)
    for i in range(20):
        wal.append([data_entry(meters(30, start=i))])
    assert wal.size_bytes() > 4096
    assert wal.maintain()
    assert wal.size_bytes() <= 4096 or len(wal.state().segments) == 1
    kept = sum(p.stat().st_size for p in wal_dir.glob("*.log"))
    assert kept == wal.size_bytes()
    assert wal.last_version == 20
    assert wal.reader().read(wal.first_version)[0].version == wal.first_version


def test_the_active_segment_is_never_deleted(
    open_wal: WalFactory, clock: FakeClock, meters: Meters
) -> None:
    wal = open_wal(segment_size_kb=0, roll_period_s=0, retention_period_s=0, retention_size_kb=1)
    wal.append([data_entry(meters(500))])
    clock.advance(10**6)
    assert wal.maintain() == []
    assert wal.first_version == 1


def test_retained_range_survives_reopen(
    open_wal: WalFactory, clock: FakeClock, meters: Meters
) -> None:
    wal = open_wal(segment_size_kb=1, retention_period_s=10)
    for i in range(6):
        wal.append([data_entry(meters(30, start=i))])
    clock.advance(11)
    wal.maintain()
    first = wal.first_version
    assert first > 1
    wal.close()
    again = open_wal(segment_size_kb=1, retention_period_s=10)
    assert again.first_version == first
    with pytest.raises(VersionNotRetained) as err:
        again.reader().read(1)
    assert err.value.first_version == first
    assert again.append([data_entry(meters(1))]) == [7]


def test_everything_deleted_keeps_counting_versions(
    open_wal: WalFactory, clock: FakeClock, meters: Meters
) -> None:
    wal = open_wal(retention_period_s=0)
    wal.append([data_entry(meters(5)), data_entry(meters(5))])
    wal.roll()
    assert wal.maintain() == [1]
    assert (wal.first_version, wal.next_version) == (3, 3)
    wal.close()
    again = open_wal(retention_period_s=0)
    assert (again.first_version, again.next_version) == (3, 3)
    assert again.append([data_entry(meters(1))]) == [3]
    with pytest.raises(VersionNotRetained):
        again.reader().read(2)
