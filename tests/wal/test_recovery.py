"""Recovery at open: torn tails are cut, corruption is reported with file and offset."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from sqltopic.errors import WalCorruptionError
from sqltopic.wal import Wal, data_entry, meta_entry
from sqltopic.wal.record import HEADER_SIZE
from tests.support import append_meters

if TYPE_CHECKING:
    from tests.conftest import WalFactory

Meters = Callable[..., pa.RecordBatch]
CHILD = Path(__file__).with_name("wal_child.py")
FIRST_LOG = "00000000000000000001.log"


def crashed_writer(directory: Path, count: int, level: int = 1, group: int = 1) -> None:
    """`count` appends of `group` entries each in a child process that then dies
    without closing."""
    subprocess.run(
        [
            sys.executable,
            str(CHILD),
            str(directory),
            str(level),
            "exit",
            str(count),
            "256",
            str(group),
        ],
        check=True,
        timeout=120,
    )


def closed_small_segments(open_wal: WalFactory, meters: Meters, **options: Any) -> None:
    """Six entries of 20 meters rows in a WAL of 1 KiB segments (so over several
    segments) with `options`, then closed."""
    wal = open_wal(segment_size_kb=1, **options)
    append_meters(wal, meters, 6)
    wal.close()


def closed_cleanly(open_wal: WalFactory, meters: Meters) -> None:
    """Two entries of 10 meters rows in one append, then a clean close: metadata records
    the whole segment as synced."""
    wal = open_wal()
    wal.append([data_entry(meters(10)), data_entry(meters(10))])
    wal.close()


def record_offsets(wal_dir: Path) -> list[int]:
    """Byte offsets of the records of the first segment, from a read-only scan."""
    idx = (wal_dir / "00000000000000000001.idx").read_bytes()
    return [int.from_bytes(idx[i + 8 : i + 16], "little") for i in range(0, len(idx), 16)]


def flip_bits(path: Path, offset: int, mask: int) -> bytes:
    """XOR the byte at `offset` of the file `path` with `mask`; returns the new content."""
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))
    return bytes(data)


def test_torn_tail_is_cut_and_index_repaired(wal_dir: Path, open_wal: WalFactory) -> None:
    crashed_writer(wal_dir, 5)
    log = wal_dir / FIRST_LOG
    last = record_offsets(wal_dir)[-1]
    with log.open("r+b") as f:
        f.truncate(last + HEADER_SIZE + 3)  # the last record only partly reached the disk
    wal = open_wal()
    assert wal.tail_cut is not None
    assert (wal.tail_cut.offset, wal.tail_cut.bytes_removed) == (last, HEADER_SIZE + 3)
    assert log.stat().st_size == last
    assert (wal_dir / "00000000000000000001.idx").stat().st_size == 4 * 16
    assert [r.version for r in wal.reader().read(1)] == [1, 2, 3, 4]
    assert wal.append([meta_entry({"again": True})]) == [5]


def test_an_interrupted_append_is_cut_whole(wal_dir: Path, open_wal: WalFactory) -> None:
    crashed_writer(wal_dir, 2, group=3)  # versions 1..3, then 4..6, in two appends
    log = wal_dir / FIRST_LOG
    offsets = record_offsets(wal_dir)
    with log.open("r+b") as f:
        f.truncate(offsets[5])  # the crash came after two of the second append's entries
    wal = open_wal()
    assert [r.version for r in wal.reader().read(1)] == [1, 2, 3]
    assert wal.tail_cut is not None
    assert (wal.tail_cut.offset, wal.tail_cut.bytes_removed) == (
        offsets[3],
        offsets[5] - offsets[3],
    )
    assert log.stat().st_size == offsets[3]
    assert wal.append([meta_entry({"next": True})]) == [4]


def test_garbage_after_the_last_record_is_cut(wal_dir: Path, open_wal: WalFactory) -> None:
    crashed_writer(wal_dir, 3)
    log = wal_dir / FIRST_LOG
    size = log.stat().st_size
    with log.open("ab") as f:
        f.write(b"\0" * 4096)  # a file system that grew the file but lost the data
    wal = open_wal()
    assert wal.tail_cut is not None
    assert wal.tail_cut.bytes_removed == 4096
    assert log.stat().st_size == size
    assert wal.last_version == 3


def test_a_first_record_torn_leaves_no_segment(wal_dir: Path, open_wal: WalFactory) -> None:
    crashed_writer(wal_dir, 1)
    with (wal_dir / FIRST_LOG).open("r+b") as f:
        f.truncate(10)
    wal = open_wal()
    assert not (wal_dir / FIRST_LOG).exists()
    assert (wal.first_version, wal.next_version) == (1, 1)
    assert wal.append([meta_entry({})]) == [1]


def test_bad_record_followed_by_good_one_is_corruption(wal_dir: Path) -> None:
    crashed_writer(wal_dir, 5)
    log = wal_dir / FIRST_LOG
    offsets = record_offsets(wal_dir)
    damaged = flip_bits(log, offsets[2] + HEADER_SIZE + 5, 0xFF)  # a body byte of version 3
    with pytest.raises(WalCorruptionError) as err:
        Wal.open(wal_dir, background=False)
    assert err.value.path == str(log)
    assert err.value.offset == offsets[2]
    assert "followed by a good one" in str(err.value)
    assert log.read_bytes() == damaged  # nothing was cut


def test_a_synced_log_cut_short_is_corruption(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_cleanly(open_wal, meters)
    log = wal_dir / FIRST_LOG
    size = log.stat().st_size
    with log.open("r+b") as f:
        f.truncate(size - 8)  # looks torn, but these bytes were synced
    with pytest.raises(WalCorruptionError, match=f"shorter than the {size} known synced") as err:
        Wal.open(wal_dir, background=False)
    assert err.value.offset == size - 8


def test_damage_below_the_synced_size_is_corruption(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_cleanly(open_wal, meters)
    log = wal_dir / FIRST_LOG
    offsets = record_offsets(wal_dir)
    # the last record: it looks torn, but was synced
    damaged = flip_bits(log, offsets[1] + HEADER_SIZE + 2, 0x10)
    with pytest.raises(WalCorruptionError, match="below the last synced size") as err:
        Wal.open(wal_dir, background=False)
    assert (err.value.path, err.value.offset) == (str(log), offsets[1])
    assert log.read_bytes() == damaged


def test_a_listed_segment_that_is_gone_is_corruption(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_small_segments(open_wal, meters)
    second = sorted(wal_dir.glob("*.log"))[1]
    second.unlink()
    with pytest.raises(WalCorruptionError, match=r"is missing: it is listed in meta\.json"):
        Wal.open(wal_dir, background=False)


def test_an_orphan_index_does_not_block_appends(wal_dir: Path, open_wal: WalFactory) -> None:
    wal_dir.mkdir(parents=True)
    (wal_dir / "00000000000000000001.idx").write_bytes(b"\x01" * 16)  # an interrupted create
    wal = open_wal()
    assert wal.append([meta_entry({"n": 1})]) == [1]
    assert [r.version for r in wal.reader().read(1)] == [1]


def test_a_failed_first_write_leaves_no_misnamed_segment(
    wal_dir: Path, open_wal: WalFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = open_wal()

    def disk_full(fd: int, buffers: list[memoryview]) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "writev", disk_full)
    with pytest.raises(OSError, match="No space left"):
        wal.append([meta_entry({"n": 1})])
    monkeypatch.undo()
    assert wal.append([meta_entry({"n": 2}, version=10)]) == [10]
    wal.close()
    again = open_wal()
    assert [r.version for r in again.reader().read(1)] == [10]
    assert sorted(p.name for p in wal_dir.glob("*.log")) == ["00000000000000000010.log"]


def test_only_the_unsynced_tail_is_cut_after_a_crash(wal_dir: Path, open_wal: WalFactory) -> None:
    crashed_writer(wal_dir, 3)
    Wal.open(wal_dir, background=False).close()  # versions 1..3 now known synced
    crashed_writer(wal_dir, 3)  # 4..6 appended, then a crash
    log = wal_dir / FIRST_LOG
    last = record_offsets(wal_dir)[-1]
    with log.open("r+b") as f:
        f.truncate(last + 5)
    wal = open_wal()
    assert wal.tail_cut is not None
    assert wal.tail_cut.offset == last
    assert [r.version for r in wal.reader().read(1)] == [1, 2, 3, 4, 5]


def test_sealed_segment_damage_is_reported_on_read(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_small_segments(open_wal, meters)
    log = wal_dir / FIRST_LOG
    flip_bits(log, HEADER_SIZE + 100, 0x01)
    wal = open_wal(segment_size_kb=1)  # sealed segments are checked cheaply at open...
    with pytest.raises(WalCorruptionError) as err:
        wal.reader().read(1)  # ...and fully on read: never returned as data
    assert (err.value.path, err.value.offset) == (str(log), 0)
    assert [r.version for r in wal.reader().read(2, max_entries=2)] == [2, 3]


def test_truncated_sealed_segment_fails_the_open(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_small_segments(open_wal, meters)
    log = wal_dir / FIRST_LOG
    with log.open("r+b") as f:
        f.truncate(log.stat().st_size - 1)
    with pytest.raises(WalCorruptionError, match="sealed WAL segment is"):
        Wal.open(wal_dir, background=False)


def test_lost_or_damaged_index_is_rebuilt(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_small_segments(open_wal, meters)
    idx_files = sorted(wal_dir.glob("*.idx"))
    idx_files[0].unlink()
    idx_files[1].write_bytes(b"\x07" * 32)
    wal = open_wal(segment_size_kb=1)
    assert [r.version for r in wal.reader().read(1)] == [1, 2, 3, 4, 5, 6]


def test_unreadable_metadata_is_corruption(wal_dir: Path, open_wal: WalFactory) -> None:
    wal = open_wal()
    wal.append([meta_entry({})])
    wal.close()
    (wal_dir / "meta.json").write_text("{not json")
    with pytest.raises(WalCorruptionError, match="WAL metadata is unreadable"):
        Wal.open(wal_dir, background=False)


def test_deletion_interrupted_after_metadata_is_finished_at_open(
    wal_dir: Path, open_wal: WalFactory, meters: Meters
) -> None:
    closed_small_segments(open_wal, meters, retention_period_s=0)
    doomed = sorted(wal_dir.glob("*.log"))[0]
    kept = doomed.read_bytes()
    wal = open_wal(segment_size_kb=1, retention_period_s=0)
    assert wal.maintain()  # deletes every sealed segment
    wal.close()
    doomed.write_bytes(kept)  # as if the crash came between metadata and unlink
    wal = open_wal(segment_size_kb=1, retention_period_s=0)
    assert not doomed.exists()
    assert wal.first_version > 1


def test_leftover_temporary_metadata_is_ignored(wal_dir: Path, open_wal: WalFactory) -> None:
    wal = open_wal()
    wal.append([meta_entry({"n": 1})])
    wal.close()
    (wal_dir / "meta.json.tmp").write_text("{half")
    assert open_wal().last_version == 1
