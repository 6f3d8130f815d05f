"""The backfill command's terminal output: the progress line and the Java exception
picked out of Spark's log."""

from __future__ import annotations

import io
import tempfile

from sqltopic.cli.spark_log import jvm_cause
from sqltopic.cli.stage_bar import stage_line


def test_the_stage_line_shows_tasks_and_rows() -> None:
    assert stage_line("snapshot", 0, 0, 0) == "snapshot:"
    line = stage_line("reading WAL, writing Parquet", 0, 3, 8)
    assert line == "reading WAL, writing Parquet: [###########-------------------] 3/8 pieces"
    assert stage_line("done", 1234, 8, 8).endswith("8/8 pieces 1,234 rows")
    assert stage_line("done", 0, 0, 0) == "done: 0 rows"


def test_the_first_java_exception_explains_a_failed_job() -> None:
    with tempfile.TemporaryFile("w+") as log:
        log.write("INFO starting\n")
        log.write("ERROR org.apache.spark.SparkException: Job aborted due to stage failure\n")
        log.write("Caused by: java.io.IOException: No space left on device\n")
        assert jvm_cause(log) == " (SparkException: Job aborted due to stage failure)"
    assert jvm_cause(io.StringIO("nothing to see\n")) == ""
