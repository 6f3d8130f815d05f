"""bench/cluster_bench.py runs end to end (`--quick --json`): a server, an mnode with one
and two dnodes for DDL; the server and an mnode with one, two and three dnodes for
ingest, consume and latency; a dnode SIGKILLed and restarted under a polling consumer.
No timing is asserted: only that every figure exists and is sane, and that `goals`
says met or not for each goal (whether they are met is the benchmark's report, not a
test's)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~60 s on 2 cores (fifteen servers started, ten of them running at
# once, a dnode killed and restarted); the rest covers a slow CI machine.
RUN_DEADLINE_S = 600.0
SIDES = ["all_in_one", "cluster_1", "cluster_2", "cluster_3"]
CLUSTERS = SIDES[1:]
FIGURES = [
    "ddl_per_s_all_in_one", "ddl_per_s_cluster_1", "ddl_per_s_cluster_2",
    "ratio_ddl_cluster_1", "ratio_ddl_cluster_2",
    *(f"{kind}_rows_s_{side}" for kind in ("ingest", "ingest_pipelined") for side in SIDES),
    *(f"ratio_{kind}_{side}" for kind in ("ingest", "ingest_pipelined") for side in CLUSTERS),
    *(f"consume_rows_s_{side}" for side in SIDES),
    *(f"ratio_consume_{side}" for side in CLUSTERS),
    *(f"latency_ms_p{p}_{side}" for side in SIDES for p in (50, 99)),
    "dnode_kill_to_error_s", "dnode_offline_s", "dnode_restart_ready_s",
    "dnode_restart_to_delivery_s",
]  # fmt: skip
GOALS = ["ingest_cluster_1", "consume_cluster_1", "latency_p50_cluster_1", "restart_to_delivery"]


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("cluster_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    for side in SIDES:  # p99 is no less than p50
        assert report[f"latency_ms_p99_{side}"] >= report[f"latency_ms_p50_{side}"]
    goals = report["goals"]
    assert sorted(goals) == sorted([*GOALS, "all_met"])
    for name in GOALS:
        assert isinstance(goals[name]["met"], bool), name
        assert goals[name]["value"] == report[goals[name]["figure"]], name
    assert goals["all_met"] == all(goals[name]["met"] for name in GOALS)
    assert "not_measured" not in report
    meta = report["meta"]
    assert meta["sizes"]["run"] == "quick"
    assert meta["backlog_rows"] == meta["sizes"]["backlog_rows"]
