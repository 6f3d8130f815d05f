"""DuckDB at creation: the probe that binds compiled SQL over an empty relation to learn
its types and validate it, the SQL text DuckDB runs, and the kinds of the types it gives."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from sqltopic.errors import SqlError
from sqltopic.sql.topic.text import Text

# Probes are cursors of one in-memory database: a cursor costs a few ms, a database of
# its own ~40 ms (a server computing a thousand topics' schemas would spend 40 s).
_BASE: duckdb.DuckDBPyConnection | None = None
_BASE_LOCK = threading.Lock()


def _cursor() -> duckdb.DuckDBPyConnection:
    """A new connection to the probes' database (its registered relations are its own)."""
    global _BASE  # noqa: PLW0603 - created on first use, then shared by every probe
    with _BASE_LOCK:
        if _BASE is None:
            _BASE = duckdb.connect()
        return _BASE.cursor()


class Probe:
    """An empty relation in a private DuckDB connection: binds expressions over it to
    learn their types and to validate them, without any data."""

    def __init__(self, relation: str, schema: pa.Schema) -> None:
        self._relation = relation
        self._con = _cursor()
        self._con.execute("SET TimeZone='UTC'")
        self._con.execute("SET python_enable_replacements=false")
        self._con.register(relation, schema.empty_table())

    def close(self) -> None:
        self._con.close()

    def run(self, sql: str) -> pa.Schema:
        """The result schema of a query (raises duckdb.Error)."""
        return self._con.sql(sql).to_arrow_table().schema

    def check(self, tree: exp.Select, text: Text) -> pa.Schema:
        """The result schema of `tree`, or a SqlError naming DuckDB's complaint."""
        try:
            return self.run(duckdb_sql(tree, text))
        except duckdb.Error as err:
            raise _evaluation_error(err, text, None) from None

    def types(
        self, exprs: Sequence[exp.Expr], text: Text, at: exp.Expr | int | None
    ) -> list[pa.DataType]:
        """The DuckDB types of expressions over the relation."""
        items = [exp.alias_(e.copy(), f"_{i}", quoted=True) for i, e in enumerate(exprs)]
        sql = duckdb_sql(exp.Select(expressions=items).from_(relation(self._relation)), text)
        try:
            return list(self.run(sql).types)
        except duckdb.Error as err:
            raise _evaluation_error(err, text, at) from None


def _evaluation_error(err: duckdb.Error, text: Text, at: exp.Expr | int | None) -> SqlError:
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.error(
        SqlError,
        f"the topic cannot be evaluated: {detail}; check the types of the operands, or CAST them",
        at,
    )


def duckdb_sql(tree: exp.Expr, text: Text) -> str:
    """`tree` as DuckDB SQL; a SqlError at `tree` if DuckDB has no way to say it."""
    try:
        return tree.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as err:
        raise text.error(SqlError, f"cannot translate the topic to DuckDB: {err}", tree) from None


def quoted(name: str) -> exp.Column:
    """A reference to column `name`, quoted."""
    return exp.column(name, quoted=True)


def relation(name: str) -> exp.Table:
    """A reference to relation `name`, quoted."""
    return exp.Table(this=exp.to_identifier(name, quoted=True))


def is_text(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def is_number(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)
    )
