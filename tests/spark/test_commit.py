"""The backfill's output commit protocol (spark_jobs/commit.py), without Spark: attempts
of one piece never share a file, the last commit of a piece wins whole, the job's commit
moves exactly the committed files and removes the staging, an abort leaves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqltopic.errors import BackfillError
from sqltopic.spark_jobs.commit import STAGING, OutputJob
from sqltopic.spark_jobs.pieces import Piece

PIECE = Piece(vgroup=3, segment=1, start=120, end=240, entries=120, bytes=9_000, seq=2)
OTHER = Piece(vgroup=4, segment=1, start=1, end=50, entries=49, bytes=4_000, seq=0)


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_attempts_of_one_piece_write_apart_and_the_last_commit_wins(tmp_path: Path) -> None:
    job = OutputJob.start(tmp_path)
    first, second = job.attempt_file(PIECE), job.attempt_file(PIECE)
    assert first != second
    first.write_bytes(b"first attempt")
    second.write_bytes(b"second attempt")
    assert job.commit_task(first, PIECE) == job.commit_task(second, PIECE)
    name = job.committed_name(PIECE)
    assert name == "vgroup=3/part-000002-v120.parquet"
    assert (job.staging / name).read_bytes() == b"second attempt"
    assert not first.exists()
    assert not second.exists()


def test_the_job_commit_moves_committed_files_and_drops_failed_attempts(tmp_path: Path) -> None:
    job = OutputJob.start(tmp_path)
    done = job.attempt_file(PIECE)
    done.write_bytes(b"rows")
    name = job.commit_task(done, PIECE)
    job.attempt_file(OTHER).write_bytes(b"half a file")  # a failed attempt's leftover
    other = job.attempt_file(OTHER)
    other.write_bytes(b"rows too")
    other_name = job.commit_task(other, OTHER)

    job.commit([name, other_name])
    assert _files(tmp_path) == sorted([name, other_name])
    assert not (tmp_path / STAGING).exists()


def test_a_commit_missing_a_reported_file_fails_and_moves_nothing(tmp_path: Path) -> None:
    job = OutputJob.start(tmp_path)
    with pytest.raises(BackfillError, match=r"1 are not in .* every executor and the driver"):
        job.commit([job.committed_name(PIECE)])
    assert not (tmp_path / "vgroup=3").exists()


def test_an_abort_leaves_nothing_of_the_job(tmp_path: Path) -> None:
    job = OutputJob.start(tmp_path)
    attempt = job.attempt_file(PIECE)
    attempt.write_bytes(b"rows")
    job.commit_task(attempt, PIECE)
    job.abort()
    assert _files(tmp_path) == []
    assert not (tmp_path / STAGING).exists()


def test_two_jobs_on_one_output_do_not_share_staging(tmp_path: Path) -> None:
    one, two = OutputJob.start(tmp_path), OutputJob.start(tmp_path)
    assert one.staging != two.staging
    one.abort()
    assert two.staging.is_dir()  # the other job's staging stays
