"""The backfill's output files: Parquet partitioned by vgroup, row counts from the files'
footers, and the manifest written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Parquet codec: none, snappy, lz4 and zstd wrote 2M rows in 1.6-1.8 s alike here (the
# JVM's per-row cost dominates; docs/performance.md, Backfill); snappy is what every
# reader has.
COMPRESSION = "snappy"


def write(rows: DataFrame, out: Path, partition: str) -> None:
    """`rows` as Parquet under `out`, one directory per value of `partition`. An existing
    `out` must be empty (checked before): Spark then replaces it."""
    mode = "overwrite" if out.exists() else "errorifexists"
    (
        rows.write.mode(mode)
        .option("compression", COMPRESSION)
        .partitionBy(partition)
        .parquet(str(out))
    )


def row_counts(out: Path, partition: str) -> dict[int, int]:
    """Rows per partition value, from the Parquet footers alone."""
    counts: dict[int, int] = {}
    for folder in out.glob(f"{partition}=*"):
        value = int(folder.name.split("=", 1)[1])
        files = sorted(folder.glob("*.parquet"))
        counts[value] = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return counts


def write_text_atomic(path: Path, text: str) -> None:
    """`text` in `path`, complete or not at all (written aside, fsynced, renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
