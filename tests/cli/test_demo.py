"""End-to-end: `sqltopic demo` starts its own server, produces, consumes, stops."""

from __future__ import annotations

import re
from pathlib import Path

from sqltopic.client import connect
from tests.cli.support import run_cli
from tests.live_server import ServerProcess

SELECTED = re.compile(r"WHERE voltage > 225: ([\d,]+) rows \(equal to the rows delivered\)")


def _number(pattern: str, text: str) -> int:
    match = re.search(pattern, text)
    assert match, text
    return int(match.group(1).replace(",", ""))


def test_demo_delivers_what_select_counts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run_cli("demo", "--data", str(data), "--rows", "60")
    assert done.returncode == 0, done.stderr
    assert "produced 60 rows in 20 writes" in done.stdout
    delivered = _number(r"topic demo_overvoltage delivered ([\d,]+) rows", done.stdout)
    assert delivered == _number(SELECTED.pattern, done.stdout)
    assert done.stdout.count(" over 225 V, e.g. d100") >= 1
    assert done.stdout.splitlines()[-4] == "server stopped"
    # the demo's server is gone (the directory is free) and kept every row
    server = ServerProcess(data)
    try:
        server.wait_ready()
        with connect(server.address) as conn:
            over = conn.execute("SELECT count(*) FROM power.meters WHERE voltage > 225").rows
            assert over == [(delivered,)]
            assert conn.execute("SELECT count(*) FROM power.meters").rows == [(60,)]
    finally:
        assert server.stop() == 0


def test_demo_reports_a_locked_directory_in_one_line(server: ServerProcess) -> None:
    done = run_cli("demo", "--data", str(server.data), "--rows", "10")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        f"sqltopic: the server did not start: data directory {server.data} is in use by another"
    )


def test_bad_arguments_exit_2() -> None:
    done = run_cli("demo", "--rows", "many")
    assert done.returncode == 2
    assert "argument --rows: invalid positive_int value: 'many'" in done.stderr
    none = run_cli("demo", "--rows", "0")
    assert none.returncode == 2
    assert "argument --rows: must be at least 1, got 0" in none.stderr
