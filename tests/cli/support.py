"""Running the `sqltopic` command line as a real process, and reading what it prints."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from tests.live_server import ServerProcess

SCRIPT = Path(sys.executable).with_name("sqltopic")
# A command against a local server ends within seconds; this only stops a hung one.
RUN_DEADLINE_S = 120.0
# How long a test waits for one expected piece of output from a running command.
OUTPUT_DEADLINE_S = 60.0


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without the CLI's own variables (a developer's shell may set
    them), plus `extra`. Python's fault handler is on: a hung command aborted at its
    deadline prints every thread's stack (`run_cli`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLTOPIC_")}
    return env | {"PYTHONFAULTHANDLER": "1"} | extra


def run_cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command run to its end; one still running at RUN_DEADLINE_S is aborted and
    the test fails with what it printed, its threads' stacks included."""
    with subprocess.Popen(
        [str(SCRIPT), *args],
        stdin=subprocess.PIPE if stdin is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or clean_env(),
    ) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=RUN_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # the fault handler dumps the stacks
            try:
                out, err = proc.communicate(timeout=OUTPUT_DEADLINE_S)
            except subprocess.TimeoutExpired:  # stacks or not, the process ends
                proc.kill()
                out, err = proc.communicate()
            raise AssertionError(
                f"{args} still ran after {RUN_DEADLINE_S:g} s; it printed:\n{out[-4000:]}\n"
                f"and on stderr (the stacks at the abort):\n{err[-20000:]}"
            ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_on(server: ServerProcess, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`sqltopic COMMAND --server ADDRESS ARGS...`."""
    return run_cli(command, "--server", server.address, *args)


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The command as a running process with pipes for stdin, stdout and stderr."""
    return subprocess.Popen(
        [str(SCRIPT), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or clean_env(),
    )


class Lines:
    """The lines a stream gives, read on a thread, so a test waits with a deadline."""

    def __init__(self, stream: IO[str]) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, predicate: str) -> list[str]:
        """Lines up to and including the first that starts with `predicate`."""
        got: list[str] = []
        deadline = time.monotonic() + OUTPUT_DEADLINE_S
        while True:
            line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert line is not None, f"the stream ended before {predicate!r}: {got}"
            got.append(line)
            self.seen.append(line)
            if line.startswith(predicate):
                return got


def parse_table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The header and rows of an aligned table: header, rule, rows (cells stripped)."""
    assert set(lines[1]) <= {"-", "+"}, lines
    header = [cell.strip() for cell in lines[0].split(" | ")]
    rows = [[cell.strip() for cell in line.split(" | ")] for line in lines[2:]]
    return header, rows


def tables(stdout: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every table `sqltopic sql` printed (lines before each `Query OK ... in set`)."""
    found: list[tuple[list[str], list[list[str]]]] = []
    block: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("Query OK") and "in set" in line:
            found.append(parse_table(block))
        if line.startswith("Query OK"):
            block = []
        else:
            block.append(line)
    return found
