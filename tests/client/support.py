"""What the consumer tests share: TDengine's smart-meter example (docs/client.md), a query
topic with a filter and the SELECT it equals, configs, and draining a consumer up to the
vnodes' end (sync and asyncio) with a deadline rather than a sleep."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pyarrow as pa

from sqltopic.aio import Consumer as AsyncConsumer
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message, TopicPartition
from sqltopic.errors import Error

# A condition that does not hold within this long never will.
DEADLINE_S = 30.0
# Short holds keep drains quick: a vgroup with nothing to match answers empty this soon.
FAST_WAIT_MS = 100

# The eight rows every TDengine connector example inserts (four child tables, two vgroups).
METERS = """
INSERT INTO d1001 USING meters TAGS ('California.SanFrancisco', 2)
    VALUES ('2018-10-03 14:38:05.000', 10.3, 219, 0.31) ('2018-10-03 14:38:15.000', 12.6, 218, 0.33)
           ('2018-10-03 14:38:16.800', 12.3, 221, 0.31)
  d1002 USING meters TAGS ('California.SanFrancisco', 3)
    VALUES ('2018-10-03 14:38:16.650', 10.3, 218, 0.25)
  d1003 USING meters TAGS ('California.LosAngeles', 2)
    VALUES ('2018-10-03 14:38:05.500', 11.8, 221, 0.28) ('2018-10-03 14:38:16.600', 13.4, 223, 0.29)
  d1004 USING meters TAGS ('California.LosAngeles', 3)
    VALUES ('2018-10-03 14:38:05.000', 10.8, 223, 0.29) ('2018-10-03 14:38:06.500', 11.5, 221, 0.35)
"""
COLUMNS = "ts, current, voltage, location, tbname"
FILTER = "voltage > 219"
TOPIC = f"CREATE TOPIC overvoltage AS SELECT {COLUMNS} FROM power.meters WHERE {FILTER}"
SELECT = f"SELECT {COLUMNS} FROM power.meters WHERE {FILTER}"


def later_rows(first_ms: int, count: int, voltage: int = 230) -> str:
    """An INSERT of `count` rows into d1001 from `first_ms`, all above the filter."""
    values = " ".join(f"({first_ms + i}, 9.5, {voltage}, 0.3)" for i in range(count))
    return f"INSERT INTO power.d1001 VALUES {values}"


def config(address: str, group: str, **extra: Any) -> dict[str, object]:
    """A consumer config for tests: manual commits and short holds unless overridden."""
    base: dict[str, object] = {
        "server": address,
        "group.id": group,
        "client.id": f"test-{group}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
        "fetch.max.wait.ms": FAST_WAIT_MS,
    }
    return base | {key.replace("_", "."): value for key, value in extra.items()}


def rows_of(messages: list[Message]) -> Counter[tuple[Any, ...]]:
    return Counter(row for message in messages for row in message.rows())


class Drain:
    """Progress of a drain: the assigned vgroups, the ends to reach, what arrived."""

    def __init__(self, parts: list[TopicPartition]) -> None:
        assert parts, "the consumer has no vgroups"
        self.parts = parts
        self.ends = {(p.topic, p.vgroup): p.end for p in parts}
        self.messages: list[Message] = []
        self.deadline = time.monotonic() + DEADLINE_S

    def more(self, positions: list[TopicPartition]) -> bool:
        """False once every position reached its end."""
        at = {(p.topic, p.vgroup): p.offset for p in positions}
        if all((at.get(key) or -1) >= (end or 0) for key, end in self.ends.items()):
            return False
        assert time.monotonic() < self.deadline, f"not caught up with {self.ends}: {at}"
        return True

    def add(self, message: Message | None) -> None:
        if message is not None:
            self.messages.append(message)


def drain(consumer: Consumer) -> list[Message]:
    """Every message up to each assigned vnode's end as it is now."""
    progress = Drain(consumer.assignment())
    while progress.more(consumer.position(progress.parts)):
        progress.add(consumer.poll(1.0))
    return progress.messages


async def drain_async(consumer: AsyncConsumer) -> list[Message]:
    """`drain` for the asyncio consumer."""
    progress = Drain(await consumer.assignment())
    while progress.more(consumer.position(progress.parts)):
        progress.add(await consumer.poll(1.0))
    return progress.messages


def first_error(consumer: Consumer) -> Error:
    """The error a poll raises first (it must within the deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            consumer.poll(0.2)
        except Error as err:
            return err
    raise AssertionError(f"poll raised nothing within {DEADLINE_S} s")


# Rows of one Arrow write to d1001 whose message is over one 4 MiB frame (20 bytes a
# row in the WAL and in Arrow): the consumer's Fetch is refused and it polls instead.
BIG_ROWS = 400_000


def big_write(conn: Connection) -> int:
    """Write BIG_ROWS rows to power.d1001 in one entry; the rows d1001 then holds."""
    first = 1_600_000_000_000
    conn.write(
        "power.d1001",
        pa.table({
            "ts": pa.array(range(first, first + BIG_ROWS), pa.timestamp("ms")),
            "current": pa.array([10.5] * BIG_ROWS, pa.float32()),
            "voltage": pa.array([221] * BIG_ROWS, pa.int32()),
            "phase": pa.array([0.5] * BIG_ROWS, pa.float32()),
        }),
    )  # fmt: skip
    return int(conn.execute("SELECT count(*) FROM power.d1001").rows[0][0])


KEYED = """
CREATE DATABASE keyed VGROUPS 2;
CREATE STABLE keyed.meters (ts TIMESTAMP, v INT) TAGS (site INT);
CREATE TOPIC by_meter AS SELECT ts, v, tbname FROM keyed.meters;
"""


def keyed_rows(conn: Connection, tables: int, writes: int, rows: int) -> int:
    """Database `keyed` with topic `by_meter` (every row, with `tbname`), and `writes`
    rounds of one `rows`-row write to each of `tables` tables m0..; the rows written."""
    conn.execute(KEYED)
    first = 1_700_000_000_000
    for w in range(writes):
        for n in range(tables):
            values = " ".join(f"({first + w * rows + i}, {w * rows + i})" for i in range(rows))
            conn.execute(f"INSERT INTO keyed.m{n} USING keyed.meters TAGS ({n}) VALUES {values}")
    return tables * writes * rows
