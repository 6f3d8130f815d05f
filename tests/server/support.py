"""Helpers for engine tests: an engine factory, reading a topic to its end, rows of blocks."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock, TopicItem, TopicMeta
from sqltopic.wal.options import Clock

POWER_DDL = """
CREATE DATABASE power VGROUPS 4;
USE power;
CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);
"""

# A read loop that has not reached the end of a WAL after this many reads is stuck.
MAX_READS = 10_000


class EngineFactory:
    """Opens engines (by default all on one data directory), closes and reopens them."""

    def __init__(self, data_dir: Path, clock: Clock) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self._open: list[Engine] = []

    def __call__(self, data_dir: Path | None = None) -> Engine:
        engine = Engine(data_dir or self.data_dir, clock=self.clock, background=False)
        self._open.append(engine)
        return engine

    def close(self, engine: Engine) -> None:
        self._open.remove(engine)
        engine.close()

    def reopen(self, engine: Engine) -> Engine:
        """Close `engine` and open a new one on the same directory."""
        path = engine.state.data_dir
        self.close(engine)
        return self(path)

    def close_all(self) -> None:
        while self._open:
            self.close(self._open[-1])


# --- topics -----------------------------------------------------------------------------


def vgroups_of(engine: Engine, db: str) -> tuple[int, ...]:
    return engine.state.catalog.database(db).vgroups


def read_all(engine: Engine, topic: str, vgroup: int, max_rows: int = 7) -> list[TopicItem]:
    """Every item of `topic` in `vgroup` from version 0, read in pages of `max_rows`."""
    items: list[TopicItem] = []
    version = 0
    for _ in range(MAX_READS):
        got, next_version = engine.read_topic(topic, vgroup, version, max_rows)
        items += got
        if next_version == version:
            return items
        assert next_version > version, "read_topic went backwards"
        version = next_version
    raise AssertionError(f"topic {topic} vgroup {vgroup}: no end after {MAX_READS} reads")


def read_vgroups(
    engine: Engine, topic: str, db: str, max_rows: int = 7
) -> dict[int, list[TopicItem]]:
    """`read_all` over every vgroup of `db`."""
    return {v: read_all(engine, topic, v, max_rows) for v in vgroups_of(engine, db)}


def blocks(items: Iterable[TopicItem]) -> list[TopicBlock]:
    return [i for i in items if isinstance(i, TopicBlock)]


def metas(items: Iterable[TopicItem]) -> list[TopicMeta]:
    return [i for i in items if isinstance(i, TopicMeta)]


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [c.to_pylist() for c in table.columns]
    return list(zip(*columns, strict=True)) if columns else []


def block_rows(items: Iterable[TopicItem]) -> list[tuple[Any, ...]]:
    """The rows of every block, in order."""
    return [row for block in blocks(items) for row in rows(block.data)]


def tabled_rows(items: Iterable[TopicItem]) -> list[tuple[Any, ...]]:
    """(table_name, *row) for the rows of every block, in order."""
    return [(b.table_name, *row) for b in blocks(items) for row in rows(b.data)]


# --- values -----------------------------------------------------------------------------


def norm(value: Any) -> Any:
    """A value comparable across Arrow types: floats to 6 significant digits."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else float(f"{value:.6g}")
    return value


def norm_rows(rows_: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return [tuple(norm(v) for v in row) for row in rows_]


def table_names(engine: Engine, db: str | None = None) -> list[str]:
    sql = f"SHOW {db}.TABLES" if db else "SHOW TABLES"
    return [r[0] for r in engine.execute(sql).rows]


async def count_turns(turn: list[int]) -> None:
    """Count the event loop's turns in `turn[0]`, one a turn, until cancelled."""
    while True:
        turn[0] += 1
        await asyncio.sleep(0)
