"""A query topic's batch: WAL entries' rows conformed to the table's current columns, with
the context a topic's SQL may name besides the data (tag values, `tbname`).

Shared by every evaluator of a topic: the vnode's reads (server/core/topic_reader.py) and
the backfill's Spark tasks (spark_jobs/task.py), so both evaluate the same relation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sqltopic.sql.model import TBNAME, Column, Table


class _Constants:
    """Constant columns as dictionary arrays over one shared all-zero index buffer.

    A tag value or table name is the same for every row of an entry; building such a
    column per entry costs tens of microseconds, slicing a cached one about one. The
    zeros are shared by every cached value, so a value costs one tiny dictionary.
    """

    def __init__(self) -> None:
        self._zeros = pa.array([], pa.int32())
        self._arrays: dict[tuple[str, Any], pa.Array] = {}
        self._lock = threading.Lock()  # readers of different vgroups share the cache

    def get(self, value: Any, type_: pa.DataType, n: int) -> pa.Array:
        with self._lock:
            return self._get(value, type_, n)

    def _get(self, value: Any, type_: pa.DataType, n: int) -> pa.Array:
        if n > len(self._zeros):
            self._zeros = pa.repeat(pa.scalar(0, pa.int32()), max(n, 2 * len(self._zeros)))
            self._arrays.clear()
        key = (str(type_), value)
        full = self._arrays.get(key)
        if full is None:
            if len(self._arrays) >= CONSTANTS_KEPT:
                self._arrays.clear()
            full = pa.DictionaryArray.from_arrays(self._zeros, pa.array([value], type_))
            self._arrays[key] = full
        return full.slice(0, n)


# Distinct constant values cached (tag values, table names): each is one tiny array.
CONSTANTS_KEPT = 65_536

_constants = _Constants()


def constant(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """`value` repeated `n` times, dictionary-encoded (one copy of the value)."""
    return _constants.get(value, type_, n)


def with_context(
    data: pa.Table,
    owners: Sequence[Table],
    lengths: Sequence[int],
    tag_columns: Sequence[Column],
    precision: Any,
    *,
    tbname: bool,
) -> pa.Table:
    """`data` (the rows of entries whose owners and row counts are given, in order) plus
    a column per tag in `tag_columns` and, if asked, `tbname`. Each column is added whole,
    one constant chunk per entry: much cheaper than rebuilding every entry's batch."""
    for col in tag_columns:
        values = [t.tags.get(col.name) for t in owners]
        data = _constant_column(data, col.name, col.type.arrow(precision), values, lengths)
    if tbname:
        data = _constant_column(data, TBNAME, pa.string(), [t.name for t in owners], lengths)
    return data


def _constant_column(
    data: pa.Table, name: str, type_: pa.DataType, values: Sequence[Any], lengths: Sequence[int]
) -> pa.Table:
    chunks = [constant(v, type_, n) for v, n in zip(values, lengths, strict=True)]
    column = pa.chunked_array(chunks, type=pa.dictionary(pa.int32(), type_))
    return data.append_column(pa.field(name, column.type), column)
