"""bench/cluster_bench.py runs end to end (`--quick --json`): a server, an mnode with one
and two dnodes, a dnode SIGKILLed and restarted. No timing is asserted: only that every
figure exists and is sane."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~40 s on 2 cores (five servers started one after another, a dnode
# killed and restarted); the rest covers a slow CI machine.
RUN_DEADLINE_S = 400.0
FIGURES = [
    "ddl_per_s_all_in_one", "ddl_per_s_cluster_1", "ddl_per_s_cluster_2",
    "ratio_ddl_cluster_1", "ratio_ddl_cluster_2", "dnode_offline_s", "dnode_restart_ready_s",
]  # fmt: skip


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("cluster_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    assert "not go through the dnodes yet" in report["not_measured"]
    assert report["meta"]["sizes"]["run"] == "quick"
