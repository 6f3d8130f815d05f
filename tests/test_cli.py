"""End-to-end: the `sqltopic` command line, run as a real process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sqltopic.wal import Wal, open_readonly

SCRIPT = Path(sys.executable).with_name("sqltopic")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=120
    )


def test_demo_wal_appends_and_follows(tmp_path: Path) -> None:
    done = _run("demo-wal", "--data", str(tmp_path), "--batches", "3", "--rows", "100")
    assert done.returncode == 0, done.stderr
    reads = re.findall(r"read version (\d+): (\d+) rows", done.stdout)
    assert reads == [("1", "100"), ("2", "100"), ("3", "100")]
    assert "appended 300 rows in 3 entries at WAL_LEVEL 2" in done.stdout
    again = _run(
        "demo-wal", "--data", str(tmp_path), "--batches", "2", "--rows", "10", "--level", "1"
    )
    assert again.returncode == 0, again.stderr
    assert "versions 1..3 retained" in again.stdout
    assert re.findall(r"read version (\d+)", again.stdout) == ["4", "5"]
    wal = open_readonly(tmp_path / "demo" / "vnode1" / "wal")
    assert [r.arrow().num_rows for r in wal.read(1)] == [100, 100, 100, 10, 10]


def test_demo_wal_reports_a_locked_directory_in_one_line(tmp_path: Path) -> None:
    wal_dir = tmp_path / "demo" / "vnode1" / "wal"
    with Wal.open(wal_dir, background=False):
        done = _run("demo-wal", "--data", str(tmp_path), "--batches", "1")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"sqltopic: WAL directory {wal_dir} is in use by another writer")


def test_bad_arguments_exit_non_zero(tmp_path: Path) -> None:
    done = _run("demo-wal", "--data", str(tmp_path), "--level", "3")
    assert done.returncode == 2
    assert "invalid choice: 3" in done.stderr
