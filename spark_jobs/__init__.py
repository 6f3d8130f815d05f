"""Spark: a PySpark data source over WAL segments and the topic backfill job.
Uses `wal` and `sql`.

`register(spark)` adds the `sqltopic_wal` data source (spark_jobs/source.py) and the
`sqltopic` streaming source (spark_jobs/stream.py) to a session; `backfill` holds the
job (`prepare`, `local_ends`, `run_backfill`). pyspark is imported only by the modules
that need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("sqltopic_wal")` and `spark.readStream.format("sqltopic")`
    available in `spark`."""
    from sqltopic.spark_jobs.source import register as _register  # noqa: PLC0415
    from sqltopic.spark_jobs.stream import register as _register_stream  # noqa: PLC0415

    _register(spark)
    _register_stream(spark)
