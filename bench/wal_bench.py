"""Benchmark of the vnode write-ahead log (`sqltopic.wal`) against the raw disk.

1. level-2 appends of ~1 MiB Arrow batches, one appender, against `os.write` +
   `os.fsync` of 1 MiB blocks of the same bytes;
2. one-row entries: level 1 at 1 and at 1000 entries per `append()`, level 2 with 1 and
   with 4 appending threads (group commit);
3. a scan of the phase-1 WAL, bodies decoded as Arrow, by a fresh `open_readonly` reader
   per round (and by one reused reader), against `readinto` of the same files, both warm;
4. seek latency: `reader.read(v, max_entries=1)` at random versions.

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smoke run of a few seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import pyarrow as pa
import xxhash
from harness import Report

from sqltopic.wal import Wal, WalEntry, WalOptions, WalReader, data_entry, open_readonly
from sqltopic.wal.options import DEFAULT_SEGMENT_SIZE_KB, WalLevel

MIB = 1 << 20
# Body size of a large entry (a typical bulk-ingest batch), and the block size of both
# raw baselines, so that WAL and raw move the same unit of data per call.
BIG_ENTRY_BYTES = MIB
# Bytes per row of the large batch (int64 + float64 + timestamp[us]), to size it.
BIG_ROW_BYTES = 24
# One-row entries per append() call in the batched level-1 run.
SMALL_BATCH_ENTRIES = 1000
# Appenders in the group-commit run: more than the machine's 2 cores, so fsyncs overlap.
GROUP_COMMIT_THREADS = 4
# The small-entry runs: report key suffix, WAL level, entries per append(), threads.
SMALL_RUNS: list[tuple[str, WalLevel, int, int]] = [
    ("level1_small", 1, 1, 1),
    ("level1_small_batched", 1, SMALL_BATCH_ENTRIES, 1),
    ("level2_small_1thread", 2, 1, 1),
    ("level2_small_4threads", 2, 1, GROUP_COMMIT_THREADS),
]
# The seeks read the batched run's WAL: the most entries, spread over several segments.
SEEK_RUN = "level1_small_batched"
# Goal for both WAL/raw ratios: the WAL should keep at least half of the raw disk speed.
RATIO_GOAL = 0.5


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    big_bytes: int  # body bytes of 1 MiB entries appended (and raw-fsynced) per round
    append_rounds: int  # alternating WAL/raw append rounds
    small_seconds: float  # wall time of each small-entry run
    read_rounds: int  # alternating WAL/raw read rounds, and reused-reader scans
    seeks: int  # random single-entry reads


# 256 MiB spans four default 64 MiB segments (rolls included) and takes 0.2-0.5 s to
# fsync on an SSD; with 4 x 2.5 s small runs the whole benchmark takes about 20 s.
FULL = Sizes(big_bytes=256 * MIB, append_rounds=5, small_seconds=2.5, read_rounds=15, seeks=20_000)
# A smoke run: a quarter of the bytes, fewer rounds, 0.5 s small runs.
QUICK = Sizes(big_bytes=64 * MIB, append_rounds=3, small_seconds=0.5, read_rounds=5, seeks=2_000)

NOTES = {
    "method": "WAL and raw rounds alternate, order swapped every round; figures are medians.",
    "append_note": (
        "MiB/s of Arrow IPC body bytes (encoded once); level 2, one appender, a new WAL per "
        "round, default segment size (rolls included), close not timed. Raw: os.write + "
        "os.fsync of the body's first 1 MiB per block, after one unmeasured warm-up round."
    ),
    "small_note": "One-row meters entries; level 1 syncs in the background; os.fsync counted.",
    "read_note": (
        "Page cache warmed by a raw read first. WAL: a fresh open_readonly per round (open "
        "timed apart), default batch bounds, .arrow() on every body; MiB/s of bodies. Raw: "
        "readinto in 1 MiB blocks; MiB/s of file bytes. Reused reader: its maps faulted in."
    ),
    "seek_note": "reader.read(v, max_entries=1) at uniform random versions, one reader.",
}


log = harness.logger("wal_bench")


def mib_s(nbytes: int, seconds: float) -> float:
    return nbytes / MIB / seconds


def body_bytes(entry: WalEntry) -> int:
    return memoryview(entry.body).nbytes


def big_batch(target_bytes: int) -> pa.RecordBatch:
    """About `target_bytes` of int64, float64 and timestamp[us] columns."""
    ids = pa.array(range(target_bytes // BIG_ROW_BYTES), pa.int64())
    columns = [ids, ids.cast(pa.float64()), ids.cast(pa.timestamp("us"))]
    return pa.record_batch(columns, names=["id", "value", "ts"])


def meters_row() -> pa.RecordBatch:
    """One row of the meters schema (TDengine's demo super table)."""
    columns = {
        "ts": pa.array([1_700_000_000_000], pa.timestamp("ms")),
        "current": pa.array([10.3], pa.float32()),
        "voltage": pa.array([219], pa.int32()),
        "phase": pa.array([0.31], pa.float32()),
    }
    return pa.RecordBatch.from_pydict(columns)


def compare(
    keys: tuple[str, str, str], rounds: int, wal: Callable[[], float], raw: Callable[[], float]
) -> tuple[Report, Report]:
    """Run `rounds` rounds of each side (MiB/s), WAL first in even rounds and raw first in
    odd ones; report the medians as `keys` (WAL, raw, ratio), every round in meta."""
    wal_key, raw_key, ratio_key = keys
    rates: dict[str, list[float]] = {wal_key: [], raw_key: []}
    sides = [(wal_key, wal), (raw_key, raw)]
    for n in range(rounds):
        for key, side in reversed(sides) if n % 2 else sides:
            rates[key].append(side())
        log(f"round {n}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()))
    wal_mib_s, raw_mib_s = statistics.median(rates[wal_key]), statistics.median(rates[raw_key])
    report = {
        wal_key: round(wal_mib_s, 1),
        raw_key: round(raw_mib_s, 1),
        ratio_key: round(wal_mib_s / raw_mib_s, 3),
        f"{ratio_key}_goal_met": wal_mib_s / raw_mib_s >= RATIO_GOAL,
    }
    return report, {f"{k}_rounds": [round(x, 1) for x in v] for k, v in rates.items()}


def wal_append_rate(directory: Path, entry: WalEntry, count: int) -> float:
    """MiB/s of `count` level-2 appends of `entry`, one per call, into a new WAL."""
    shutil.rmtree(directory, ignore_errors=True)
    with Wal.open(directory, WalOptions(level=2), background=False) as wal:
        start = time.perf_counter()
        for _ in range(count):
            wal.append([entry])
        seconds = time.perf_counter() - start
    return mib_s(count * body_bytes(entry), seconds)


def raw_fsync_rate(path: Path, block: bytes, count: int) -> float:
    """MiB/s of writing `block` `count` times to a new file, fsyncing after each."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            view = memoryview(block)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        return mib_s(count * len(block), time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def run_big_appends(wal_dir: Path, sizes: Sizes) -> tuple[Report, Report]:
    """Leaves the last round's WAL in `wal_dir` for the read phase."""
    entry = data_entry(big_batch(BIG_ENTRY_BYTES))
    count = sizes.big_bytes // body_bytes(entry)
    block = bytes(memoryview(entry.body)[:BIG_ENTRY_BYTES])  # the WAL's bytes, if compressed
    blocks = count * body_bytes(entry) // len(block)  # the same bytes on both sides
    raw_path = wal_dir.parent / "raw.bin"
    # Unmeasured: the first writes of a run are often slow (seen: 660 vs 1800 MiB/s on
    # a VM disk), which is the disk, not the WAL.
    raw_fsync_rate(raw_path, block, blocks)
    keys, meta = compare(
        ("append_mib_s_level2_1mib", "raw_fsync_mib_s_1mib", "append_ratio_level2"),
        sizes.append_rounds,
        lambda: wal_append_rate(wal_dir, entry, count),
        lambda: raw_fsync_rate(raw_path, block, blocks),
    )
    return keys, meta | {"big_entry_body_bytes": body_bytes(entry), "big_entries": count}


@contextlib.contextmanager
def counting_fsyncs() -> Iterator[list[int]]:
    """Count `os.fsync` calls (the WAL's and any other) in the block by wrapping it; the
    yielded list holds the count once the block has ended."""
    real, counter, result = os.fsync, itertools.count(), [0]  # next(counter) is atomic

    def counted(fd: Any) -> None:
        next(counter)
        real(fd)

    os.fsync = counted
    try:
        yield result
    finally:
        os.fsync = real
        result[0] = next(counter)


def small_run(
    directory: Path, level: WalLevel, per_call: int, threads: int, seconds: float
) -> tuple[int, float, int]:
    """Entries/s, entries per fsync and fsyncs of `threads` threads appending `per_call`
    entries per call to a new WAL for about `seconds`. An append error ends the run."""
    entries = [data_entry(meters_row())] * per_call  # encoded once; version None reuses fine
    stop = threading.Event()

    def appender() -> int:
        appended = 0
        while not stop.is_set():
            wal.append(entries)
            appended += len(entries)
        return appended

    with (
        Wal.open(directory, WalOptions(level=level)) as wal,
        counting_fsyncs() as fsyncs,
        ThreadPoolExecutor(threads) as pool,
    ):
        began = time.perf_counter()
        futures = [pool.submit(appender) for _ in range(threads)]
        wait(futures, timeout=seconds, return_when=FIRST_EXCEPTION)
        stop.set()
        total = sum(f.result() for f in futures)
        elapsed = time.perf_counter() - began
    rate = round(total / elapsed)
    log(f"level {level}, {per_call}/call, {threads} thread(s): {rate:,} entries/s")
    return rate, round(total / max(fsyncs[0], 1), 2), fsyncs[0]


def run_small_appends(root: Path, sizes: Sizes) -> tuple[Report, Report]:
    """Leaves the batched level-1 WAL in `root / SEEK_RUN` for the seek phase."""
    keys: Report = {}
    fsyncs: Report = {}
    for name, level, per_call, threads in SMALL_RUNS:
        run = small_run(root / name, level, per_call, threads, sizes.small_seconds)
        keys[f"append_entries_s_{name}"], keys[f"entries_per_fsync_{name}"], fsyncs[name] = run
        if name != SEEK_RUN:
            shutil.rmtree(root / name)
    entry_bytes = body_bytes(data_entry(meters_row()))
    return keys, {"small_entry_body_bytes": entry_bytes, "small_fsyncs": fsyncs}


def raw_read(paths: list[Path]) -> tuple[int, float]:
    """Bytes read and seconds for a sequential `readinto` of `paths` in 1 MiB blocks."""
    view = memoryview(bytearray(BIG_ENTRY_BYTES))
    total = 0
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return total, time.perf_counter() - start


def scan_all(reader: WalReader) -> tuple[int, int]:
    """Entries and body bytes from the first version on, each body decoded as Arrow."""
    entries = nbytes = 0
    for batch in reader.batches(reader.first_version):
        for record in batch:
            record.arrow()  # as a consumer would: zero-copy, but the IPC messages are parsed
            nbytes += record.body.nbytes
        entries += len(batch)
    return entries, nbytes


def scan_rate(reader: WalReader) -> float:
    start = time.perf_counter()
    _, nbytes = scan_all(reader)
    return mib_s(nbytes, time.perf_counter() - start)


def timed_open(wal_dir: Path, open_ms: list[float]) -> WalReader:
    """`open_readonly(wal_dir)`, its milliseconds appended to `open_ms`."""
    start = time.perf_counter()
    reader = open_readonly(wal_dir)
    open_ms.append((time.perf_counter() - start) * 1000)
    return reader


def run_reads(wal_dir: Path, sizes: Sizes) -> tuple[Report, Report]:
    paths = sorted(wal_dir.glob("*.log"))
    log_bytes, _ = raw_read(paths)  # warms the page cache for both sides
    open_ms: list[float] = []
    keys, meta = compare(
        ("read_mib_s", "raw_read_mib_s", "read_ratio"),
        sizes.read_rounds,
        lambda: scan_rate(timed_open(wal_dir, open_ms)),
        lambda: mib_s(*raw_read(paths)),
    )
    reused = open_readonly(wal_dir)
    entries, nbytes = scan_all(reused)  # unmeasured: maps its files, faults its pages in
    reused_rates = [scan_rate(reused) for _ in range(sizes.read_rounds)]
    reused_mib_s = statistics.median(reused_rates)
    raw_mib_s = statistics.median(meta["raw_read_mib_s_rounds"])
    keys |= {
        "read_mib_s_reused_reader": round(reused_mib_s, 1),
        "read_ratio_reused_reader": round(reused_mib_s / raw_mib_s, 3),
        "open_readonly_ms_big_wal": round(statistics.median(open_ms), 2),
    }
    return keys, meta | {
        "read_mib_s_reused_reader_rounds": [round(x, 1) for x in reused_rates],
        "read_entries": entries,
        "read_body_bytes": nbytes,
        "read_log_bytes": log_bytes,
    }


def run_seeks(wal_dir: Path, count: int, rng: random.Random) -> tuple[Report, Report]:
    open_ms: list[float] = []
    reader = timed_open(wal_dir, open_ms)
    first, last = reader.first_version, reader.last_version
    samples: list[float] = []
    for version in [rng.randint(first, last) for _ in range(count)]:
        began = time.perf_counter_ns()
        record = reader.read(version, max_entries=1)[0]
        samples.append((time.perf_counter_ns() - began) / 1000)
        if record.version != version:
            raise RuntimeError(f"seek to {version} returned {record.version}")
    cuts = statistics.quantiles(samples, n=100)
    log(f"seeks: p50 {cuts[49]:.1f} us, p99 {cuts[98]:.1f} us")
    keys = {
        "seek_us_p50": round(cuts[49], 2),
        "seek_us_p99": round(cuts[98], 2),
        "seek_us_mean": round(statistics.fmean(samples), 2),
        "open_readonly_ms_seek_wal": round(open_ms[0], 2),
    }
    return keys, {"seek_wal_versions": last - first + 1}


def machine_meta(root: Path, sizes: Sizes) -> Report:
    return harness.machine_meta(
        root,
        libraries={
            "pyarrow": pa.__version__,
            "xxhash": f"{xxhash.VERSION} (libxxhash {xxhash.XXHASH_VERSION})",
        },
        status={
            "wal_git_status": harness.command(["git", "status", "--porcelain", "../wal"]) or "clean"
        },
        settings={
            "segment_size_kb": DEFAULT_SEGMENT_SIZE_KB,
            "small_batch_entries_per_call": SMALL_BATCH_ENTRIES,
        },
        sizes=sizes,
        quick=sizes == QUICK,
    )


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    results = [  # in this order: the reads use phase 1's WAL, the seeks phase 2's
        run_big_appends(root / "big", sizes),
        run_small_appends(root, sizes),
        run_reads(root / "big", sizes),
        run_seeks(root / SEEK_RUN, sizes.seeks, random.Random(seed)),
    ]
    report: Report = {}
    meta = machine_meta(root, sizes) | NOTES
    for keys, more in results:
        report |= keys
        meta |= more
    return report | {"ratio_goal": RATIO_GOAL, "meta": meta}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="wal_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="a smaller, few-second run",
        seed_help="seed of the random seek targets",
    )


if __name__ == "__main__":
    sys.exit(main())
