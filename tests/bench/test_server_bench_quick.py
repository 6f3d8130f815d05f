"""bench/server_bench.py runs end to end (`--quick --json`): a real server, Redis, every
figure reported. No timing is asserted: only that each figure exists and is positive."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bench.support import assert_positive, quick_report

# A quick run takes ~10 s on 2 cores; the rest covers a slow CI machine.
RUN_DEADLINE_S = 240.0
FIGURES = [
    *(f"ingest_{kind}_rows_s{wal}" for kind in ("arrow", "sql") for wal in ("", "_wal1")),
    *(f"redis_xadd_rows_s_batch{n}{wal}" for n in ("10k", "1k") for wal in ("", "_wal1")),
    *(f"{side}consume_rows_s{sel}" for side in ("", "redis_") for sel in ("", "_sel1", "_sel100")),
    *(f"consume_rows_delivered{sel}" for sel in ("", "_sel1", "_sel100")),
    *(f"{side}latency_ms_{p}" for side in ("", "redis_") for p in ("p50", "p99")),
    *(f"ratio_ingest_{kind}{wal}" for kind in ("arrow", "sql") for wal in ("", "_wal1")),
    *(f"ratio_consume{sel}" for sel in ("", "_sel1", "_sel100")),
    "ratio_latency_p50",
    "ratio_latency_p99",
    "ingest_arrow_rows_s_tls",
    "ratio_ingest_arrow_tls",
]


@pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server is not installed (apt-get install -y redis-server; make bench-server)",
)
def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    report = quick_report("server_bench.py", tmp_path, RUN_DEADLINE_S)
    assert_positive(report, FIGURES)
    assert report["consume_rows_delivered_sel100"] == report["meta"]["backlog_rows"]
    assert report["meta"]["sizes"]["run"] == "quick"
    assert report["meta"]["latency_samples"] == report["meta"]["sizes"]["latency_samples"]
