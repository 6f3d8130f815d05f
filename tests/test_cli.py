"""End-to-end: the `sqltopic` command line, run as a real process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sqltopic.server.engine import Engine

SCRIPT = Path(sys.executable).with_name("sqltopic")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], check=False, capture_output=True, text=True, timeout=120
    )


def _delivered(stdout: str) -> int:
    match = re.search(r"topic demo_overvoltage delivered ([\d,]+) rows", stdout)
    assert match, stdout
    return int(match.group(1).replace(",", ""))


def test_demo_produces_and_consumes(tmp_path: Path) -> None:
    done = _run("demo", "--data", str(tmp_path), "--statements", "4", "--rows", "50")
    assert done.returncode == 0, done.stderr
    assert "inserted 200 rows in 4 statements at WAL_LEVEL 2" in done.stdout
    assert "SELECT count(*) FROM power.meters: 200 rows retained" in done.stdout
    first = _delivered(done.stdout)
    with Engine(tmp_path, background=False) as engine:
        over = engine.execute("SELECT count(*) FROM power.meters WHERE voltage > 225").rows
    assert first == over[0][0]
    again = _run("demo", "--data", str(tmp_path), "--statements", "2", "--rows", "10")
    assert again.returncode == 0, again.stderr
    assert "SELECT count(*) FROM power.meters: 220 rows retained" in again.stdout


def test_demo_reports_a_locked_directory_in_one_line(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False):
        done = _run("demo", "--data", str(tmp_path), "--statements", "1")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"sqltopic: data directory {tmp_path} is in use by another")


def test_bad_arguments_exit_non_zero(tmp_path: Path) -> None:
    done = _run("demo", "--data", str(tmp_path), "--statements", "many")
    assert done.returncode == 2
    assert "invalid int value: 'many'" in done.stderr
