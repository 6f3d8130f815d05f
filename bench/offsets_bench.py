"""Benchmark of committed offsets (`server/vnode/offsets.py`): durable commits per second.

Threads commit one offset each, again and again, to one vnode's `OffsetStore` (what
auto-committing consumers of one vgroup do through `Commit`): 1, 16 and 64 committer
threads, each on its own (topic, group). Every commit returns only once durable, so the
rate is bounded by fsyncs; commits arriving together share one transaction (group
commit), reported as commits per transaction when the store counts its transactions.

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smoke run of a few seconds.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import harness
from harness import Report

from sqltopic.server.vnode.offsets import OffsetStore

# Committer threads per run: one consumer, the server's 16 Commit workers, more
# consumers than workers (the gRPC pool queues them, the store still sees 16 at most in
# the server; 64 shows the store's own ceiling).
THREAD_COUNTS = (1, 16, 64)


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    seconds: float  # wall time of one round
    rounds: int  # rounds per thread count; the rate reported is their median


FULL = Sizes(seconds=2.0, rounds=3)
QUICK = Sizes(seconds=0.5, rounds=1)

log = harness.logger("offsets_bench")


def commit_round(store: OffsetStore, threads: int, seconds: float) -> tuple[float, int]:
    """Commits per second of `threads` committers for `seconds`, and how many commits."""
    stop = threading.Event()
    counts = [0] * threads

    def committer(index: int) -> None:
        offset = 0
        while not stop.is_set():
            offset += 1
            store.commit([("topic", f"g{index}", offset)], now_us=offset)
            counts[index] += 1

    workers = [threading.Thread(target=committer, args=(i,)) for i in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    return sum(counts) / elapsed, sum(counts)


def run_threads(root: Path, threads: int, sizes: Sizes) -> Report:
    store = OffsetStore.open(root / f"threads{threads}")
    try:
        rates: list[float] = []
        commits = 0
        for _ in range(sizes.rounds):
            rate, count = commit_round(store, threads, sizes.seconds)
            rates.append(rate)
            commits += count
        transactions: int | None = getattr(store, "transactions", None)  # absent before
    finally:
        store.close()
    log(f"{threads} threads: {harness.median_rate(rates):,} commits/s")
    report: Report = {f"commits_s_{threads}": harness.median_rate(rates)}
    if transactions:
        report[f"commits_per_transaction_{threads}"] = round(commits / transactions, 1)
    return report


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    report: Report = {}
    for threads in THREAD_COUNTS:
        report |= run_threads(root, threads, sizes)
    meta = harness.machine_meta(
        root,
        libraries={"sqlite": sqlite3.sqlite_version},
        status={
            "offsets_git_status": harness.command(
                ["git", "status", "--porcelain", "../server/vnode/offsets.py"]
            )
            or "clean"
        },
        settings={"thread_counts": list(THREAD_COUNTS)},
        sizes=sizes,
        quick=sizes == QUICK,
    )
    return report | {"meta": meta}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="offsets_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="one 0.5 s round per thread count",
        seed_help="unused (no randomness)",
    )


if __name__ == "__main__":
    sys.exit(main())
