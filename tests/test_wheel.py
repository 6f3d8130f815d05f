"""The core install, as a user gets it: a wheel built from this tree, installed with no
extra into a fresh venv (the dependencies at `.ci/constraints.txt`'s versions, from the
package index), runs a consumer against a server of the full install, loads no extra,
and its `sqltopic server` names the extra to install."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live_server import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
# Building the wheel and installing pyarrow and grpcio into a venv: pip's cache makes it
# quick, a cold cache downloads ~60 MB.
INSTALL_DEADLINE_S = 600
# What the build needs of the tree: the package, not the tests, benchmarks or the venv.
NOT_BUILT = (".venv", ".git", "tests", "bench", "docs", "build", "*.egg-info", ".*_cache")

CONSUMER = """
import sys, time
import pyarrow as pa
import sqltopic
from sqltopic import aio, taos  # the public modules import without an extra
address = sys.argv[1]
with sqltopic.connect(address) as conn:
    conn.execute(
        "CREATE DATABASE w VGROUPS 2; CREATE STABLE w.m (ts TIMESTAMP, v INT) TAGS (k INT); "
        "CREATE TOPIC wt AS SELECT ts, v FROM w.m WHERE v > 1"
    )
    conn.write("w.m", pa.table({
        "tbname": ["a", "b", "a"], "ts": pa.array([1, 2, 3], pa.timestamp("ms")),
        "v": [1, 2, 3], "k": [1, 2, 1],
    }))
got = []
config = {"server": address, "group.id": "wheel", "auto.offset.reset": "earliest"}
with sqltopic.Consumer(config) as consumer:
    consumer.subscribe(["wt"])
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None:
            got += [row[1] for row in message.rows()]
loaded = {m.split(".")[0] for m in sys.modules} & {"duckdb", "sqlglot", "pyspark"}
print(sorted(got), sorted(loaded))
"""


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the wheel installed, no extra: its bin directory."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*NOT_BUILT), symlinks=True)
    wheels = root / "dist"
    _run(sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps",
         "--no-build-isolation", "--quiet", "-w", str(wheels))  # fmt: skip
    (wheel,) = wheels.glob("sqltopic-*.whl")
    _run(sys.executable, "-m", "venv", str(root / "venv"))
    bin_dir = root / "venv" / "bin"
    _run(str(bin_dir / "python"), "-m", "pip", "install", "--quiet",
         "-c", str(ROOT / ".ci" / "constraints.txt"), str(wheel))  # fmt: skip
    return bin_dir


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=INSTALL_DEADLINE_S, check=False, cwd="/"
    )
    assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    return done


def test_the_core_wheel_has_only_the_client_dependencies(core_venv: Path) -> None:
    listed = _run(str(core_venv / "python"), "-m", "pip", "list", "--format=freeze").stdout
    names = {line.split("==")[0].lower() for line in listed.split()}
    assert {"sqltopic", "grpcio", "protobuf", "pyarrow", "xxhash"} <= names
    assert not names & {"duckdb", "sqlglot", "pyspark", "grpcio-tools", "prometheus-client"}


def test_the_core_wheel_consumes_from_a_full_server(core_venv: Path, tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data")
    try:
        server.wait_ready()
        done = _run(str(core_venv / "python"), "-c", CONSUMER, server.address)
    finally:
        server.kill()
    assert done.stdout.strip() == "[2, 3] []"


def test_the_core_wheels_server_command_names_its_extra(core_venv: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [str(core_venv / "sqltopic"), "server", "--data", str(tmp_path / "data"), "--port", "0"],
        capture_output=True, text=True, timeout=INSTALL_DEADLINE_S, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "sqltopic: sqltopic server needs sqltopic's server extra (module duckdb is not "
        "installed): pip install 'sqltopic[server]'"
    )
    assert not (tmp_path / "data").exists()
