"""Output types: a TDengine column type for every output column of a query topic, and the
exact Arrow schema of its `select_sql` as DuckDB gives it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import closing

import pyarrow as pa
from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery, SqlError
from sqltopic.sql import layout
from sqltopic.sql.model import Column
from sqltopic.sql.topic.names import Output
from sqltopic.sql.topic.probe import Probe, is_text
from sqltopic.sql.topic.rules import UNKNOWN_STRING_LENGTH
from sqltopic.sql.topic.text import Text
from sqltopic.sql.types import ColumnType, Precision, TypeName

_ARROW_TYPES: dict[pa.DataType, TypeName] = {
    pa.bool_(): "BOOL", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
    pa.int64(): "BIGINT", pa.uint8(): "TINYINT UNSIGNED", pa.uint16(): "SMALLINT UNSIGNED",
    pa.uint32(): "INT UNSIGNED", pa.uint64(): "BIGINT UNSIGNED", pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
}  # fmt: skip

# Schemas asked for again and again (per poll, per topic after each catalog change) are
# remembered: a probe costs milliseconds. Room for thousands of topics.
_SCHEMA_CACHE_SIZE = 16_384


_SCHEMAS: OrderedDict[tuple[str, pa.Schema], pa.Schema] = OrderedDict()
_SCHEMAS_LOCK = threading.Lock()


def schema_of(select_sql: str, batch: pa.Schema) -> pa.Schema:
    """The Arrow schema of the outputs of `select_sql` over a batch of schema `batch`."""
    key = (select_sql, batch)
    with _SCHEMAS_LOCK:
        found = _SCHEMAS.get(key)
        if found is not None:
            _SCHEMAS.move_to_end(key)
            return found
    with closing(Probe(layout.BATCH, batch)) as probe:
        schema = _user_schema(probe.run(select_sql))
    remember_schema(select_sql, batch, schema)
    return schema


def remember_schema(select_sql: str, batch: pa.Schema, schema: pa.Schema) -> None:
    """Note what `schema_of(select_sql, batch)` is (CREATE TOPIC knows it from its own
    probe: the first read of a new topic then costs no probe)."""
    schema = _user_schema(schema)  # as a probe's run gives it, metadata and all
    with _SCHEMAS_LOCK:
        _SCHEMAS[select_sql, batch] = schema
        _SCHEMAS.move_to_end((select_sql, batch))
        while len(_SCHEMAS) > _SCHEMA_CACHE_SIZE:
            _SCHEMAS.popitem(last=False)


def fix_output_types(
    tree: exp.Select, outputs: list[Output], probe: Probe, precision: Precision, text: Text
) -> pa.Schema:
    """Give every output column a TDengine type (casting decimals to DOUBLE and other
    timestamps to the database precision); the exact Arrow schema of the outputs."""
    schema = _validate(tree, outputs, probe, text)
    cast = False
    for item, field, out in zip(tree.expressions, schema, outputs, strict=True):
        if _column_type(field.type, precision, None) is not None:
            continue
        to = _cast_target(field.type, precision)
        if to is None:
            raise text.error(
                InvalidTopicQuery,
                f"output column {out.name!r} has type {field.type}, which no TDengine column "
                "type holds; CAST it, e.g. CAST(... AS BIGINT) or CAST(... AS VARCHAR(64))",
                out.offset,
            )
        item.set("this", exp.Cast(this=item.this, to=exp.DataType.build(to, dialect="duckdb")))
        cast = True
    return _user_schema(probe.check(tree, text)) if cast else schema


def _validate(tree: exp.Select, outputs: list[Output], probe: Probe, text: Text) -> pa.Schema:
    """Bind each output and the WHERE alone (so an error points at the culprit), then
    the whole SELECT; the exact Arrow schema of the outputs."""
    for item, out in zip(tree.expressions, outputs, strict=True):
        probe.types([item.this], text, out.offset)
    where = tree.args.get("where")
    if where is not None:
        probe.types([where.this], text, where.this)
    return _user_schema(probe.check(tree, text))


def _cast_target(dtype: pa.DataType, precision: Precision) -> str | None:
    if pa.types.is_decimal(dtype):
        return "DOUBLE"
    if pa.types.is_timestamp(dtype):
        return ColumnType("TIMESTAMP").duckdb(precision)
    return None


def _column_type(
    dtype: pa.DataType, precision: Precision, source: Column | None
) -> ColumnType | None:
    """The TDengine type of an Arrow output type (a plain column keeps its own)."""
    if source is not None and source.type.arrow(precision) == dtype:
        return source.type
    if is_text(dtype):
        return ColumnType("VARCHAR", UNKNOWN_STRING_LENGTH)
    if pa.types.is_timestamp(dtype):
        exact = dtype.unit == precision and dtype.tz is None
        return ColumnType("TIMESTAMP") if exact else None
    name = _ARROW_TYPES.get(dtype)
    return ColumnType(name) if name is not None else None


def output_columns(
    outputs: list[Output], schema: pa.Schema, precision: Precision
) -> tuple[Column, ...]:
    """The catalog's columns of the outputs, of the types that `schema` gives them."""
    columns = []
    for out, field in zip(outputs, schema, strict=True):
        kind = _column_type(field.type, precision, out.source)
        if kind is None:  # fix_output_types made every type one of ours
            raise SqlError(f"output column {out.name!r} has no TDengine type ({field.type})")
        columns.append(Column(out.name, kind))
    return tuple(columns)


def _user_schema(schema: pa.Schema) -> pa.Schema:
    """A `select_sql` result schema, without metadata."""
    return pa.schema(list(schema))
