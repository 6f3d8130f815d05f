"""bench/backfill_bench.py runs end to end (`--quick --json`): a real server, a consumer,
a Spark backfill, every figure reported. No timing is asserted: only that each figure
exists and is sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A quick run takes ~20 s on 2 cores (Spark starts in ~5-10 s); the rest covers slow CI.
RUN_DEADLINE_S = 300.0
FIGURES = ["backfill_rows_s", "consume_rows_s", "backfill_seconds", "consume_seconds",
           "backfill_vs_consume", "matching_rows"]  # fmt: skip


@pytest.mark.spark
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "bench/backfill_bench.py", "--quick", "--json", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout)
    missing = [key for key in FIGURES if key not in report]
    assert not missing, f"missing figures: {missing}"
    not_positive = {key: report[key] for key in FIGURES if not report[key] > 0}
    assert not not_positive, f"figures not positive: {not_positive}"
    history = report["meta"]["sizes"]["history_rows"]
    assert report["meta"]["sizes"]["run"] == "quick"
    assert 0 < report["matching_rows"] < history  # the topic keeps about half
    assert report["goal_ratio"] == 1.5
    assert isinstance(report["goal_met"], bool)
