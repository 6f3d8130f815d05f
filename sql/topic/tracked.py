"""A query topic's *tracked form*: its compiled SELECT with the id of each output row's
input row as two hidden outputs after its own.

Shared groups lease, acknowledge and deliver again single rows, so each row they deliver
needs a name that stays the same however often its entry is evaluated: the WAL version
of its entry and its index among the entry's rows (a row's index among the *output*
rows would move when a condition on NOW() lets other rows in or out). The vnode adds
both to the batch it evaluates (`ROW_VERSION`, `ROW_INDEX`) and asks for them back:
topics are stateless (one output row per input row at most, in input order), so the
ids pass through any filter and projection, in pyarrow and in DuckDB alike.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import sqlglot
from sqlglot import exp

# The hidden input and output columns of the tracked form.
ROW_VERSION = "__row_version"
ROW_INDEX = "__row_index"
ID_COLUMNS = (ROW_VERSION, ROW_INDEX)
ID_TYPES = {ROW_VERSION: pa.int64(), ROW_INDEX: pa.int32()}
# Row indexes 0, 1, 2, ... sliced for the indexes of an entry's rows (256 KiB, made once).
_COUNTING = pa.array(range(1 << 16), ID_TYPES[ROW_INDEX])


@functools.lru_cache(maxsize=1024)
def tracked_sql(select_sql: str) -> str:
    """`select_sql` (a compiled query topic's, or its shared form) with the row ids as
    its last two outputs."""
    tree = sqlglot.parse_one(select_sql, dialect="duckdb")
    if not isinstance(tree, exp.Select):
        raise ValueError(f"a topic's compiled SQL is one SELECT, not {type(tree).__name__}")
    ids = [exp.alias_(exp.column(name, quoted=True), name, quoted=True) for name in ID_COLUMNS]
    tree.set("expressions", [*tree.expressions, *ids])
    return tree.sql(dialect="duckdb")


def with_row_ids(
    batch: pa.Table, versions: list[int], lengths: list[int], firsts: list[int] | None = None
) -> pa.Table:
    """`batch` (the rows of entries at `versions`, `lengths` rows each, in order) with
    each row's version and index in its entry (counted from `firsts`, the index of each
    part's first row in its entry: a run of a multi-table entry starts inside it)."""
    if sum(lengths) != batch.num_rows or len(versions) != len(lengths):
        raise ValueError(f"{len(lengths)} entries of {sum(lengths)} rows for {batch.num_rows}")
    firsts = firsts or [0] * len(lengths)
    entries = list(zip(versions, lengths, strict=True))
    version = pa.chunked_array(
        [pa.repeat(pa.scalar(v, ID_TYPES[ROW_VERSION]), n) for v, n in entries],
        type=ID_TYPES[ROW_VERSION],
    )
    index = pa.chunked_array(
        [_indexes(f, n) for f, n in zip(firsts, lengths, strict=True)], type=ID_TYPES[ROW_INDEX]
    )
    return batch.append_column(ROW_VERSION, version).append_column(ROW_INDEX, index)


def _indexes(first: int, count: int) -> pa.Array:
    """The row indexes first .. first + count - 1: a slice of one array made once when
    they fit in it (an entry's rows usually do), else made here."""
    if first + count <= len(_COUNTING):
        return _COUNTING.slice(first, count)
    return pa.array(range(first, first + count), ID_TYPES[ROW_INDEX])


def split_ids(out: pa.Table) -> tuple[pa.Table, pa.Array, pa.Array]:
    """A tracked form's output as the topic's own columns, and the versions and indexes."""
    columns = out.column_names
    if columns[-2:] != list(ID_COLUMNS):
        raise ValueError(f"not a tracked form's output: its columns end with {columns[-2:]}")
    own = out.select(columns[:-2])
    version = out.column(ROW_VERSION).combine_chunks()
    index = out.column(ROW_INDEX).combine_chunks()
    return own, version, index
