"""Running a benchmark's quick mode from a test: its JSON report, checked for figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def quick_report(script: str, tmp_path: Path, deadline_s: float) -> dict[str, Any]:
    """`python bench/<script> --quick --json` run to the end; its report."""
    run = subprocess.run(
        [sys.executable, f"bench/{script}", "--quick", "--json", "--dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=deadline_s,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report: dict[str, Any] = json.loads(run.stdout)
    return report


def assert_positive(report: dict[str, Any], keys: list[str]) -> None:
    """Every key is in the report with a value above 0."""
    missing = [key for key in keys if key not in report]
    assert not missing, f"missing figures: {missing}"
    not_positive = {key: report[key] for key in keys if not report[key] > 0}
    assert not not_positive, f"figures not positive: {not_positive}"
