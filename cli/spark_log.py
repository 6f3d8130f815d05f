"""Spark's own output while `sqltopic backfill` runs its job: set aside in a temporary
file (the terminal shows only the progress bar), and the Java exception that explains a
failure picked out of it for the one-line error."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import TextIO

# A Java exception's line in the JVM's output: `... org.apache.spark.SparkException: msg`.
_JAVA_EXCEPTION = re.compile(
    r"(?:[a-z_$][\w$]*\.)+(?P<name>\w*(?:Exception|Error)): (?P<message>.+)"
)


@contextlib.contextmanager
def jvm_output_aside() -> Iterator[tuple[TextIO, TextIO]]:
    """Spark's JVM and its Python workers write their logs and stack traces to the stderr
    they inherit when started. While the job runs, stderr (fd 2) is an unnamed temporary
    file, so the terminal shows only the progress bar and a one-line error; yields that
    file and a stream on the real stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with (
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log,
            os.fdopen(os.dup(saved), "w", encoding="utf-8") as terminal,
        ):
            os.dup2(log.fileno(), 2)
            try:
                yield log, terminal
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def jvm_cause(log: TextIO) -> str:
    """` (SparkException: what it said)`: the first Java exception in the JVM's output."""
    log.flush()
    log.seek(0)
    for line in log:
        found = _JAVA_EXCEPTION.search(line)
        if found:
            return f" ({found['name']}: {found['message'].strip()})"
    return ""
