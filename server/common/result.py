"""What a statement returns: columns, rows and an Arrow table, or a count of rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Result:
    """`table` holds the rows of a query or SHOW; `affected_rows` counts rows written
    (INSERT) or objects changed (DDL)."""

    table: pa.Table = field(default_factory=lambda: pa.table({}))
    affected_rows: int = 0

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        cols = [c.to_pylist() for c in self.table.columns]
        rows: list[tuple[Any, ...]] = list(zip(*cols, strict=True)) if cols else []
        return rows

    def to_arrow(self) -> pa.Table:
        return self.table

    @classmethod
    def of_rows(
        cls, schema: pa.Schema, rows: Sequence[Sequence[Any]], affected_rows: int = 0
    ) -> Result:
        columns: list[list[Any]] = [[row[i] for row in rows] for i in range(len(schema))]
        arrays = [pa.array(col, f.type) for col, f in zip(columns, schema, strict=True)]
        return cls(pa.Table.from_arrays(arrays, schema=schema), affected_rows)


@dataclass
class Session:
    """Per-connection state: the current database (USE) and the user."""

    db: str | None = None
    user: str = "root"
