"""Helpers of the Spark tests: the rows the live path delivers, the rows a backfill wrote,
both normalised so that they compare across Arrow and Spark types."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock

# A read loop that has not reached the end of a WAL after this many reads is stuck.
MAX_READS = 10_000
# Rows per live read: small, so that reads cover several pages of every vgroup.
PAGE_ROWS = 50
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Rows = dict[int, list[tuple[Any, ...]]]


def norm(value: Any) -> Any:
    """A value comparable across the two sides: timestamps as epoch microseconds,
    decimals (Spark's BIGINT UNSIGNED) as ints, floats to 6 significant digits."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return (aware - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else float(f"{value:.6g}")
    return value


def table_rows(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    columns = [table.column(n).to_pylist() for n in names]
    return [tuple(norm(v) for v in row) for row in zip(*columns, strict=True)]


def live_rows(engine: Engine, topic: str) -> Rows:
    """What consuming `topic` from `earliest` delivers, per vgroup in WAL order (read from
    each vgroup's first retained version, as a consumer after a data_lost message)."""
    _db, vgroups = engine.topic_vgroups(topic)
    out: Rows = {}
    for vgroup in vgroups:
        version = engine.vnode_of(topic, vgroup).reader().first_version
        rows: list[tuple[Any, ...]] = []
        for _ in range(MAX_READS):
            items, next_version = engine.read_topic(topic, vgroup, version, PAGE_ROWS)
            for item in items:
                if isinstance(item, TopicBlock):
                    rows += table_rows(item.data, item.data.column_names)
            if next_version == version:
                break
            version = next_version
        out[vgroup] = rows
    return out


def backfill_rows(out: Path, names: list[str]) -> Rows:
    """The rows of a backfill's Parquet, per vgroup, ordered by `_version` (stable: rows
    of one entry keep their order in the file)."""
    rows: Rows = {}
    for folder in sorted(out.glob("vgroup=*")):
        vgroup = int(folder.name.split("=", 1)[1])
        files = sorted(folder.glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
        if table is None:
            continue
        versions = table.column("_version").to_pylist()
        assert versions == sorted(versions), f"vgroup {vgroup}: rows out of WAL order"
        rows[vgroup] = table_rows(table, names)
    return rows


def non_empty(rows: Rows) -> Rows:
    return {v: r for v, r in rows.items() if r}
