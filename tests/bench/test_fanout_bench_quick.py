"""bench/fanout_bench.py runs end to end (`--quick --json`): a real server, a producer
process and client processes of asyncio consumers, 1 and 10 topics, idle consumers and
wide writes. No timing is asserted: only that every figure exists and is sane, and that
every consumer received exactly the rows of its devices."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~25 s on 2 cores (three processes start per phase); the rest covers
# a slow CI machine.
RUN_DEADLINE_S = 240.0
PHASES = (1, 10)
BINDINGS = (100,)  # the parameterized phase: bindings of one `tbname = ?` topic
WINDOW_FIGURES = ["cpu_us_per_row", "kept_rows_s", "latency_ms_p50", "latency_ms_p99",
                  "server_cpu_pct"]  # fmt: skip
FIGURES = [
    *(f"{name}_n{n}" for n in PHASES for name in WINDOW_FIGURES),
    *(f"{name}_params_{b}" for b in BINDINGS for name in ("cpu_us_per_row", "kept_rows_s")),
    *(
        f"{side}_write_{name}{how}"
        for side in ("wide", "narrow")
        for name in ("rows_s", "cpu_us_per_row")
        for how in ("", "_one_at_a_time")
    ),
]
GOALS = ["cpu_growth_goal_met", "kept_rows_goal_met", "latency_p99_goal_met",
         "idle_cpu_goal_met", "wide_write_goal_met", "params_cpu_goal_met",
         "all_goals_met"]  # fmt: skip


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("fanout_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    meta = report["meta"]
    assert meta["sizes"]["run"] == "quick"
    # every consumer received exactly the rows written to its devices, in every phase
    assert report["rows_exact"] is True
    assert report["phases_failed"] == []
    for n in PHASES:
        assert report[f"rows_exact_n{n}"] is True
        assert meta[f"latency_samples_n{n}"] > 0
        assert meta[f"consumers_closed_n{n}"] == n
        assert meta[f"consumer_errors_n{n}"] == {}
        # each topic keeps 1 % of the rows: n topics get about n % of them in all
        written, delivered = meta[f"rows_written_n{n}"], meta[f"rows_delivered_n{n}"]
        assert 0 < meta[f"rows_written_in_window_n{n}"] <= written
        assert 0 < delivered <= written * n // 10
        assert report[f"latency_ms_p50_n{n}"] <= report[f"latency_ms_p99_n{n}"]
        assert report[f"server_cpu_pct_n{n}"] <= 100 * meta["cpu_count"]
    for b in BINDINGS:  # each binding received exactly its device's rows
        assert report[f"rows_exact_params_{b}"] is True
        assert meta[f"consumer_errors_params_{b}"] == {}
    # idle: held polls cost nothing, so a window may measure no CPU at all
    idle = [f"idle_cpu_pct_{n}" for n in PHASES] + [f"idle_cpu_pct_params_{b}" for b in BINDINGS]
    assert all(0 <= report[key] <= 100 * meta["cpu_count"] for key in idle)
    # a producer never bursts beyond its pace to catch up
    assert report["kept_rows_s_n1"] <= meta["pace_rows_s"] * 1.05
    assert all(isinstance(report[key], bool) for key in GOALS)
    assert report["all_goals_met"] is False  # n1000 is not measured in a quick run
