"""bench/pass_bench.py runs end to end (`--quick --json`): an engine, its shared passes,
follows and Consume streams in process. No timing is asserted: each figure exists (the
timings and counts positive, what a delivery adds as their arithmetic says), and every
subscriber got exactly its messages and rows."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes a few seconds on 2 cores; the rest covers a slow CI machine.
RUN_DEADLINE_S = 180.0
PHASES = ("n1", "n20", "params_1", "params_100")


def test_quick_run_reports_every_figure_and_exact_deliveries(tmp_path: Path) -> None:
    report = quick_report("pass_bench.py", tmp_path, RUN_DEADLINE_S)
    figures = [f"loop_ms_per_write_{phase}" for phase in PHASES]
    for phase in ("n20", "params_100"):  # one subscriber may get nothing in 20 writes
        figures += [f"deliveries_per_write_{phase}"]
    assert_positive(report, [*figures, "ratio_n20", "ratio_params_100"])
    # what a delivery adds is a difference of two timings: in a quick run it may come
    # out at or below 0 (noise over a microsecond or two); its arithmetic is checked
    for base, top in (("n1", "n20"), ("params_1", "params_100")):
        added_ms = report[f"loop_ms_per_write_{top}"] - report[f"loop_ms_per_write_{base}"]
        per = added_ms * 1e3 / report[f"deliveries_per_write_{top}"]
        assert report[f"us_per_delivery_{top}"] == round(per, 2)
    assert "us_per_delivery_n1" not in report  # the baselines' deliveries add nothing
    assert all(report[f"deliveries_exact_{phase}"] is True for phase in PHASES)
    assert report["deliveries_per_write_n1"] <= 4  # one topic: a message a vgroup at most
    assert report["meta"]["sizes"] == {
        "run": "quick", "topic_counts": [1, 20], "binding_counts": [1, 100], "writes": 20,
    }  # fmt: skip
