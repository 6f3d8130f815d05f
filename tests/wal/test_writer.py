"""Appending: versions, rolling, reopening, levels, group commit, locks, notification."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from sqltopic.errors import VersionOrderError, WalClosedError, WalLockedError
from sqltopic.wal import EntryType, Wal, WalEntry, WalOptions, data_entry, meta_entry

if TYPE_CHECKING:
    from tests.conftest import FakeClock, WalFactory

Meters = Callable[..., pa.RecordBatch]


def _log_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))


def test_append_assigns_consecutive_versions_from_one(open_wal: WalFactory, meters: Meters) -> None:
    wal = open_wal()
    assert (wal.first_version, wal.last_version, wal.next_version) == (1, 0, 1)
    assert wal.append([data_entry(meters(3)), meta_entry({"type": "create"})]) == [1, 2]
    assert wal.append([data_entry(meters(1))]) == [3]
    assert (wal.first_version, wal.last_version, wal.next_version) == (1, 3, 4)
    records = wal.reader().read(1)
    assert [(r.version, r.entry_type) for r in records] == [
        (1, EntryType.DATA),
        (2, EntryType.META),
        (3, EntryType.DATA),
    ]
    assert records[0].arrow().equals(meters(3))
    assert records[1].json() == {"type": "create"}


def test_explicit_versions_may_leave_gaps(open_wal: WalFactory) -> None:
    wal = open_wal()
    assert wal.append([meta_entry({"n": 1}, version=10), meta_entry({"n": 2})]) == [10, 11]
    assert wal.append([meta_entry({"n": 3}, version=100)]) == [100]
    reader = wal.reader()
    assert [r.version for r in reader.read(0)] == [10, 11, 100]
    assert [r.version for r in reader.read(12)] == [100]
    assert reader.read(101) == []


def test_versions_must_rise_and_a_refused_append_writes_nothing(open_wal: WalFactory) -> None:
    wal = open_wal()
    wal.append([meta_entry({"n": 1}, version=5)])
    with pytest.raises(
        VersionOrderError, match=r"version 5 is not above the version before it \(6\)"
    ):
        wal.append([meta_entry({"n": 2}), meta_entry({"n": 3}, version=5)])
    assert wal.next_version == 6
    assert [r.version for r in wal.reader().read(0)] == [5]


def test_rolls_by_segment_size(open_wal: WalFactory, wal_dir: Path, meters: Meters) -> None:
    wal = open_wal(segment_size_kb=4)
    for i in range(20):
        wal.append([data_entry(meters(50, start=i * 50))])
    logs = _log_files(wal_dir)
    assert len(logs) > 3
    assert logs[0] == "00000000000000000001.log"
    firsts = [int(name[:20]) for name in logs]
    sizes = [(wal_dir / name).stat().st_size for name in logs]
    assert all(size < 4096 + 8192 for size in sizes)  # each rolled once past 4 KiB
    rows = [r.arrow() for r in wal.reader().read(1)]
    assert sum(b.num_rows for b in rows) == 1000
    assert [s.first_version for s in wal.state().segments] == firsts


def test_rolls_by_period(open_wal: WalFactory, wal_dir: Path, clock: FakeClock) -> None:
    wal = open_wal(roll_period_s=10)
    wal.append([meta_entry({"n": 1})])
    clock.advance(5)
    wal.append([meta_entry({"n": 2})])
    assert len(_log_files(wal_dir)) == 1
    clock.advance(5)
    wal.append([meta_entry({"n": 3})])
    assert _log_files(wal_dir) == ["00000000000000000001.log", "00000000000000000003.log"]
    clock.advance(10)
    wal.maintain()  # an idle WAL rolls too
    assert wal.state().segments[-1].sealed


def test_reopen_keeps_everything(open_wal: WalFactory, wal_dir: Path, meters: Meters) -> None:
    wal = open_wal(segment_size_kb=2)
    for i in range(30):
        wal.append([data_entry(meters(10, start=i * 10)), meta_entry({"i": i})])
    wal.close()
    again = open_wal(segment_size_kb=2)
    assert again.tail_cut is None
    assert (again.first_version, again.last_version) == (1, 60)
    records = again.reader().read(1, max_entries=100)
    assert [r.json()["i"] for r in records if r.entry_type is EntryType.META] == list(range(30))
    assert again.append([meta_entry({"after": True})]) == [61]


def test_level_two_group_commit_with_many_threads(open_wal: WalFactory, meters: Meters) -> None:
    wal = open_wal(level=2, segment_size_kb=64)
    got: list[int] = []
    lock = threading.Lock()

    def producer(k: int) -> None:
        for i in range(50):
            versions = wal.append([data_entry(meters(1, start=k * 1000 + i))])
            assert wal.reader().read(versions[0], max_entries=1)[0].version == versions[0]
            with lock:
                got.extend(versions)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 201))
    records = wal.reader().read(1, max_entries=1000)
    starts = sorted(r.arrow().column("ts")[0].value for r in records)
    expected = sorted(1_538_548_685_000 + k * 1000 + i for k in range(4) for i in range(50))
    assert starts == expected


def test_second_writer_is_refused(open_wal: WalFactory, wal_dir: Path) -> None:
    open_wal()
    with pytest.raises(
        WalLockedError, match=f"WAL directory {wal_dir} is in use by another writer"
    ):
        Wal.open(wal_dir, background=False)


def test_closed_wal_refuses_appends(open_wal: WalFactory) -> None:
    wal = open_wal()
    wal.close()
    with pytest.raises(WalClosedError, match="is closed"):
        wal.append([meta_entry({})])
    wal.close()  # idempotent


def test_failed_write_is_cut_back(
    open_wal: WalFactory, wal_dir: Path, monkeypatch: pytest.MonkeyPatch, meters: Meters
) -> None:
    wal = open_wal()
    wal.append([data_entry(meters(5))])
    size = (wal_dir / "00000000000000000001.log").stat().st_size
    real_writev = os.writev

    def disk_full(fd: int, buffers: list[memoryview]) -> int:
        os.write(fd, bytes(buffers[0])[:20])  # a torn record reaches the file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", disk_full)
    with pytest.raises(OSError, match="No space left"):
        wal.append([data_entry(meters(5, start=5))])
    monkeypatch.setattr(os, "writev", real_writev)
    assert (wal_dir / "00000000000000000001.log").stat().st_size == size
    assert wal.append([data_entry(meters(5, start=10))]) == [2]
    assert [r.arrow().column("ts")[0].value for r in wal.reader().read(1)] == [
        1_538_548_685_000,
        1_538_548_685_010,
    ]


def test_wait_for_and_listeners(open_wal: WalFactory) -> None:
    wal = open_wal()
    reader = wal.reader()
    seen: list[int] = []
    stop = wal.notifier.add_listener(seen.append)
    assert not reader.wait_for(1, timeout=0.01)
    ready = threading.Event()

    def waiter() -> None:
        if reader.wait_for(1, timeout=30):
            ready.set()

    t = threading.Thread(target=waiter)
    t.start()
    wal.append([meta_entry({"n": 1})])
    t.join()
    assert ready.is_set()
    stop()
    wal.append([meta_entry({"n": 2})])
    assert seen == [2]


def test_failing_listener_does_not_fail_the_append(open_wal: WalFactory) -> None:
    wal = open_wal()

    def broken(_: int) -> None:
        raise RuntimeError("listener bug")

    wal.notifier.add_listener(broken)
    assert wal.append([meta_entry({})]) == [1]


def test_set_options_takes_effect(open_wal: WalFactory, wal_dir: Path, meters: Meters) -> None:
    wal = open_wal()
    wal.append([data_entry(meters(100))])
    wal.set_options(WalOptions(segment_size_kb=1))
    wal.append([data_entry(meters(100))])
    assert len(_log_files(wal_dir)) == 2


def test_bad_entries_are_refused_before_writing(open_wal: WalFactory) -> None:
    wal = open_wal()
    with pytest.raises(TypeError, match="entry_type"):
        wal.append([WalEntry(7, b"{}")])  # type: ignore[arg-type]
    assert wal.next_version == 1


def test_background_thread_syncs_and_closes(wal_dir: Path, meters: Meters) -> None:
    with Wal.open(wal_dir, WalOptions(level=1, fsync_period_ms=0)) as wal:
        wal.append([data_entry(meters(10))])
        assert wal.reader().read(1)[0].arrow().num_rows == 10
    with Wal.open(wal_dir, WalOptions(level=1)) as wal:
        assert wal.last_version == 1


def test_one_append_may_hold_thousands_of_entries(open_wal: WalFactory) -> None:
    # three buffers per entry: more than one writev() call's worth (IOV_MAX = 1024)
    wal = open_wal()
    versions = wal.append([meta_entry({"i": i}) for i in range(2500)])
    assert versions == list(range(1, 2501))
    records = wal.reader().read(1, max_entries=5000)
    assert [r.json()["i"] for r in records] == list(range(2500))
