"""A `sqltopic server` child process, for commands that bring their own server (`demo`),
and the benchmarks' servers (an mnode or a dnode of a cluster too).

The child is `python -m sqltopic.cli server` (or `mnode`, `dnode`); it is ready when it
prints its ready line ("sqltopic server listening on HOST:PORT, data DIR", the same line
tests wait for). Its
log (stderr) goes to a temporary file, so a chatty server never blocks on a full pipe;
when it fails to start, its last error line becomes the error.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from sqltopic.errors import Error

Role = Literal["server", "mnode", "dnode"]
# Starting Python, DuckDB and grpc takes a few seconds on a slow machine.
START_DEADLINE_S = 60.0
# A graceful stop waits for in-flight calls (the server's own grace is 10 s), then
# closes the engine; past this the child is killed.
STOP_DEADLINE_S = 30.0


class ServerChild:
    """Start with `start()` (returns the address), stop with `stop()` or a `with`."""

    def __init__(
        self, data: Path, port: int, root_password: str, extra: Sequence[str] = (),
        role: Role = "server", env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.data = data
        self.port = port
        self.root_password = root_password  # not a dnode's option
        self.extra = tuple(extra)  # more options (the benchmark's TLS, a dnode's --mnode)
        self.role = role
        self.env = env  # None: this process's environment
        self.address = ""
        # closed by stop(), which every path through start() and __exit__ reaches
        self._log = tempfile.TemporaryFile(mode="w+", prefix="sqltopic-server-")  # noqa: SIM115
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def start(self) -> str:
        """Start the server and wait for its ready line; its address."""
        args = [sys.executable, "-m", "sqltopic.cli", self.role, "--data", str(self.data)]
        args += ["--port", str(self.port), *self.extra]
        if self.role != "dnode":
            args += ["--root-password", self.root_password]
        # A session of its own: Ctrl-C at the terminal reaches only the parent, which closes
        # its clients first and then stops the server (SIGTERM) in order.
        self._proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=self.env,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        self.address = self._wait_ready()
        return self.address

    def _pump(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _wait_ready(self) -> str:
        while True:
            try:
                line = self._lines.get(timeout=START_DEADLINE_S)
            except queue.Empty:
                self.stop()
                raise Error(f"the server did not start within {START_DEADLINE_S:.0f} s") from None
            if line is None:
                assert self._proc is not None
                self._proc.wait(timeout=STOP_DEADLINE_S)  # its log is complete then
                why = self._last_error()
                self.stop()
                raise Error(f"the server did not start: {why}")
            ready = f"sqltopic {self.role} listening on "
            if line.startswith(ready):
                return line.removeprefix(ready).split(",")[0].strip()

    def _last_error(self) -> str:
        self._log.seek(0)
        lines = [line.strip() for line in self._log if line.strip()]
        errors = [line for line in lines if line.startswith("sqltopic: ")]
        if errors:
            return errors[-1].removeprefix("sqltopic: ")
        return lines[-1] if lines else "it exited without a message"

    def kill(self) -> None:
        """SIGKILL, as a crash would end it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL past the deadline; the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._log.close()
        return proc.returncode

    def __enter__(self) -> ServerChild:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
