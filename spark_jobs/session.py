"""Starting Spark: Java found first, the environment PySpark needs, and the settings the
backfill relies on (UTC, Parquet TIMESTAMP_MICROS, Arrow batches, no UI).

PySpark starts a JVM by running `$JAVA_HOME/bin/java` (else `java` on PATH); without one
it fails late with an obscure gateway error, so `find_java` checks before anything starts.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sqltopic.errors import JavaNotFound

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME = "sqltopic-backfill"
# Attempts of a task in local mode before the job fails: Spark's own default on a cluster
# (spark.task.maxFailures), which local mode otherwise sets to one.
TASK_ATTEMPTS = 4
# Rows per Arrow batch between the JVM and Python workers: large batches amortise the
# per-batch cost of the Arrow path (the default, 10,000, costs ~15 % at 20M rows).
ARROW_BATCH_ROWS = 65_536

# Settings every session the backfill runs on needs. Timestamps: TDengine's are instants
# (UTC); Spark's default Parquet timestamp is INT96, which reads back as naive
# timestamp[ns] elsewhere, so write TIMESTAMP_MICROS.
REQUIRED_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
# Settings of a session we start ourselves (a user's own session keeps its own).
OWN_CONF: dict[str, str] = {
    **REQUIRED_CONF,
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # the job writes each vgroup's rows once, with no shuffle
    "spark.sql.shuffle.partitions": "4",
    # the source's option `pushdown` (filters on _vgroup and _version) needs it
    "spark.sql.python.filterPushdown.enabled": "true",
}


def find_java() -> Path:
    """The `java` PySpark would start: `$JAVA_HOME/bin/java`, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if os.access(java, os.X_OK):
            return java
        raise JavaNotFound(
            f"JAVA_HOME is {home}, but {java} is not an executable: point JAVA_HOME at a "
            "Java 17 installation (e.g. /usr/lib/jvm/java-17-openjdk-amd64), or unset it to "
            "use `java` on PATH"
        )
    found = shutil.which("java")
    if found is None:
        raise JavaNotFound(
            "Spark needs Java 17, and no `java` is on PATH and JAVA_HOME is not set: install "
            "it (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"
        )
    return Path(found)


def python_environment() -> None:
    """Workers must run this interpreter (the system python3 lacks pyarrow), and bind to
    the loopback address unless told otherwise."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def start_session(master: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession on `master` with the backfill's settings; JavaNotFound first."""
    find_java()
    python_environment()
    from pyspark.sql import SparkSession  # noqa: PLC0415 - pyspark is heavy to import

    builder = SparkSession.builder.master(with_retries(master)).appName(APP_NAME)
    for key, value in {**OWN_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def with_retries(master: str) -> str:
    """`master`, in local mode with TASK_ATTEMPTS attempts per task: `local[N]` (and
    `local`, `local[*]`) gives a task one attempt, so a task failing once would fail the
    whole job, where a cluster retries it. `local[N,F]` is kept as given."""
    found = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master.strip())
    if found is None:
        return master
    return f"local[{found.group(1) or 1},{TASK_ATTEMPTS}]"


def apply_required(spark: SparkSession) -> None:
    """Set what the backfill needs on a session it was given (runtime SQL settings)."""
    for key, value in REQUIRED_CONF.items():
        spark.conf.set(key, value)
