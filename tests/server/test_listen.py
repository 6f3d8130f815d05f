"""A server refuses a port another server listens on (gRPC would share it by default,
SO_REUSEPORT, and split the clients between the two): a one-line error, exit 1, and the
first server keeps serving."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqltopic.client import connect
from tests.live_server import ServerProcess


def test_a_second_server_on_a_port_in_use_does_not_start(
    server: ServerProcess, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    second = subprocess.run(
        [sys.executable, "-m", "sqltopic.server", "--data", str(other),
         "--port", str(server.port)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert second.returncode == 1
    assert (
        f"sqltopic: cannot listen on 127.0.0.1:{server.port}: the port is in use" in second.stderr
    )
    assert "Traceback" not in second.stderr
    with connect(server.address) as conn:  # the first one serves on
        assert conn.execute("SELECT 1").rows == [(1,)]
