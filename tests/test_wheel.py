"""The package as a user gets it: `python -m build` makes an sdist and a wheel of exactly
the package (no tests, benchmarks or docs; the license and README with them; the extras
in the metadata); the wheel, installed with no extra into a fresh venv (the
dependencies at `.ci/constraints.txt`'s versions, from the package index), runs a
consumer against a server of the full install, loads no extra, and its `sqltopic
server` names the extra to install; the wheel with its server extra alone serves; the
same consumer runs with the core's dependencies at the lowest versions its ranges
allow."""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.live_server import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
# Building the wheel and installing pyarrow and grpcio into a venv: pip's cache makes it
# quick, a cold cache downloads ~60 MB.
INSTALL_DEADLINE_S = 600
# Left out of the copy the build runs in: what `git clone` would not have (the venv, the
# caches, earlier builds). The tests, benchmarks and docs stay: the build must leave
# them out itself.
NOT_CLONED = (".venv", ".git", "build", "dist", "*.egg-info", ".*_cache", "__pycache__")
# What an sdist may hold at its top: the package's files and folders, the project files.
SDIST_TOP = {
    "LICENSE", "PKG-INFO", "README.md", "pyproject.toml", "setup.cfg", "py.typed", "MANIFEST.in",
    "__init__.py", "errors.py", "aio.py", "taos.py", "sqltopic.egg-info",
    "cli", "client", "proto", "server", "spark_jobs", "sql", "wal",
}  # fmt: skip

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
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel `python -m build` makes of a copy of this tree."""
    root = tmp_path_factory.mktemp("build")
    tree = root / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*NOT_CLONED), symlinks=True)
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", str(root / "dist"),
         str(tree))  # fmt: skip
    (sdist,) = (root / "dist").glob("sqltopic-*.tar.gz")
    (wheel,) = (root / "dist").glob("sqltopic-*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, built: tuple[Path, Path]) -> Path:
    """A venv with the wheel installed, no extra: its bin directory."""
    bin_dir = _venv(tmp_path_factory.mktemp("wheel"))
    _pip(bin_dir, "-c", str(CONSTRAINTS), str(built[1]))
    return bin_dir


def test_the_sdist_holds_the_package_the_license_and_the_readme(built: tuple[Path, Path]) -> None:
    with tarfile.open(built[0]) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    top = {n.split("/", 1)[0] for n in names}
    assert top <= SDIST_TOP, sorted(top - SDIST_TOP)
    assert {"LICENSE", "README.md", "pyproject.toml", "cli", "server"} <= top
    assert "server/console/static/console.js" in names
    assert "proto/sqltopic/v1/sqltopic.proto" in names


def test_the_wheel_carries_the_license_and_the_extras(built: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(built[1]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert {n.split("/", 1)[0] for n in names} == {"sqltopic", "sqltopic-0.1.0.dist-info"}
    assert "sqltopic-0.1.0.dist-info/licenses/LICENSE" in names
    assert not [n for n in names if n.startswith(("sqltopic/tests/", "sqltopic/bench/"))]
    message = email.message_from_bytes(metadata)
    assert message["License-Expression"] == "Apache-2.0"
    assert message["Description-Content-Type"] == "text/markdown"
    readme = message.get_payload()
    assert isinstance(readme, str)
    assert readme.startswith("# sqltopic")  # the README, as the package index shows it
    assert set(message.get_all("Provides-Extra") or ()) == {"server", "spark", "all", "dev"}
    requires = message.get_all("Requires-Dist") or ()
    core = {r.split("<")[0].split(">")[0] for r in requires if ";" not in r}
    assert core == {"grpcio", "protobuf", "pyarrow", "xxhash"}


def _venv(root: Path) -> Path:
    """A fresh venv under `root`: its bin directory."""
    _run(sys.executable, "-m", "venv", str(root / "venv"))
    return root / "venv" / "bin"


def _pip(bin_dir: Path, *args: str) -> None:
    _run(str(bin_dir / "python"), "-m", "pip", "install", "--quiet", *args)


def _installed(bin_dir: Path) -> set[str]:
    """The names of the venv's distributions, normalised (`prometheus-client`)."""
    listed = _run(str(bin_dir / "python"), "-m", "pip", "list", "--format=freeze").stdout
    return {line.split("==")[0].lower().replace("_", "-") for line in listed.split()}


