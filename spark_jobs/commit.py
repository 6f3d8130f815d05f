"""The backfill's output commit protocol, as Spark's file committers do it.

    job = OutputJob.start(out)               # out/_temporary/<job id>/
    path = job.attempt_file(piece)           # a task attempt writes here, alone
    job.commit_task(path, piece)             # atomic rename to the piece's one name
    job.commit(pieces)                       # every piece's file moved into out/
    job.abort()                              # or: nothing of the job left in out/

A task attempt writes its Parquet under a name of its own (an attempt id), so attempts of
one piece never write the same file; its commit renames that file to the piece's single
committed name, so whichever attempt of a retried or speculative task commits last,
exactly one file of the piece exists, complete (a rename is atomic). A failed attempt
leaves at most its own attempt file, which the job's commit or abort deletes with the
staging directory. Only the job's commit (on the driver, after every task succeeded)
moves committed files into `out/vgroup=N/`; the manifest is written after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqltopic.errors import BackfillError
from sqltopic.spark_jobs.pieces import Piece

STAGING = "_temporary"  # Spark's name for the same directory; readers skip `_` names
PARTITION = "vgroup"  # the Parquet partition column: directories vgroup=N


@dataclass(frozen=True)
class OutputJob:
    """One job's staging directory under the output (picklable: shipped to tasks)."""

    out: str
    job_id: str

    @classmethod
    def start(cls, out: Path) -> OutputJob:
        job = cls(str(out), uuid.uuid4().hex)
        job.staging.mkdir(parents=True)
        return job

    @property
    def staging(self) -> Path:
        return Path(self.out) / STAGING / self.job_id

    def attempt_file(self, piece: Piece) -> Path:
        """A new file name for one attempt of `piece`'s task."""
        return self.staging / f"attempt-{piece.vgroup}-{piece.seq}-{uuid.uuid4().hex}.tmp"

    def committed_name(self, piece: Piece) -> str:
        """The piece's one file, relative to the output: WAL order within a vgroup is
        the order of these names (then the rows' order inside each file)."""
        return f"{PARTITION}={piece.vgroup}/part-{piece.seq:06d}-v{piece.start}.parquet"

    def commit_task(self, attempt: Path, piece: Piece) -> str:
        """Make `attempt` the piece's committed file (replacing an earlier attempt's)."""
        name = self.committed_name(piece)
        target = self.staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(attempt, target)
        return name

    def commit(self, names: list[str]) -> None:
        """Move every committed file named into the output, then drop the staging."""
        missing = [n for n in names if not (self.staging / n).is_file()]
        if missing:
            raise BackfillError(
                f"the backfill's tasks reported {len(names)} files, but {len(missing)} are "
                f"not in {self.staging} (e.g. {missing[0]}): is the output directory on a "
                "filesystem every executor and the driver share? Run it again"
            )
        for name in names:
            target = Path(self.out) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self.staging / name, target)
        self.abort()

    def abort(self) -> None:
        """Remove the job's staging directory (and `_temporary` once empty)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        with contextlib.suppress(OSError):  # another job's, or already gone
            (Path(self.out) / STAGING).rmdir()
