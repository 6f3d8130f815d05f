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
    "spark_jobs": {"errors", "wal", "sql"},
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
