"""The backfill against a real consumer over the network: for topics with scalar
functions, tags, tbname and NULLs, the Parquet rows of each vgroup equal, in WAL order,
what a `sqltopic.Consumer` receives consuming the topic from `earliest` on a real server.
(tests/spark/test_backfill_differential.py covers many more topics against the engine's
read path in-process.)"""

from __future__ import annotations

import argparse
import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sqltopic.cli import backfill
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from tests.live_server import ServerProcess
from tests.spark.test_handoff import follow, manifest_ends

pytestmark = pytest.mark.spark

TOPICS = {
    "calc": "SELECT ts, voltage * 2 + 1 AS v2, ABS(current - 10) AS dist, UPPER(location) AS "
    "loc, tbname FROM power.meters WHERE voltage > 215 OR phase IS NULL",
    "tags": "SELECT ts, groupid, location, phase FROM power.meters WHERE groupid IN (1, 3)",
}


def _history(conn: Connection) -> None:
    parts = []
    for m in range(4):
        values = " ".join(
            f"({1_700_000_000_000 + i}, {10 + (i % 7) / 4}, {210 + (i * 3 + m) % 12}, "
            f"{'NULL' if i % 5 == 0 else (i % 3) / 10})"
            for i in range(m, 300, 4)
        )
        parts.append(f"power.d{m} USING power.meters TAGS ('m{m}', {m}) VALUES {values}")
    conn.execute("INSERT INTO " + " ".join(parts))


def _rows(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    def norm(value: Any) -> Any:
        if isinstance(value, float):
            return None if math.isnan(value) else round(value, 5)
        if isinstance(value, datetime):  # Parquet's are UTC-aware, the consumer's naive UTC
            return value.replace(tzinfo=None)
        return value

    cols = [table[n].to_pylist() for n in names]
    return [tuple(norm(v) for v in row) for row in zip(*cols, strict=True)]


@pytest.mark.parametrize("topic", sorted(TOPICS))
@pytest.mark.parametrize("source", ["files", "server"])
def test_the_backfill_equals_consuming_from_earliest(
    server: ServerProcess, live_power: Connection, spark: Any, tmp_path: Path, topic: str,
    source: str,
) -> None:  # fmt: skip
    """Reading the data directory's files (--data) or through the server (without it:
    ReadCatalog, OffsetRange and ReadEntries), the same rows."""
    live_power.execute(f"CREATE TOPIC {topic} AS {TOPICS[topic]}")
    _history(live_power)
    files = ["--data", str(server.data)] if source == "files" else []
    check_against_consumer(server.address, topic, tmp_path / "out", spark, files)


def check_against_consumer(
    address: str, topic: str, out: Path, spark: Any, extra: list[str]
) -> None:
    """Backfill `topic` of the server (or cluster's mnode) at `address`, then consume it
    from earliest up to where the backfill stopped: each vgroup's Parquet rows equal
    what the consumer received from it, in WAL order."""
    parser = argparse.ArgumentParser()
    backfill.add_parser(parser.add_subparsers())
    args = parser.parse_args(["backfill", topic, "--output", str(out), "--server", address,
                              *extra])  # fmt: skip
    assert backfill.run(args, spark=spark) == 0
    ends = manifest_ends(out)
    config = {"server": address, "group.id": "diff", "auto.offset.reset": "earliest",
              "fetch.max.wait.ms": "100"}  # fmt: skip
    with Consumer(config) as consumer:
        consumer.subscribe([topic])
        messages = follow(consumer, ends)
    total = 0
    for vgroup in sorted(ends):
        consumed = [m.to_arrow() for m in messages if m.vgroup == vgroup and m.row_count]
        directory = out / f"vgroup={vgroup}"
        if not directory.exists():  # no row of the topic in this vgroup
            assert consumed == [], f"vgroup {vgroup}"
            continue
        part = pq.read_table(directory).sort_by("_version")
        names = [n for n in part.column_names if n != "_version"]
        live = pa.concat_tables(consumed) if consumed else part.select(names).slice(0, 0)
        assert _rows(part, names) == _rows(live, names), f"vgroup {vgroup}"
        total += part.num_rows
    assert total > 0
