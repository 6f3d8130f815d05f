"""Spark: a PySpark data source over WAL segments and the topic backfill job.
Uses `wal` and `sql`."""
