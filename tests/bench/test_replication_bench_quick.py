"""bench/replication_bench.py runs end to end (`--quick --json`): two follower processes,
every kind of write measured. No timing is asserted: only that every figure exists and is
positive, and that the followers' WALs hold exactly the entries the leader wrote."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~3 s on 2 cores (two follower processes, 80 writes of each kind);
# the rest covers a slow CI machine.
RUN_DEADLINE_S = 120.0
KINDS = ("local", "rtt", "remote", "quorum", "all3")
FIGURES = [
    *(f"{kind}_us_{p}" for kind in KINDS for p in ("p50", "p99")),
    *(f"{kind}_writes_s" for kind in KINDS),
    "quorum_rows_s",
    *(
        f"{kind}_vs_local_{r}"
        for kind in ("remote", "quorum", "all3")
        for r in ("p50", "p99", "writes_s")
    ),
]
# Unmeasured writes of each replicated kind before the rounds (WARMUP_WRITES there).
WARMUP_WRITES = 20


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("replication_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    for kind in KINDS:
        assert report[f"{kind}_us_p50"] <= report[f"{kind}_us_p99"]
    meta = report["meta"]
    sizes = meta["sizes"]
    assert sizes["run"] == "quick"
    assert all(len(p50s) == sizes["rounds"] for p50s in meta["round_p50s_us"].values())
    # every write of both replicated kinds, warm-up included, is on all three replicas,
    # at the same versions and with the same record bytes
    written = 2 * (WARMUP_WRITES + sizes["rounds"] * sizes["writes"])
    assert meta["replicated_writes"] == written
    assert meta["leader_entries"] == written
    assert meta["follower_entries"] == [written, written]
    assert meta["follower_last_versions"] == [written, written]
    assert report["followers_identical"] is True
    # a follower refuses an entry from an older epoch (fencing of a deposed leader)
    assert meta["stale_epoch_refused"] is True
