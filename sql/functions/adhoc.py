"""TDengine's functions in an ad hoc SELECT: the same translation as a topic's, with
argument types learned from the queried relations' columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import duckdb
import pyarrow as pa
from sqlglot import exp

from sqltopic.sql.functions import Duration, normalize_now
from sqltopic.sql.functions.base import Ctx
from sqltopic.sql.functions.expand import translate_tree
from sqltopic.sql.types import Precision

# The relation argument types are bound over: every column of every queried relation.
_TYPES = "__td_types"
# TDengine's precision when a query reads no table ("if no table is specified, the
# precision is milliseconds", 22-function.md).
DEFAULT_PRECISION: Precision = "ms"
_NO_COLUMNS = pa.schema([pa.field("__none", pa.int8())])


def translate_select(
    tree: exp.Expr,
    columns: pa.Schema,
    precision: Precision,
    name_of: Callable[[exp.Func], str],
    refuse: Callable[[str, exp.Expr | None], NoReturn],
) -> None:
    """Give `tree` (an ad hoc SELECT in DuckDB's dialect, tables resolved) TDengine's
    functions, durations and NOW, in place. `columns`: the queried relations' columns
    (a name in several with its first type)."""
    normalize_now(tree)
    tdengine_aggregates(tree, refuse)
    if not _needs_translation(tree):
        return
    typer = _Typer(columns)
    try:
        ctx = Ctx(
            precision=precision,
            type_of=typer.type_of,
            refuse=refuse,
            in_topic=False,
            nchar=nchar_columns(columns),
        )
        translate_tree(tree, ctx, name_of)
    finally:
        typer.close()


def tdengine_aggregates(tree: exp.Expr, refuse: Callable[[str, exp.Expr | None], NoReturn]) -> None:
    """TDengine's aggregates where DuckDB's namesakes differ: STDDEV is the population
    standard deviation (DuckDB's STDDEV is the sample one); FIRST and LAST are the values
    at the smallest and largest timestamp, NULLs skipped (DuckDB's: any value, in the
    order read), refused with how to write them."""
    for node in list(tree.find_all(exp.Stddev, exp.First, exp.Last)):
        if isinstance(node, exp.Stddev):
            node.replace(exp.StddevPop(this=node.this))
            continue
        name, pick = ("FIRST", "arg_min") if isinstance(node, exp.First) else ("LAST", "arg_max")
        refuse(
            f"{name} is not supported in an ad hoc SELECT: TDengine's {name} is the value "
            f"at the {'smallest' if pick == 'arg_min' else 'largest'} timestamp, NULLs "
            f"skipped; write {pick}(x, ts) FILTER (WHERE x IS NOT NULL)",
            node,
        )


class _Typer:
    """Types expressions over the relations' columns, in a private DuckDB connection
    opened at the first question (a query without TDengine functions asks none)."""

    def __init__(self, columns: pa.Schema) -> None:
        # DuckDB wants a relation of at least one column; "__" names are never a table's
        self._columns = columns if len(columns) else _NO_COLUMNS
        self._con: duckdb.DuckDBPyConnection | None = None

    def type_of(self, node: exp.Expr) -> pa.DataType | None:
        if self._con is None:
            self._con = duckdb.connect()
            self._con.execute("SET TimeZone='UTC'")
            self._con.execute("SET python_enable_replacements=false")
            self._con.register(_TYPES, self._columns.empty_table())
        return _type_of(self._con, node)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()


def _needs_translation(tree: exp.Expr) -> bool:
    """Whether anything in `tree` may need it (most queries call no function at all)."""
    return any(isinstance(n, (exp.Func, Duration, exp.Add, exp.Sub, exp.Mod)) for n in tree.walk())


def _type_of(con: duckdb.DuckDBPyConnection, node: exp.Expr) -> pa.DataType | None:
    """The DuckDB type of `node` with its columns read from the relations' columns by
    name (qualifiers dropped); None when it does not bind on its own (a CTE's column)."""
    bare = node.copy()
    for col in list(bare.find_all(exp.Column)):
        col.set("table", None)
        col.set("db", None)
    sql = exp.Select(expressions=[exp.alias_(bare, "_0")]).from_(_TYPES).sql(dialect="duckdb")
    try:
        return con.sql(sql).to_arrow_table().schema.types[0]
    except duckdb.Error:
        return None


# Schema metadata of a queried relation: its NCHAR columns' names, comma-separated.
NCHAR_KEY = b"td_nchar"


def mark_nchar(rel: pa.Table, names: list[str]) -> pa.Table:
    """`rel` with its NCHAR columns named in its schema metadata (for LENGTH)."""
    meta = dict(rel.schema.metadata or {})
    meta[NCHAR_KEY] = ",".join(n.lower() for n in names).encode()
    return rel.replace_schema_metadata(meta)


def nchar_columns(columns: pa.Schema) -> frozenset[str]:
    raw = (columns.metadata or {}).get(NCHAR_KEY, b"")
    return frozenset(n for n in raw.decode().split(",") if n)


def relation_columns(relations: list[pa.Table]) -> tuple[pa.Schema, Precision]:
    """The columns of the queried relations (first type of each name, the NCHAR ones
    named in the metadata) and the precision of the first one's timestamps (the default
    when none)."""
    fields: dict[str, pa.Field] = {}
    precision: Precision | None = None
    nchar: set[str] = set()
    for rel in relations:
        nchar |= nchar_columns(rel.schema)
        for field in rel.schema:
            fields.setdefault(field.name.lower(), pa.field(field.name.lower(), field.type))
            if precision is None and pa.types.is_timestamp(field.type):
                unit = field.type.unit
                precision = unit if unit in ("ms", "us", "ns") else None
    schema = pa.schema(
        list(fields.values()), metadata={NCHAR_KEY: ",".join(sorted(nchar)).encode()}
    )
    return schema, precision or DEFAULT_PRECISION
