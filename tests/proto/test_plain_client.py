"""The .proto alone is enough: stubs generated fresh from it (not our committed ones)
drive a real server through SQL, a write and a whole consume cycle, in a process that
never imports sqltopic."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from tests.live_server import ServerProcess
from tests.proto.test_generated import PROTO_DIR

CLIENT = Path(__file__).with_name("plain_client.py")
# Generating stubs and a whole consume cycle on a slow CI machine.
RUN_TIMEOUT_S = 120


def test_a_client_built_from_the_proto_alone_consumes(
    server: ServerProcess, tmp_path: Path
) -> None:
    package = tmp_path / "plainproto"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(PROTO_DIR / "sqltopic.proto", package / "sqltopic.proto")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", str(package / "sqltopic.proto")],
        check=True, capture_output=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    # -S skips .pth files, which would put the sqltopic checkout on the path; the
    # installed packages (grpcio, protobuf, pyarrow) come through PYTHONPATH instead
    paths = [str(tmp_path), *site.getsitepackages()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    run = subprocess.run(
        [sys.executable, "-S", str(CLIENT), server.address],
        capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["modules"] == []
    assert out["written"] == 20
    expected = [[f"1970-01-01T00:00:00.{i:03d}000", 210 + i, "SF" if i < 10 else "LA"]
                for i in range(11, 20)]  # fmt: skip
    assert out["rows"] == expected
    assert all(end == stored for end, stored in out["commits"].values())
    assert out["heartbeat_status"] == "CONSUMER_STATUS_READY"
    assert out["after_close"] == ["ABORTED", "ConsumerFenced"]
