"""bench/share_bench.py runs end to end (`--quick --json`): a real server, consumer
processes in shared and vgroup groups, Redis Streams, a SIGKILLed lease holder. No
timing is asserted: only that every figure exists and is sane, and that no row was lost
or delivered twice."""

from __future__ import annotations

from pathlib import Path

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~60 s on 2 cores (ten drains by consumer processes, three 1 s
# leases); the rest covers a slow CI machine.
RUN_DEADLINE_S = 400.0
RATES = [
    "shared_rows_s_c4", "shared_rows_s_c8", "vgroup_rows_s_c8", "shared_rows_s_nowork_c4",
    "shared_rows_s_c1", "vgroup_rows_s_c1", "redis_rows_s_nowork_c4", "redis_rows_s_c8",
    "shared_ack_overhead", "shared_c8_vs_vgroup_c8", "shared_nowork_vs_redis",
]  # fmt: skip


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("share_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, RATES)
    assert 0 <= report["redelivery_ms_p50"] <= report["redelivery_ms_p99"]
    assert (report["lost_rows"], report["acked_twice"]) == (0, 0)
    assert report["goals_met"]["exact"] is True
    assert set(report["goals_met"]) == {*report["goals"], "exact"}
