"""Dead letters: rows of a shared group that ran out of deliveries (`max.deliveries`),
written as SQL rows to the group's `dead.letter.table`, so that they can be queried
with SELECT and consumed through a topic like any table.

The table is a normal table, created when missing: `dead_at` (the time the row was
given up, unique and increasing per table, so rows given up together never overwrite
each other), where it came from (`topic`, `group_id`, `vgroup`, `version`,
`row_index`), its `deliveries` and the `reason`, then the topic's own columns: a query
topic's output, a stable topic's data columns; a database topic's rows (whose tables
differ) keep only the first part. A topic column whose name is taken (one of ours,
`tbname`) is written as `row_<name>`. Rows of a table created earlier with other
columns are written in the columns the table has.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.tracked_reader import TrackedBlock
from sqltopic.server.vnode.share_window import RowId
from sqltopic.sql.model import TBNAME, Column
from sqltopic.sql.values import TICKS_PER_SECOND

REASON = "max.deliveries"
# The columns every dead-letter table starts with, and their types.
HEAD = (
    ("dead_at", "TIMESTAMP"),
    ("topic", "VARCHAR(192)"),
    ("group_id", "VARCHAR(192)"),
    ("vgroup", "INT"),
    ("version", "BIGINT"),
    ("row_index", "INT"),
    ("deliveries", "INT"),
    ("reason", "VARCHAR(64)"),
)
TAKEN = frozenset({name for name, _ in HEAD} | {TBNAME})


class DeadLetters:
    """Writes dead rows to their tables; thread-safe."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()  # dead_at stays increasing per table
        self._last: dict[tuple[str, str], int] = {}

    def write(
        self, target: tuple[str, str], topic: str, group: str, vgroup: int,
        blocks: Sequence[TrackedBlock], deliveries: dict[RowId, int],
    ) -> int:  # fmt: skip
        """Write the rows of `blocks` to `target` (db, table); the rows written. Raises
        the engine's error when the table cannot take them."""
        with self._lock:
            db, name = target
            payload = self._payload_columns(topic)
            if (db, name) not in self._engine.catalog.tables:
                self._engine.execute(_create_sql(db, name, payload))
            columns = {c.name for c in self._engine.catalog.columns_of(db, name)}
            rows = sum(b.block.data.num_rows for b in blocks)
            stamps = self._stamps(db, name, rows)
            data = _table(blocks, deliveries, stamps, topic, group, vgroup, columns)
            return self._engine.write(f"{db}.{name}", data) if rows else 0

    def _payload_columns(self, topic_name: str) -> list[Column]:
        catalog = self._engine.catalog
        topic = catalog.topic(topic_name)
        if topic.kind == "query":
            return list(topic.output)
        if topic.kind == "stable" and topic.target is not None:
            return list(catalog.columns_of(topic.db, topic.target))
        return []

    def _stamps(self, db: str, name: str, count: int) -> pa.Array:
        """`count` dead_at values after the table's last, in its database's precision."""
        precision = self._engine.catalog.database(db).precision
        now = self._engine.now_us()
        now = now * TICKS_PER_SECOND[precision] // 1_000_000
        first = max(now, self._last.get((db, name), now - 1) + 1)
        self._last[(db, name)] = first + count - 1
        return pa.array(range(first, first + count), pa.timestamp(precision))


def _create_sql(db: str, name: str, payload: list[Column]) -> str:
    head = [f"`{column}` {kind}" for column, kind in HEAD]
    rest = [f"`{_payload_name(c.name)}` {c.type.sql()}" for c in payload]
    return f"CREATE TABLE IF NOT EXISTS `{db}`.`{name}` ({', '.join(head + rest)})"


def _payload_name(name: str) -> str:
    return f"row_{name}" if name.lower() in TAKEN else name


def _table(
    blocks: Sequence[TrackedBlock], deliveries: dict[RowId, int], stamps: pa.Array,
    topic: str, group: str, vgroup: int, columns: set[str],
) -> pa.Table:  # fmt: skip
    """The dead rows as the table's columns (those of the topic it has)."""
    pieces = []
    at = 0
    for tracked in blocks:
        data = tracked.block.data
        n = data.num_rows
        ids = tracked.ids()
        arrays: dict[str, pa.Array] = {
            "dead_at": stamps.slice(at, n),
            "topic": pa.array([topic] * n, pa.string()),
            "group_id": pa.array([group] * n, pa.string()),
            "vgroup": pa.array([vgroup] * n, pa.int32()),
            "version": tracked.versions.cast(pa.int64()),
            "row_index": tracked.indexes.cast(pa.int32()),
            "deliveries": pa.array([deliveries[rid] for rid in ids], pa.int32()),
            "reason": pa.array([REASON] * n, pa.string()),
        }
        for field, column in zip(data.schema, data.columns, strict=True):
            named = _payload_name(field.name)
            if named in columns and named not in arrays:
                arrays[named] = column.combine_chunks()
        pieces.append(pa.table(arrays))
        at += n
    return pa.concat_tables(pieces, promote_options="default")
