"""The relations a compiled topic runs over, shared by the topic compiler and the vnode.

A vnode evaluates a query topic over a *batch*: many WAL data entries of the topic's
table(s) concatenated in WAL order, with the tag values and the table name of each row
added. A message covers whole entries, so rows need no version of their own. A stable
topic's tag condition runs over *tags*: one row per child table.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sqltopic.sql.model import TBNAME, Column
from sqltopic.sql.types import Precision

BATCH = "__batch"  # registered name of the batch relation
TAGS = "__tags"  # registered name of the tags relation
# Names a topic's output may not take (every name starting with "__" is reserved too).
RESERVED = frozenset({BATCH, TAGS})
# Schema metadata of a data entry: the ids of its columns, in order (see `Column.cid`).
CIDS_KEY = b"sqltopic.cids"


def data_schema(columns: Sequence[Column], precision: Precision) -> pa.Schema:
    """The Arrow schema of a table's data entries in the WAL, naming the column ids."""
    fields = [pa.field(c.name, c.type.arrow(precision)) for c in columns]
    return pa.schema(fields, metadata={CIDS_KEY: column_ids(columns)})


def column_ids(columns: Sequence[Column]) -> bytes:
    return ",".join(str(c.cid) for c in columns).encode()


def batch_schema(
    columns: Sequence[Column], tags: Sequence[Column], precision: Precision
) -> pa.Schema:
    """Data columns, then tags, then `tbname`. (A vnode may hand the tags and `tbname`
    over dictionary-encoded: they are constant within each WAL entry.)"""
    fields = [pa.field(c.name, c.type.arrow(precision)) for c in (*columns, *tags)]
    fields.append(pa.field(TBNAME, pa.string()))
    return pa.schema(fields)


def tags_schema(tags: Sequence[Column], precision: Precision) -> pa.Schema:
    """`tbname`, then the tag columns."""
    fields = [pa.field(TBNAME, pa.string())]
    fields += [pa.field(c.name, c.type.arrow(precision)) for c in tags]
    return pa.schema(fields)
