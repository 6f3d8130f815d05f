"""bench/catalog_bench.py runs end to end (`--quick --json`): an engine in process, every
figure reported. No timing is asserted: only that each figure exists and is positive."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~2 s on 2 cores; the rest covers a slow CI machine.
RUN_DEADLINE_S = 120.0
FIGURES = [
    f"{figure}_n20"
    for figure in (
        "create_topic_ms", "first_pass_ms", "new_child_pass_ms", "steady_pass_ms",
        "ratio_first_pass", "ratio_new_child_pass",
    )
]  # fmt: skip


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("catalog_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    assert report["meta"]["sizes"] == {
        "run": "quick", "topics": [20], "steady_writes": 5, "new_children": 2,
    }  # fmt: skip
