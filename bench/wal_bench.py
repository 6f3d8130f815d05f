"""Benchmark of the vnode write-ahead log (`sqltopic.wal`) against the raw disk.

What it measures, all in one temporary directory on the repository's file system:

* level-2 append throughput of ~1 MiB Arrow record batches (fsync before each append
  returns), single appender, against plain `os.write` + `os.fsync` of 1 MiB blocks in
  the same directory; rounds alternate and the medians are compared;
* level-1 appends of one-row entries (meters schema), one entry per `append()` call and
  1000 entries per call;
* level-2 group commit: 4 threads appending one-row entries, against 1 thread, with the
  number of fsyncs that served them;
* a scan of the whole 1 MiB-entry WAL with a fresh `open_readonly` reader (each body
  decoded as Arrow), against sequential `readinto` of the same `.log` files; the page
  cache is warmed by a raw read first, so both sides are measured warm;
* seek latency: `reader.read(v, max_entries=1)` at random versions.

Run `python bench/wal_bench.py` for a table, `--json` for one JSON object on stdout
(progress goes to stderr), `--quick` for a smaller run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa

from sqltopic.wal import Wal, WalEntry, WalOptions, WalReader, data_entry, open_readonly
from sqltopic.wal.options import DEFAULT_SEGMENT_SIZE_KB

MIB = 1 << 20

# The Arrow IPC body size of a "large" entry: a typical bulk-ingest batch, and the
# block size of the raw fsync baseline it is compared with.
BIG_ENTRY_BYTES = MIB
# Bytes per row of the large batch (int64 + float64 + timestamp[us]), to size it.
BIG_ROW_BYTES = 24
# Block size of the raw write and raw read baselines: one large entry's worth.
RAW_BLOCK_BYTES = MIB
# One-row entries per append() call in the batched small-entry run (the brief's 1000).
SMALL_BATCH_ENTRIES = 1000
# Fallback when one append() of SMALL_BATCH_ENTRIES fails: the WAL writes each entry as
# 3 iovecs (header, body, padding) in one writev, which Linux caps at IOV_MAX (1024).
FALLBACK_BATCH_ENTRIES = 1024 // 3
# Concurrent appenders in the group-commit run: more than the 2 cores, so fsyncs overlap.
GROUP_COMMIT_THREADS = 4
# Goal for both WAL/raw ratios: the WAL should keep at least half of the raw disk speed.
RATIO_GOAL = 0.5
# Where the temporary WAL directories go: inside bench/, so on the repository's disk.
TMP_PARENT = Path(__file__).resolve().parent / ".tmp"
# Reader batch bounds for the scan: the reader's own defaults (one consumer poll).
SCAN_MAX_ENTRIES = 4096
SCAN_MAX_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    big_total_bytes: int  # bytes of 1 MiB entries appended per round (and raw-fsynced)
    append_rounds: int  # alternating WAL/raw rounds; the medians are reported
    small_seconds: float  # wall time of each small-entry phase
    read_rounds: int  # alternating raw-read/WAL-scan rounds
    seeks: int  # random single-entry reads


# 256 MiB per round spans four default 64 MiB segments (rolls included) and takes about
# half a second of fsync on an SSD; 3 rounds x 2 sides + 4 x 2.5 s small phases + reads
# keep the whole run near 20 s on a 2-core machine.
FULL = Sizes(
    big_total_bytes=256 * MIB, append_rounds=3, small_seconds=2.5, read_rounds=15, seeks=20_000
)
# A smoke-test run of a few seconds: same phases, a sixteenth of the bytes.
QUICK = Sizes(
    big_total_bytes=64 * MIB, append_rounds=2, small_seconds=0.5, read_rounds=5, seeks=2_000
)


def log(message: str) -> None:
    """Progress, on stderr so that `--json` keeps stdout to the one object."""
    print(f"[wal_bench] {message}", file=sys.stderr, flush=True)


# --- data --------------------------------------------------------------------------------


def big_batch(target_bytes: int) -> pa.RecordBatch:
    """About `target_bytes` of int64, float64 and timestamp[us] columns."""
    rows = target_bytes // BIG_ROW_BYTES
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(rows), pa.int64()),
            "value": pa.array([i * 0.25 for i in range(rows)], pa.float64()),
            "ts": pa.array(
                range(1_700_000_000_000_000, 1_700_000_000_000_000 + rows), pa.timestamp("us")
            ),
        }
    )


def meters_row() -> pa.RecordBatch:
    """One row of the meters schema (TDengine's demo super table)."""
    schema = pa.schema(
        [
            ("ts", pa.timestamp("ms")),
            ("current", pa.float32()),
            ("voltage", pa.int32()),
            ("phase", pa.float32()),
        ]
    )
    return pa.RecordBatch.from_pydict(
        {"ts": [1_700_000_000_000], "current": [10.3], "voltage": [219], "phase": [0.31]},
        schema=schema,
    )


def body_bytes(entry: WalEntry) -> int:
    return memoryview(entry.body).nbytes


# --- timing helpers ----------------------------------------------------------------------


def mib_s(nbytes: int, seconds: float) -> float:
    return nbytes / MIB / seconds


@contextlib.contextmanager
def counting_fsyncs() -> Iterator[Callable[[], int]]:
    """Count `os.fsync` calls (the WAL's and ours) while the block runs."""
    real = os.fsync
    counter = itertools.count()  # next() on it is atomic under the GIL

    def counted(fd: Any) -> None:
        next(counter)
        real(fd)

    calls = 0

    def total() -> int:
        return calls

    os.fsync = counted
    try:
        yield total
    finally:
        os.fsync = real
        calls = next(counter)


@contextlib.contextmanager
def open_wal(directory: Path, options: WalOptions, *, background: bool) -> Iterator[Wal]:
    wal = Wal.open(directory, options, background=background)
    try:
        yield wal
    finally:
        wal.close()


# --- phase 1: large appends at level 2 against raw fsync ---------------------------------


def time_wal_appends(directory: Path, entry: WalEntry, count: int) -> float:
    """Seconds to append `entry` `count` times at level 2, one per call."""
    entries = [entry]
    options = WalOptions(level=2, segment_size_kb=DEFAULT_SEGMENT_SIZE_KB)
    with open_wal(directory, options, background=False) as wal:
        start = time.perf_counter()
        for _ in range(count):
            wal.append(entries)
        return time.perf_counter() - start


def time_raw_fsync(path: Path, block: bytes, count: int) -> float:
    """Seconds to write `block` `count` times to a new file, fsyncing after each."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            view = memoryview(block)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class AppendResult:
    wal_mib_s: list[float]
    raw_mib_s: list[float]
    wal_dir: Path  # the last round's WAL, kept for the read phases
    entries: int
    entry_bytes: int


def run_big_appends(root: Path, sizes: Sizes) -> AppendResult:
    entry = data_entry(big_batch(BIG_ENTRY_BYTES))
    nbytes = body_bytes(entry)
    count = sizes.big_total_bytes // nbytes
    block = os.urandom(RAW_BLOCK_BYTES)
    raw_count = sizes.big_total_bytes // RAW_BLOCK_BYTES
    wal_rates: list[float] = []
    raw_rates: list[float] = []
    wal_dir = root / "big-0"
    for n in range(sizes.append_rounds):
        raw_path = root / f"raw-{n}.bin"
        raw_rates.append(
            mib_s(raw_count * RAW_BLOCK_BYTES, time_raw_fsync(raw_path, block, raw_count))
        )
        raw_path.unlink()
        if n:
            shutil.rmtree(wal_dir)
        wal_dir = root / f"big-{n}"
        wal_rates.append(mib_s(count * nbytes, time_wal_appends(wal_dir, entry, count)))
        log(
            f"round {n}: WAL level 2 {wal_rates[-1]:.0f} MiB/s, raw fsync {raw_rates[-1]:.0f} MiB/s"
        )
    return AppendResult(wal_rates, raw_rates, wal_dir, count, nbytes)


# --- phase 2: small appends, level 1 and group commit at level 2 -------------------------


@dataclass(frozen=True, slots=True)
class SmallRun:
    entries: int
    seconds: float
    fsyncs: int

    @property
    def per_second(self) -> float:
        return self.entries / self.seconds


def _append_until(
    wal: Wal, entries: list[WalEntry], start: threading.Barrier, stop: threading.Event
) -> int:
    start.wait()
    appended = 0
    while not stop.is_set():
        wal.append(entries)
        appended += len(entries)
    return appended


def run_appenders(wal: Wal, entries: list[WalEntry], threads: int, seconds: float) -> SmallRun:
    """`threads` threads append `entries` per call for `seconds`; entries/s overall.

    A failing append ends the run at once and is raised here.
    """
    start = threading.Barrier(threads + 1, timeout=30)
    stop = threading.Event()
    with counting_fsyncs() as fsyncs, ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(_append_until, wal, entries, start, stop) for _ in range(threads)]
        start.wait()
        began = time.perf_counter()
        wait(futures, timeout=seconds, return_when=FIRST_EXCEPTION)
        stop.set()
        total = sum(f.result() for f in futures)
        elapsed = time.perf_counter() - began
    return SmallRun(total, elapsed, fsyncs())


def small_phase(
    directory: Path, options: WalOptions, per_call: int, threads: int, seconds: float
) -> SmallRun:
    entries = [data_entry(meters_row())] * per_call  # encoded once; version None reuses fine
    with open_wal(directory, options, background=True) as wal:
        return run_appenders(wal, entries, threads, seconds)


@dataclass(frozen=True, slots=True)
class Batched:
    """The batched level-1 run: at SMALL_BATCH_ENTRIES per call, or why not."""

    run: SmallRun
    per_call: int  # entries per append() actually used
    error: str | None  # why SMALL_BATCH_ENTRIES per call failed, when it did


@dataclass(frozen=True, slots=True)
class SmallResults:
    level1_single: SmallRun
    level1_batched: Batched
    level2_one_thread: SmallRun
    level2_threads: SmallRun
    batched_dir: Path  # kept for the seek phase
    entry_bytes: int


def run_batched(directory: Path, seconds: float) -> Batched:
    """Level 1, SMALL_BATCH_ENTRIES per call; if the WAL refuses that many, the most
    it takes (FALLBACK_BATCH_ENTRIES), with the error kept for the report."""
    level1 = WalOptions(level=1)
    try:
        run = small_phase(directory, level1, SMALL_BATCH_ENTRIES, 1, seconds)
    except OSError as exc:
        error = f"append() of {SMALL_BATCH_ENTRIES} entries failed: {exc!r}"
        log(error + f"; retrying with {FALLBACK_BATCH_ENTRIES} entries per call")
        shutil.rmtree(directory)
        run = small_phase(directory, level1, FALLBACK_BATCH_ENTRIES, 1, seconds)
        return Batched(run, FALLBACK_BATCH_ENTRIES, error)
    return Batched(run, SMALL_BATCH_ENTRIES, None)


def run_small_appends(root: Path, sizes: Sizes) -> SmallResults:
    level1, level2 = WalOptions(level=1), WalOptions(level=2)
    secs = sizes.small_seconds
    single = small_phase(root / "small-l1", level1, 1, 1, secs)
    shutil.rmtree(root / "small-l1")
    log(f"level 1, 1 entry/call: {single.per_second:,.0f} entries/s")
    batched = run_batched(root / "small-l1-batched", secs)
    log(f"level 1, {batched.per_call} entries/call: {batched.run.per_second:,.0f} entries/s")
    one = small_phase(root / "small-l2-1", level2, 1, 1, secs)
    shutil.rmtree(root / "small-l2-1")
    log(f"level 2, 1 thread: {one.per_second:,.0f} entries/s, {one.fsyncs} fsyncs")
    many = small_phase(root / "small-l2-n", level2, 1, GROUP_COMMIT_THREADS, secs)
    shutil.rmtree(root / "small-l2-n")
    log(
        f"level 2, {GROUP_COMMIT_THREADS} threads: {many.per_second:,.0f} entries/s, "
        f"{many.fsyncs} fsyncs"
    )
    entry_bytes = body_bytes(data_entry(meters_row()))
    return SmallResults(single, batched, one, many, root / "small-l1-batched", entry_bytes)


# --- phase 3: reading ----------------------------------------------------------------------


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def time_raw_read(paths: list[Path]) -> tuple[int, float]:
    """Bytes read and seconds for a sequential `readinto` of `paths` in 1 MiB blocks."""
    buf = bytearray(RAW_BLOCK_BYTES)
    view = memoryview(buf)
    total = 0
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return total, time.perf_counter() - start


@dataclass(frozen=True, slots=True)
class ScanResult:
    entries: int
    body_bytes: int
    rows: int
    open_seconds: float
    scan_seconds: float


def scan_all(reader: WalReader) -> tuple[int, int, int]:
    """Entries, body bytes and Arrow rows of every entry from the first version."""
    entries = nbytes = rows = 0
    for batch in reader.batches(
        reader.first_version, max_entries=SCAN_MAX_ENTRIES, max_bytes=SCAN_MAX_BYTES
    ):
        for record in batch:
            rows += record.arrow().num_rows
            nbytes += record.body.nbytes
        entries += len(batch)
    return entries, nbytes, rows


def time_scan(directory: Path) -> ScanResult:
    """Open a fresh read-only reader and scan the WAL; both steps timed apart."""
    start = time.perf_counter()
    reader = open_readonly(directory)
    opened = time.perf_counter()
    entries, nbytes, rows = scan_all(reader)
    done = time.perf_counter()
    return ScanResult(entries, nbytes, rows, opened - start, done - opened)


@dataclass(frozen=True, slots=True)
class ReadResults:
    wal_mib_s: list[float]
    raw_mib_s: list[float]
    open_ms: list[float]
    log_bytes: int
    body_bytes: int
    entries: int


def run_reads(directory: Path, sizes: Sizes) -> ReadResults:
    paths = log_files(directory)
    time_raw_read(paths)  # warm the page cache for both sides
    wal_rates: list[float] = []
    raw_rates: list[float] = []
    open_ms: list[float] = []
    log_bytes = 0
    scan = ScanResult(0, 0, 0, 0.0, 0.0)
    for n in range(sizes.read_rounds):
        log_bytes, raw_s = time_raw_read(paths)
        raw_rates.append(mib_s(log_bytes, raw_s))
        scan = time_scan(directory)
        wal_rates.append(mib_s(scan.body_bytes, scan.scan_seconds))
        open_ms.append(scan.open_seconds * 1000)
        log(f"read round {n}: WAL scan {wal_rates[-1]:.0f} MiB/s, raw {raw_rates[-1]:.0f} MiB/s")
    return ReadResults(wal_rates, raw_rates, open_ms, log_bytes, scan.body_bytes, scan.entries)


@dataclass(frozen=True, slots=True)
class SeekResults:
    p50_us: float
    p99_us: float
    mean_us: float
    versions: int
    open_ms: float


def run_seeks(directory: Path, count: int, rng: random.Random) -> SeekResults:
    start = time.perf_counter()
    reader = open_readonly(directory)
    open_ms = (time.perf_counter() - start) * 1000
    first, last = reader.first_version, reader.last_version
    targets = [rng.randint(first, last) for _ in range(count)]
    samples: list[float] = []
    clock = time.perf_counter_ns
    for version in targets:
        began = clock()
        record = reader.read(version, max_entries=1)[0]
        _ = record.body.nbytes
        samples.append((clock() - began) / 1000)
        if record.version != version:
            raise RuntimeError(f"seek to {version} returned {record.version}")
    cuts = statistics.quantiles(samples, n=100)
    return SeekResults(cuts[49], cuts[98], statistics.fmean(samples), last - first + 1, open_ms)


# --- machine facts -------------------------------------------------------------------------


def filesystem_of(path: Path) -> str:
    """`df -T` type and device of the file system holding `path`."""
    try:
        out = subprocess.run(
            ["df", "-T", str(path)], capture_output=True, text=True, check=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    fields = out.splitlines()[-1].split()
    return f"{fields[1]} on {fields[0]} mounted at {fields[-1]}"


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info(directory: Path) -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "crc32c_hardware": bool(crc32c.hardware_based),
        "tmp_dir": str(directory),
        "tmp_filesystem": filesystem_of(directory),
        "git_commit": git_commit(),
    }


# --- the report ----------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


def rounded(values: list[float], digits: int = 1) -> list[float]:
    return [round(v, digits) for v in values]


def build_report(
    big: AppendResult,
    small: SmallResults,
    reads: ReadResults,
    seeks: SeekResults,
    meta: dict[str, Any],
) -> dict[str, Any]:
    append, raw_fsync = median(big.wal_mib_s), median(big.raw_mib_s)
    read, raw_read = median(reads.wal_mib_s), median(reads.raw_mib_s)
    l2_one, l2_many = small.level2_one_thread, small.level2_threads
    batched = small.level1_batched
    batched_rate = round(batched.run.per_second)
    return {
        "append_mib_s_level2_1mib": round(append, 1),
        "raw_fsync_mib_s_1mib": round(raw_fsync, 1),
        "append_ratio_level2": round(append / raw_fsync, 3),
        "append_ratio_goal_met": append / raw_fsync >= RATIO_GOAL,
        "append_entries_s_level1_small": round(small.level1_single.per_second),
        "append_entries_s_level1_small_batched": None if batched.error else batched_rate,
        "append_entries_s_level1_small_batched_entries_per_call": batched.per_call,
        "append_entries_s_level1_small_batched_fallback": batched_rate if batched.error else None,
        "append_entries_s_level2_small_1thread": round(l2_one.per_second),
        "append_entries_s_level2_small_4threads": round(l2_many.per_second),
        "level2_small_entries_per_fsync_1thread": round(l2_one.entries / max(l2_one.fsyncs, 1), 2),
        "level2_small_entries_per_fsync_4threads": round(
            l2_many.entries / max(l2_many.fsyncs, 1), 2
        ),
        "read_mib_s": round(read, 1),
        "raw_read_mib_s": round(raw_read, 1),
        "read_ratio": round(read / raw_read, 3),
        "read_ratio_goal_met": read / raw_read >= RATIO_GOAL,
        "seek_us_p50": round(seeks.p50_us, 2),
        "seek_us_p99": round(seeks.p99_us, 2),
        "seek_us_mean": round(seeks.mean_us, 2),
        "open_readonly_ms_big_wal": round(median(reads.open_ms), 2),
        "open_readonly_ms_seek_wal": round(seeks.open_ms, 2),
        "ratio_goal": RATIO_GOAL,
        "meta": meta
        | {
            "append_rounds_mib_s": rounded(big.wal_mib_s),
            "raw_fsync_rounds_mib_s": rounded(big.raw_mib_s),
            "big_entry_body_bytes": big.entry_bytes,
            "big_entries_per_round": big.entries,
            "big_bytes_per_round": big.entries * big.entry_bytes,
            "segment_size_kb": DEFAULT_SEGMENT_SIZE_KB,
            "read_rounds_mib_s": rounded(reads.wal_mib_s),
            "raw_read_rounds_mib_s": rounded(reads.raw_mib_s),
            "read_entries": reads.entries,
            "read_body_bytes": reads.body_bytes,
            "read_log_bytes": reads.log_bytes,
            "read_note": (
                "page cache warmed by a raw read of the same .log files first; both sides "
                "warm. WAL side: fresh open_readonly per round (open timed apart), every "
                "body decoded with .arrow(); MiB/s of bodies. Raw side: readinto 1 MiB "
                "blocks; MiB/s of file bytes."
            ),
            "small_entry_body_bytes": small.entry_bytes,
            "small_phase_seconds": round(small.level1_single.seconds, 3),
            "small_fsyncs": {
                "level2_1thread": l2_one.fsyncs,
                "level2_4threads": l2_many.fsyncs,
                "level1_single": small.level1_single.fsyncs,
                "level1_batched": batched.run.fsyncs,
            },
            "seek_wal_versions": seeks.versions,
            "errors": [batched.error] if batched.error else [],
            "append_note": (
                "Arrow IPC bodies encoded once and reused; MiB/s of body bytes; level 2 "
                "(fsync before each append returns), one appender, default segment size "
                "(rolls included)."
            ),
        },
    }


def print_table(report: dict[str, Any]) -> None:
    rows = [(k, v) for k, v in report.items() if k != "meta"]
    rows += [(f"meta.{k}", v) for k, v in report["meta"].items() if k != "phase_seconds"]
    rows += [(f"meta.phase_seconds.{k}", v) for k, v in report["meta"]["phase_seconds"].items()]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        text = (
            f"{value:,}"
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else value
        )
        print(f"{key:<{width}}  {text}")


# --- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--quick", action="store_true", help="a smaller, few-second run")
    parser.add_argument(
        "--dir",
        type=Path,
        default=TMP_PARENT,
        help=f"parent of the temporary directory (default {TMP_PARENT})",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the random seek targets")
    return parser.parse_args(argv)


def run(root: Path, sizes: Sizes, seed: int) -> dict[str, Any]:
    phases: dict[str, float] = {}
    meta = machine_info(root) | {"sizes": "quick" if sizes == QUICK else "full"}

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        phases[name] = round(time.perf_counter() - began, 2)

    with phase("big_appends"):
        big = run_big_appends(root, sizes)
    with phase("small_appends"):
        small = run_small_appends(root, sizes)
    with phase("reads"):
        reads = run_reads(big.wal_dir, sizes)
    with phase("seeks"):
        seeks = run_seeks(small.batched_dir, sizes.seeks, random.Random(seed))
    meta["phase_seconds"] = phases
    return build_report(big, small, reads, seeks, meta)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    parent: Path = args.dir
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="wal-bench-", dir=parent))
    began = time.perf_counter()
    try:
        report = run(root, sizes, args.seed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty: leave anything else alone
    report["meta"]["phase_seconds"]["total"] = round(time.perf_counter() - began, 2)
    if args.json:
        print(json.dumps(report, sort_keys=False))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
