"""What the benchmarks in bench/ share: progress on stderr, facts about the machine, the
command line (`--json`, `--quick`, `--dir`, `--seed`), the temporary directory, and the
output (one JSON object, or a table).

The scripts run as `python bench/NAME.py`, so bench/ is first on `sys.path` and they
import this module as `harness`; mypy finds it the same way (bench/ is on its path).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Report = dict[str, Any]
# The benchmark's Sizes: how much work each phase does.
S = TypeVar("S")

# bench/: where the git commands run, so that their relative paths name the repository's.
BENCH_DIR = Path(__file__).resolve().parent
# Parent of the temporary directories: inside bench/, so on the repository's disk.
TMP_PARENT = BENCH_DIR / ".tmp"


def logger(name: str) -> Callable[[str], None]:
    """A `log(message)` for the benchmark `name`."""

    def log(message: str) -> None:
        """Progress, on stderr so that `--json` keeps stdout to the one object."""
        print(f"[{name}] {message}", file=sys.stderr, flush=True)

    return log


@contextlib.contextmanager
def phase(log: Callable[[str], None], name: str, seconds: dict[str, float]) -> Iterator[None]:
    """Announce phase `name` with `log`, and time the block into `seconds[name]`."""
    log(f"{name}...")
    began = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = round(time.perf_counter() - began, 2)


def median_rate(rates: list[float]) -> int:
    """The median of per-round rates, as a whole number."""
    return round(statistics.median(rates))


def command(args: list[str], cwd: Path = BENCH_DIR) -> str:
    """A command's stdout, or "unknown" when it cannot run."""
    try:
        run = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return run.stdout.strip()


def machine_meta(
    root: Path,
    *,
    libraries: Report,
    status: Report,
    settings: Report,
    sizes: DataclassInstance,
    quick: bool,
) -> Report:
    """Platform, then `libraries` (name: version), the commit, `status` (how the code
    under test differs from it), the temporary directory `root` and its file system, then
    `settings` and `sizes`."""
    df = command(["df", "-T", str(root)], root).splitlines()[-1].split()  # device type .. mount
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        **libraries,
        "git_commit": command(["git", "rev-parse", "--short", "HEAD"]),
        **status,
        "tmp_dir": str(root),
        "tmp_filesystem": f"{df[1]} on {df[0]} at {df[-1]}" if len(df) > 2 else "unknown",
        **settings,
        "sizes": {"run": "quick" if quick else "full"} | dataclasses.asdict(sizes),
    }


def print_table(report: Report) -> None:
    """One aligned line per key; meta's keys prefixed, its nested objects as JSON."""
    meta = report["meta"]
    rows = [(k, v) for k, v in report.items() if k != "meta"]
    rows += [
        (f"meta.{k}", json.dumps(v) if isinstance(v, dict | list) else v) for k, v in meta.items()
    ]
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  " + (f"{value:,}" if type(value) in (int, float) else str(value)))


def emit(
    report: Report,
    as_json: bool,
    table: Callable[[Report], None] = print_table,
    indent: int | None = None,
) -> None:
    """`report` on stdout: one JSON object, or `table(report)`."""
    if as_json:
        print(json.dumps(report, indent=indent))
    else:
        table(report)


def arguments(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """A parser with `--json` and `--quick`, described by `doc`'s first line."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    return parser


def main(
    argv: list[str] | None,
    *,
    name: str,
    doc: str | None,
    run: Callable[[Path, S, int], Report],
    full: S,
    quick: S,
    quick_help: str,
    seed_help: str,
    max_rss: bool = False,
) -> int:
    """Parse `argv`, `run(root, sizes, seed)` in a new temporary directory `root` (then
    removed), add meta.total_seconds (and meta.max_rss_mib) and print the report."""
    parser = arguments(doc, quick_help)
    parser.add_argument("--dir", type=Path, default=TMP_PARENT, help="parent of the temp dir")
    parser.add_argument("--seed", type=int, default=1, help=seed_help)
    args = parser.parse_args(argv)
    parent: Path = args.dir
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{name.replace('_', '-')}-", dir=parent))
    began = time.perf_counter()
    try:
        report = run(root, quick if args.quick else full, args.seed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty: leave anything else alone
    report["meta"]["total_seconds"] = round(time.perf_counter() - began, 2)
    if max_rss:
        rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        report["meta"]["max_rss_mib"] = round(rss_kib / 1024)
    emit(report, args.json)
    return 0


# A producer process starts (imports) in a few seconds; one that has not ended this long
# after its consumer stopped waiting is killed.
PRODUCER_JOIN_S = 60.0


@contextlib.contextmanager
def producer(target: Callable[..., None], *args: object) -> Iterator[BaseProcess]:
    """`target(*args)` in a new process (own interpreter: no GIL shared with the
    consumer); fails if it exits with an error."""
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    try:
        yield proc
    finally:
        proc.join(timeout=PRODUCER_JOIN_S)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"the producer exited with status {proc.exitcode}")


Side = Callable[[int], float]  # round number -> rows/s


def alternate(sides: dict[str, Side], rounds: int) -> dict[str, list[float]]:
    """Each side's rate in every round (numbered from 1), in the given order in odd
    rounds and reversed in even ones."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(1, rounds + 1):
        for name in reversed(list(sides)) if r % 2 == 0 else list(sides):
            rates[name].append(sides[name](r))
    return rates