def _consumed(bin_dir: Path, data: Path) -> str:
    """What CONSUMER prints, run by the venv's Python against a server of the full
    install on `data`."""
    server = ServerProcess(data)
    try:
        server.wait_ready()
        return _run(str(bin_dir / "python"), "-c", CONSUMER, server.address).stdout.strip()
    finally:
        server.kill()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=INSTALL_DEADLINE_S, check=False, cwd="/"
    )
    assert done.returncode == 0, f"{args}: {done.stderr[-3000:]}"
    return done


def test_the_core_wheel_has_only_the_client_dependencies(core_venv: Path) -> None:
    names = _installed(core_venv)
    assert {"sqltopic", "grpcio", "protobuf", "pyarrow", "xxhash"} <= names
    assert not names & {"duckdb", "sqlglot", "pyspark", "grpcio-tools", "prometheus-client"}


def test_the_core_wheel_consumes_from_a_full_server(core_venv: Path, tmp_path: Path) -> None:
    assert _consumed(core_venv, tmp_path / "data") == "[2, 3] []"


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


def _lower_bounds() -> list[str]:
    """The core's dependencies at the lowest versions its ranges allow."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = []
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0]
        low = re.search(r">=\s*([\w.]+)", requirement)
        assert low is not None, requirement
        pins.append(f"{name}=={low.group(1)}")
    return pins


@pytest.fixture(scope="module")
def oldest_venv(tmp_path_factory: pytest.TempPathFactory, built: tuple[Path, Path]) -> Path:
    """A venv with the wheel and the core's dependencies at their lower bounds."""
    bin_dir = _venv(tmp_path_factory.mktemp("oldest"))
    _pip(bin_dir, "--no-deps", str(built[1]))
    _pip(bin_dir, *_lower_bounds())  # pyarrow brings the numpy it needs
    return bin_dir


def test_the_lower_bounds_consume_from_a_full_server(oldest_venv: Path, tmp_path: Path) -> None:
    versions = _run(
        str(oldest_venv / "python"), "-c",
        "import importlib.metadata as m; names = ('grpcio', 'protobuf', 'pyarrow', 'xxhash'); "
        "print(' '.join(f'{n}=={m.version(n)}' for n in names))",
    ).stdout.split()  # fmt: skip
    assert [v.split("==")[0] for v in versions] == [p.split("==")[0] for p in _lower_bounds()]
    for got, low in zip(versions, _lower_bounds(), strict=True):  # 15 installs as 15.0.0
        assert got.split("==")[1].startswith(low.split("==")[1]), (got, low)
    assert _consumed(oldest_venv, tmp_path / "data") == "[2, 3] []"


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory: pytest.TempPathFactory, built: tuple[Path, Path]) -> Path:
    """A venv with the wheel and its server extra alone (no Spark)."""
    bin_dir = _venv(tmp_path_factory.mktemp("server"))
    _pip(bin_dir, "-c", str(CONSTRAINTS), f"{built[1]}[server]")
    return bin_dir


def test_the_server_extra_alone_serves(server_venv: Path, tmp_path: Path) -> None:
    names = _installed(server_venv)
    assert {"duckdb", "sqlglot", "prometheus-client"} <= names
    assert "pyspark" not in names
    server = subprocess.Popen(
        [str(server_venv / "sqltopic"), "server", "--data", str(tmp_path / "data"),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()  # the ready line, or "" if it died
        assert ready.startswith("sqltopic server listening on 127.0.0.1:"), (
            ready, server.stderr.read() if server.poll() is not None and server.stderr else "",
        )  # fmt: skip
        address = ready.split(" on ", 1)[1].split(",", 1)[0]
        done = _run(str(server_venv / "python"), "-c", CONSUMER, address)
        assert done.stdout.strip() == "[2, 3] []"
    finally:
        server.kill()
        server.wait(timeout=INSTALL_DEADLINE_S)
