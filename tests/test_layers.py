"""The layers point one way: each folder imports only the layers beneath it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each part of the package may import of ours (besides itself). `errors` is the
# leaf every layer may use; the CLI sits on top and may use anything.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "wal": {"errors"},
    "sql": {"errors"},
    "proto": {"errors"},
    "server": {"errors", "wal", "sql", "proto"},
    # spark_jobs reads a cluster's WAL through the public protocol (spark_jobs/remote.py)
    "spark_jobs": {"errors", "wal", "sql", "proto", "client"},
    "client": {"errors", "proto"},
    "aio": {"client"},  # the public name of client/aio.py
    "taos": {"client"},  # the public name of client/taos.py
    "__init__": {"errors", "client", "aio", "taos"},
    "cli": {"errors", "wal", "sql", "proto", "server", "spark_jobs", "client"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _our_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name == "sqltopic" or name.startswith("sqltopic."):
                parts = name.split(".")
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


# Inside server/, the roles' folders point one way too: shared records and limits at the
# bottom; the mnode's coordination and the vnodes' storage beside each other; the engine
# (catalog, statements, topic evaluation over local vnodes) on both; the dnode's serving
# of consumers on the engine; the web console on the engine and the sessions; the gRPC
# services on top (the server's start opens the console); `server/main.py` composes them.
SERVER_ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "mnode": {"common"},
    "vnode": {"common"},
    "core": {"common", "mnode", "vnode"},
    "dnode": {"common", "mnode", "vnode", "core"},
    "console": {"common", "mnode", "core"},
    "rpc": {"common", "mnode", "vnode", "core", "dnode", "console"},
}
# The only modules directly in server/: the package, `python -m`, and the composition.
SERVER_ROOT_MODULES = {"__init__", "__main__", "main"}


def _server_role(path: Path) -> str | None:
    rel = path.relative_to(ROOT / "server")
    return rel.parts[0] if len(rel.parts) > 1 else None


def _server_imports(path: Path) -> set[str]:
    """The server folders `path` imports from (`sqltopic.server.<folder>...`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module == "sqltopic.server":
                modules = [f"sqltopic.server.{alias.name}" for alias in node.names]
        for name in modules:
            parts = name.split(".")
            if parts[:2] == ["sqltopic", "server"] and len(parts) > 2:
                found.add(parts[2])
    return found


def _server_files() -> list[Path]:
    return sorted((ROOT / "server").rglob("*.py"))


@pytest.mark.parametrize("path", _server_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_server_roles_point_one_way(path: Path) -> None:
    role = _server_role(path)
    if role is None:
        assert path.stem in SERVER_ROOT_MODULES, f"{path.name}: put it in a role's folder"
        return
    illegal = _server_imports(path) - SERVER_ALLOWED[role] - {role}
    assert not illegal, f"{path.relative_to(ROOT)} ({role}) must not import {sorted(illegal)}"


def test_every_server_folder_has_its_role() -> None:
    folders = {d.name for d in (ROOT / "server").iterdir() if (d / "__init__.py").is_file()}
    assert folders == set(SERVER_ALLOWED)


def _reexports(path: Path) -> set[str]:
    """Names a module lists in `__all__` but imports instead of defining."""
    tree = ast.parse(path.read_text(), str(path))
    imported: set[str] = set()
    listed: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            imported |= {alias.asname or alias.name for alias in node.names}
        elif (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            listed = {str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)}
    return listed & imported


@pytest.mark.parametrize("path", _server_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reexport_shims_in_the_server(path: Path) -> None:
    """A name is imported from the module that defines it, not from a module that once
    held it (moves leave no shims behind)."""
    assert not _reexports(path), f"{path.relative_to(ROOT)} re-exports {_reexports(path)}"


def _package_files() -> list[Path]:
    files = [ROOT / "errors.py", ROOT / "__init__.py", ROOT / "aio.py", ROOT / "taos.py"]
    for folder in ("wal", "sql", "proto", "server", "spark_jobs", "client", "cli"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_respect_the_layers(path: Path) -> None:
    part = _part(path)
    illegal = _our_imports(path) - ALLOWED[part] - {part}
    assert not illegal, f"{path.relative_to(ROOT)} ({part}) must not import {sorted(illegal)}"


def test_every_module_of_the_package_is_checked() -> None:
    """A new root module or package folder must be given its layer here."""
    folders = [d for d in ROOT.iterdir() if (d / "__init__.py").is_file() and d.name != "tests"]
    ours = set(ROOT.glob("*.py")) | {p for d in folders for p in d.rglob("*.py")}
    missing = ours - set(_package_files())
    assert not missing, sorted(str(p.relative_to(ROOT)) for p in missing)
