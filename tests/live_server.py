"""A real `sqltopic server` process on a free port in a temp directory, and the
fixtures built on it (`server`, `conn`, `power`). Integration and end-to-end tests of
every layer share these, so they all start the server the same way."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from sqltopic.client import Connection, connect
from sqltopic.errors import ServerUnavailable

# Starting Python, DuckDB and grpc takes a few seconds on a slow CI machine.
START_DEADLINE_S = 60.0
# A graceful stop waits up to the server's shutdown grace, then closes the engine.
STOP_DEADLINE_S = 60.0
POWER = """
CREATE DATABASE power VGROUPS 2;
USE power;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);
"""


# How long a client made right after a restart may keep failing: gRPC's reconnect
# backoff of the connection a process's earlier channels share (up to ~2 minutes).
RECONNECT_DEADLINE_S = 120.0
# Pause between two tries of such a client.
RECONNECT_PAUSE_S = 0.1
T = TypeVar("T")


def once_answering(make: Callable[[], T]) -> T:
    """`make()` (a connection or consumer of a server just restarted), tried again while
    it fails with ServerUnavailable: gRPC shares the connection to an address between
    a process's channels, and one that an earlier client drove into reconnect backoff
    may wait a while before it tries the restarted server."""
    deadline = time.monotonic() + RECONNECT_DEADLINE_S
    while True:
        try:
            return make()
        except ServerUnavailable:
            assert time.monotonic() < deadline, "the restarted server never answered"
            time.sleep(RECONNECT_PAUSE_S)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """`python -m sqltopic.server` on `data`; `wait_ready()` waits for its ready line and
    sets `port` and `address` from it. Without `port` the server binds port 0, so the
    kernel picks the port as it binds: a port picked beforehand (free_port) could be taken
    by a test on another xdist worker before the server binds it. `port` reuses a port (a
    restart on the same address); `extra` adds CLI arguments."""

    def __init__(
        self, data: Path, port: int | None = None, extra: tuple[str, ...] = (),
        role: str = "server", env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.data = data
        self.port = port or 0  # the bound port once wait_ready() returns
        self.address = ""
        self.ready = f"sqltopic {role} listening on"
        # `server` as `python -m sqltopic.server`; `mnode`, `dnode` as CLI commands
        module = ["sqltopic.server"] if role == "server" else ["sqltopic.cli", role]
        args = [sys.executable, "-m", *module, "--data", str(data)]
        args += ["--port", str(self.port), *extra]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ) if env is None else env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.before_ready: list[str] = []  # stdout lines before the ready line
        self._errors: list[str] = []
        self._errors_done = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        # stderr is read as it comes: a server that logs much would otherwise fill the
        # pipe and block in its logging call
        threading.Thread(target=self._pump_errors, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._errors.append(line)
        self._errors_done.set()

    def wait_ready(self) -> str:
        """The ready line ("... listening on HOST:PORT, data DIR"); sets `port` and
        `address` (loopback, whatever host it listens on) from it. Fails if the process
        exits or the deadline passes first."""
        while True:
            line = self._lines.get(timeout=START_DEADLINE_S)
            if line is None:
                raise AssertionError(f"server exited: {self.stderr()}")
            if not line.startswith(self.ready):
                self.before_ready.append(line)  # e.g. the metrics endpoint's line
            if line.startswith(self.ready):
                bound = line[len(self.ready) :].split(",", 1)[0].strip()
                self.port = int(bound.rsplit(":", 1)[1])
                self.address = f"127.0.0.1:{self.port}"
                return line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=STOP_DEADLINE_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_DEADLINE_S)

    def stderr(self) -> str:
        """What the server wrote to stderr so far (all of it, once it has exited)."""
        if self.proc.poll() is not None:
            self._errors_done.wait(timeout=STOP_DEADLINE_S)
        return "".join(self._errors)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def server(data: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(data)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def conn(server: ServerProcess) -> Iterator[Connection]:
    with connect(server.address) as connection:
        yield connection


@pytest.fixture
def live_power(conn: Connection) -> Connection:
    """`conn` with database `power` (VGROUPS 2, in use) and super table `meters`."""
    conn.execute(POWER)
    return conn
