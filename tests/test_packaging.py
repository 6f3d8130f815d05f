"""Packaging: every package folder is in the wheel, the plain sqlglot build is used; the
core install is the client (its four dependencies with ranges, no extra imported by
it or the client commands), the server and Spark are extras, and a command whose extra
is missing says which to install."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sqltopic.errors import EXTRA_MODULES, MissingExtra, require_extra

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGED = {"tests", "bench", "docs", "build", ".venv", ".ci"}


def _package_dirs() -> set[str]:
    found = {"sqltopic"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and rel.parts[0] not in NOT_PACKAGED and not rel.parts[0].startswith("."):
            found.add("sqltopic." + ".".join(rel.parts))
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    assert listed == _package_dirs(), "update [tool.setuptools] packages in pyproject.toml"


# The client's dependencies (the core install): what client/, proto/, errors.py and the
# public modules import of others' packages.
CORE = {"grpcio", "protobuf", "pyarrow", "xxhash"}
# Modules of the extras that the client must never import.
NOT_CLIENT = ("duckdb", "sqlglot", "pyspark", "prometheus_client", "grpc_health", "grpc_reflection")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_the_core_is_the_client_with_ranges_and_the_rest_are_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {_name(r) for r in project["dependencies"]} == CORE
    for requirement in project["dependencies"]:
        assert ">=" in requirement, requirement  # a range: lower bound
        assert "<" in requirement, requirement  # and upper bound
        assert "==" not in requirement, requirement  # not a pin
    extras = project["optional-dependencies"]
    assert {_name(r) for r in extras["server"]} == {
        "duckdb", "sqlglot", "grpcio-health-checking", "grpcio-reflection", "prometheus-client",
    }  # fmt: skip
    assert set(extras["spark"]) == {"sqltopic[server]", "pyspark>=4.3,<5"}
    assert extras["all"] == ["sqltopic[server,spark]"]
    assert "grpcio-tools" in {_name(r) for r in extras["dev"]}
    pinned = {_norm(line): line for line in (ROOT / ".ci/constraints.txt").read_text().split()}
    for requirement in (*project["dependencies"], *extras["server"], *extras["spark"][1:]):
        assert "==" in pinned[_norm(requirement)], f"pin {requirement} in .ci/constraints.txt"


def _norm(requirement: str) -> str:
    return _name(requirement).replace("_", "-")


CLIENT_FILES = [
    *ROOT.glob("client/*.py"), *ROOT.glob("proto/*.py"),
    *(ROOT / n for n in ("errors.py", "aio.py", "taos.py", "__init__.py")),
]  # fmt: skip


@pytest.mark.parametrize("path", CLIENT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_client_imports_no_extra(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        assert not [n for n in names if n.split(".")[0] in NOT_CLIENT], path


def test_importing_the_client_and_the_cli_loads_no_extra() -> None:
    """What `import sqltopic` and the client commands load, in a fresh interpreter."""
    # grpc itself imports grpc_health and grpc_reflection when they are installed
    heavy = ("duckdb", "sqlglot", "pyspark", "prometheus_client")
    code = (
        "import sys, sqltopic, sqltopic.aio, sqltopic.taos, sqltopic.cli.main\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        (["server", "--port", "0"], "server"),
        (["mnode", "--port", "0"], "server"),
        (["dnode", "--port", "0"], "server"),
        (["demo"], "server"),
    ],
)
def test_a_command_without_its_extra_names_it(
    command: list[str], extra: str, tmp_path: Path
) -> None:
    """duckdb made unimportable, as in an install without the server extra."""
    code = (
        "import sys; sys.modules['duckdb'] = None\n"
        "from sqltopic.cli.main import main\n"
        f"sys.exit(main({[*command, '--data', str(tmp_path / 'data')]!r}))"
    )
    if command == ["demo"]:
        code = code.replace(", '--data', " + repr(str(tmp_path / "data")), "")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr
    what = "sqltopic " + command[0]
    assert done.stderr.strip() == (
        f"sqltopic: {what} needs sqltopic's {extra} extra (module duckdb is not installed): "
        f"pip install 'sqltopic[{extra}]'"
    )
    assert not (tmp_path / "data").exists()


def test_require_extra_names_the_missing_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRA_MODULES, "spark", ("json", "no_such_module_here"))
    with pytest.raises(MissingExtra, match=r"module no_such_module_here is not installed"):
        require_extra("spark", "sqltopic backfill")
    require_extra("server", "sqltopic server")  # installed here: nothing raised
