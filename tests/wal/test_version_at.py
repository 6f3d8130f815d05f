"""Look-up by time (`WalReader.version_at`): the first version ingested at or after a
time, across segments, retention, reopening, and a clock that steps back."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sqltopic.wal import meta_entry
from sqltopic.wal.reader import _version_at

if TYPE_CHECKING:
    from sqltopic.wal import Wal
    from tests.conftest import FakeClock, WalFactory

START = 1_700_000_000_000_000  # FakeClock's start, µs


def write_at(wal: Wal, clock: FakeClock, seconds: list[float], *, roll: bool = False) -> None:
    """One entry at each of these times (seconds after START); `roll`: each in a
    segment of its own."""
    for s in seconds:
        clock.now_us = START + int(s * 1_000_000)
        wal.append([meta_entry({"at": s})])
        if roll:
            wal.roll()


@pytest.mark.parametrize(
    ("seconds", "version"),
    [
        (-100.0, 1),  # before everything: the first entry
        (0.0, 1),  # at an entry's time: that entry
        (0.5, 2),  # between two entries: the later
        (1.0, 2),
        (3.0, 3),  # entries 3 and 4 share a time: the first of them
        (9.0, 6),
        (9.5, 7),  # after the last entry: the end
        (10_000.0, 7),
    ],
)
def test_the_first_version_at_or_after_a_time_across_segments(
    open_wal: WalFactory, clock: FakeClock, seconds: float, version: int
) -> None:
    wal = open_wal()
    write_at(wal, clock, [0, 1, 3, 3, 5, 9], roll=True)
    assert len(wal.state().segments) == 6
    assert wal.reader().version_at(START + int(seconds * 1_000_000)) == version


def test_within_one_segment_and_on_an_empty_wal(open_wal: WalFactory, clock: FakeClock) -> None:
    wal = open_wal()
    assert wal.reader().version_at(START) == wal.next_version == 1
    write_at(wal, clock, [float(i) for i in range(100)])
    assert len(wal.state().segments) == 1
    reader = wal.reader()
    assert [reader.version_at(START + i * 1_000_000) for i in (0, 1, 50, 99)] == [1, 2, 51, 100]
    assert reader.version_at(START + 99_000_001) == 101


def test_a_clock_stepping_back_stamps_the_newest_time_again(
    open_wal: WalFactory, clock: FakeClock
) -> None:
    wal = open_wal()
    write_at(wal, clock, [10.0])
    clock.now_us = START  # stepped back ten seconds
    wal.append([meta_entry({"late": True})])
    stamps = [r.ingest_us for r in wal.reader().read(1)]
    assert stamps == [START + 10_000_000, START + 10_000_000]
    assert wal.reader().version_at(START + 10_000_000) == 1


def test_the_newest_time_holds_across_a_reopen(open_wal: WalFactory, clock: FakeClock) -> None:
    wal = open_wal()
    write_at(wal, clock, [10.0])
    wal.close()
    clock.now_us = START
    wal = open_wal()
    wal.append([meta_entry({})])
    assert [r.ingest_us for r in wal.reader().read(1)] == [START + 10_000_000] * 2


def test_a_time_before_retention_gives_the_first_retained_version(
    open_wal: WalFactory, clock: FakeClock
) -> None:
    wal = open_wal(retention_period_s=60)
    write_at(wal, clock, [0, 1, 2], roll=True)
    clock.now_us = START + 100_000_000
    wal.append([meta_entry({})])
    assert wal.maintain() == [1, 2, 3]
    reader = wal.reader()
    assert reader.version_at(START) == wal.first_version == 4
    assert reader.version_at(START + 100_000_001) == 5


def test_only_readable_versions_are_found(open_wal: WalFactory, clock: FakeClock) -> None:
    wal = open_wal()
    write_at(wal, clock, [0, 1])
    snapshot = wal.reader().state()
    write_at(wal, clock, [2])
    # a reader of the older snapshot does not see version 3
    assert _version_at(snapshot, START + 2_000_000) == snapshot.next_version == 3
    assert wal.reader().version_at(START + 2_000_000) == 3
    assert wal.reader().version_at(START + 2_000_001) == 4
