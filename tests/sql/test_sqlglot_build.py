"""sqltopic needs the plain (pure Python) sqlglot build.

With the compiled build (`pip install sqlglot[c]`, distribution `sqlglotc`, which
overlays mypyc-compiled .so files onto sqlglot's own modules) every Python subclass of
sqlglot's Parser or Expression fails at runtime, and with it the whole TDengine dialect.
The deprecated Rust tokenizer `sqlglotrs` no longer fits sqlglot 30 either. These tests
fail with the fix in the message as soon as such a build is installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest
import sqlglot

FIX = (
    "sqltopic needs the plain, pure-Python sqlglot: run `pip uninstall -y sqlglotc sqlglotrs` "
    "and `pip install --force-reinstall sqlglot==30.30.0` (as pinned in pyproject.toml; "
    "never `sqlglot[c]` or `sqlglot[rs]`)"
)

# The modules the dialect subclasses or relies on; in the plain build each is a .py file.
MODULES = (
    "sqlglot.tokenizer_core",
    "sqlglot.tokens",
    "sqlglot.parser",
    "sqlglot.generator",
    "sqlglot.expressions.core",
    "sqlglot.parsers.duckdb",
    "sqlglot.generators.duckdb",
)


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize("dist", ["sqlglotc", "sqlglotrs"])
def test_no_compiled_sqlglot_distribution(dist: str) -> None:
    version = _installed(dist)
    assert version is None, f"{dist} {version} is installed. {FIX}"


@pytest.mark.parametrize("module", MODULES)
def test_sqlglot_modules_are_python_source(module: str) -> None:
    path = getattr(importlib.import_module(module), "__file__", None) or "(no file)"
    assert path.endswith(".py"), f"{module} is loaded from {path}, a compiled build. {FIX}"


def test_sqlglot_does_not_report_its_compiled_core() -> None:
    from sqlglot import tokens  # noqa: PLC0415

    assert not getattr(tokens, "SQLGLOTC_INSTALLED", False), f"sqlglotc is active. {FIX}"


def test_the_pinned_sqlglot_is_installed() -> None:
    assert _installed("sqlglot") == "30.30.0", f"sqlglot {_installed('sqlglot')}. {FIX}"


def test_the_dialect_builds_its_own_expressions() -> None:
    from sqltopic.sql.dialect import TdCreateTopic, TDengine  # noqa: PLC0415

    try:
        tree = sqlglot.parse_one("CREATE TOPIC t AS DATABASE power", read=TDengine)
        text = tree.sql(dialect=TDengine)
    except Exception as exc:  # the compiled build fails here, in many ways
        pytest.fail(f"the TDengine dialect does not run ({exc!r}). {FIX}")
    assert type(tree) is TdCreateTopic, f"parsed as {type(tree).__name__}. {FIX}"
    assert text == "CREATE TOPIC t AS DATABASE power"
