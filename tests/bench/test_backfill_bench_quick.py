"""bench/backfill_bench.py runs end to end (`--quick --json`): a real server, a consumer,
a Spark backfill, every figure reported. No timing is asserted: only that each figure
exists and is sane."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~20 s on 2 cores (Spark starts in ~5-10 s); the rest covers slow CI.
RUN_DEADLINE_S = 300.0
FIGURES = ["backfill_rows_s", "consume_rows_s", "backfill_seconds", "consume_seconds",
           "backfill_vs_consume", "matching_rows", "backfill_task_rows_s",
           "task_vs_consume", "stream_rows_s", "stream_vs_consume",
           "readtopic_rows_s", "stream_warm_rows_s"]  # fmt: skip


@pytest.mark.spark
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("backfill_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    history = report["meta"]["sizes"]["history_rows"]
    assert report["meta"]["sizes"]["run"] == "quick"
    assert 0 < report["matching_rows"] < history  # the topic keeps about half
    assert report["goal_ratio"] == 1.5
    assert isinstance(report["goal_met"], bool)
    assert report["task_goal_ratio"] == 0.5
    assert isinstance(report["task_goal_met"], bool)
    breakdown = report["meta"]["backfill_breakdown_s"]
    assert set(breakdown) == {"startup", "planning", "tasks", "commit"}
    assert all(seconds >= 0 for seconds in breakdown.values())
    assert report["meta"]["backfill_tasks"] >= 1
    assert report["stream_goal_ratio"] == 0.5
    assert report["meta"]["stream_batches"] >= 1
