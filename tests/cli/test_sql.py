"""End-to-end: `sqltopic sql` (-e, -f, piped stdin, the interactive shell on a
terminal) against a real server process."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

from sqltopic.cli.repl import CONTINUATION, PROMPT
from sqltopic.client import Connection, connect
from tests.cli.support import (
    OUTPUT_DEADLINE_S,
    RUN_DEADLINE_S,
    SCRIPT,
    Lines,
    clean_env,
    run_cli,
    run_on,
    start_cli,
    tables,
)
from tests.live_server import ServerProcess, free_port

SETUP = """CREATE DATABASE power VGROUPS 2; USE power;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);
INSERT INTO d1001 USING meters TAGS ('California.SanFrancisco', 2)
    VALUES (1538548685000, 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, NULL, 0.33);
SELECT ts, current, voltage, location FROM meters ORDER BY ts"""


def test_execute_runs_each_statement_and_prints_its_result(server: ServerProcess) -> None:
    done = run_on(server, "sql", "-e", SETUP)
    assert done.returncode == 0, done.stderr
    footers = [line for line in done.stdout.splitlines() if line.startswith("Query OK")]
    assert [re.sub(r" \(.*\)$", "", f) for f in footers] == [
        "Query OK, 0 row(s) affected",
        "Query OK, 0 row(s) affected",
        "Query OK, 0 row(s) affected",
        "Query OK, 2 row(s) affected",
        "Query OK, 2 row(s) in set",
    ]
    [(header, rows)] = tables(done.stdout)
    assert header == ["ts", "current", "voltage", "location"]
    assert rows == [
        ["2018-10-03 06:38:05.000", "10.3", "219", "California.SanFrancisco"],
        ["2018-10-03 14:38:15.000", "12.6", "NULL", "California.SanFrancisco"],
    ]
    with connect(server.address) as conn:
        assert conn.execute("SELECT count(*) FROM power.meters").rows == [(2,)]


def test_formats_jsonl_and_csv(conn: Connection, server: ServerProcess) -> None:
    conn.execute(SETUP)
    query = ("--database", "power", "-e", "SELECT ts, current, voltage, location FROM meters")
    jsonl = run_on(server, "sql", "--format", "jsonl", *query)
    assert jsonl.returncode == 0, jsonl.stderr
    records = sorted((json.loads(line) for line in jsonl.stdout.splitlines()), key=str)
    assert records == [
        {"ts": "2018-10-03T06:38:05.000Z", "current": 10.3, "voltage": 219,
         "location": "California.SanFrancisco"},
        {"ts": "2018-10-03T14:38:15.000Z", "current": 12.6, "voltage": None,
         "location": "California.SanFrancisco"},
    ]  # fmt: skip
    done = run_on(server, "sql", "--format", "csv", *query)
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(done.stdout)))
    assert rows[0] == ["ts", "current", "voltage", "location"]
    assert sorted(rows[1:]) == [
        ["2018-10-03T06:38:05.000Z", "10.3", "219", "California.SanFrancisco"],
        ["2018-10-03T14:38:15.000Z", "12.6", "", "California.SanFrancisco"],
    ]


def test_file_stops_at_the_first_error(live_power: Connection, server: ServerProcess,
                                       tmp_path: Path) -> None:  # fmt: skip
    script = tmp_path / "load.sql"
    script.write_text(
        "CREATE TABLE t (ts TIMESTAMP, v INT);\n"
        "INSERT INTO t VALUES (1000, 1); -- a comment; with a semicolon\n"
        "INSERT INTO t VALUES (2000, 'a;b');\n"
        "INSERT INTO t VALUES (3000, 3);\n"
    )
    done = run_on(server, "sql", "--database", "power", "-f", str(script))
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"sqltopic: {script}, line 3, column 29: value 'a;b' for column v")
    assert done.stdout.count("Query OK") == 2  # CREATE and the first INSERT
    assert live_power.execute("SELECT ts, v FROM t").rows[0][1] == 1
    assert live_power.execute("SELECT count(*) FROM t").rows == [(1,)]


def test_piped_statements_run_as_they_arrive(server: ServerProcess) -> None:
    proc = start_cli("sql", "--server", server.address)
    assert proc.stdin is not None
    assert proc.stdout is not None
    out = Lines(proc.stdout)
    proc.stdin.write("CREATE DATABASE piped;\n")
    proc.stdin.flush()
    assert out.until("Query OK")[-1].startswith("Query OK, 0 row(s) affected")
    proc.stdin.write("SELECT\n  1 + 1\n  AS two; SELECT 'a;b'\n  AS s;\n")
    proc.stdin.flush()
    assert out.until("Query OK")[:3] == ["two", "---", "  2"]
    assert out.until("Query OK")[:3] == ["s", "---", "a;b"]
    proc.stdin.write("USE piped;\nCREATE TABLE t (ts TIMESTAMP, v INT);\nquit\n")
    proc.stdin.write("CREATE TABLE never (ts TIMESTAMP, v INT);\n")
    proc.stdin.close()
    assert proc.wait(timeout=RUN_DEADLINE_S) == 0
    with connect(server.address, database="piped") as conn:
        assert [row[0] for row in conn.execute("SHOW TABLES").rows] == ["t"]


def test_piped_input_stops_at_an_error(server: ServerProcess) -> None:
    stdin = "SELECT 1 AS one;\nSELECT * FROM\n  nowhere.t;\nCREATE DATABASE never;\nSELECT 2"
    done = run_cli("sql", "--server", server.address, stdin=stdin)
    assert done.returncode == 1
    assert done.stderr.startswith("sqltopic: stdin, line 2, column ")
    assert done.stderr.count("\n") == 1
    assert done.stdout.count("Query OK") == 1
    with connect(server.address) as conn:
        assert conn.execute("SHOW DATABASES").rows == []


def test_shell_on_a_terminal_goes_on_after_errors_and_keeps_history(
    server: ServerProcess, tmp_path: Path
) -> None:
    history = tmp_path / "history"
    shell = Terminal(
        [str(SCRIPT), "sql", "--server", server.address],
        clean_env(SQLTOPIC_HISTORY=str(history), TERM="dumb"),
    )
    try:
        shell.expect(PROMPT)
        shell.send("CREATE DATABASE shell;")
        assert "Query OK, 0 row(s) affected" in shell.expect(PROMPT)
        shell.send("SELECT")
        shell.expect(CONTINUATION)
        shell.send("  40 + 2 AS answer;")
        assert "42\r\nQuery OK, 1 row(s) in set" in shell.expect(PROMPT)
        shell.send("SELECT * FROM shell.nope;")
        assert "sqltopic: table shell.nope does not exist" in shell.expect(PROMPT)
        shell.send("SELECT 'still here' AS s;")
        assert "still here\r\nQuery OK, 1 row(s) in set" in shell.expect(PROMPT)
        shell.send("quit")
        assert shell.wait() == 0
    finally:
        shell.close()
    assert history.read_text().splitlines()[-4:] == [
        "CREATE DATABASE shell;",
        "SELECT 40 + 2 AS answer;",
        "SELECT * FROM shell.nope;",
        "SELECT 'still here' AS s;",
    ]


class Terminal:
    """A process on a pseudo-terminal: what a person at a shell would see and type."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, child = pty.openpty()
        self.proc = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, env=env)
        os.close(child)
        self.buffer = ""

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def expect(self, text: str) -> str:
        """Output up to and including `text` (which is consumed)."""
        deadline = time.monotonic() + OUTPUT_DEADLINE_S
        while text not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} in {self.buffer!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.buffer += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"no {text!r} in {self.buffer!r}") from None
        end = self.buffer.index(text) + len(text)
        seen, self.buffer = self.buffer[:end], self.buffer[end:]
        return seen

    def wait(self) -> int:
        return self.proc.wait(timeout=RUN_DEADLINE_S)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def test_errors_are_one_line_with_exit_code_1(server: ServerProcess, tmp_path: Path) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    unreachable = run_cli("sql", "--server", nowhere, "-e", "SELECT 1")
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith(f"sqltopic: cannot reach the server at {nowhere}: ")
    wrong = run_cli("sql", "-e", "SELECT 1", env=clean_env(
        SQLTOPIC_SERVER=server.address, SQLTOPIC_PASSWORD="wrong"))  # fmt: skip
    assert (wrong.returncode, wrong.stderr) == (1, "sqltopic: wrong user or password\n")
    missing = run_on(server, "sql", "-f", str(tmp_path / "none.sql"))
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"sqltopic: cannot read SQL file {tmp_path / 'none.sql'}: ")
    by_env = run_cli("sql", "-e", "SELECT 7 AS n", env=clean_env(SQLTOPIC_SERVER=server.address))
    assert by_env.returncode == 0, by_env.stderr
    assert tables(by_env.stdout) == [(["n"], [["7"]])]
    for done in (unreachable, wrong, missing):
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stdout == ""


def test_a_reader_that_stops_early_ends_the_run_quietly(server: ServerProcess) -> None:
    digits = "unnest([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])"  # queries may not call range()
    rows = (
        f"SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS range "
        f"FROM {digits} a(d), {digits} b(d), {digits} c(d), {digits} e(d), {digits} f(d), "
        "unnest([0, 1]) g(d)"
    )
    proc = start_cli("sql", "--server", server.address, "-e", rows)
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline() == "range\n"
    proc.stdout.close()  # as `| head -1` does
    assert proc.wait(timeout=RUN_DEADLINE_S) == 0
    assert proc.stderr.read() == ""
