"""Progress of a backfill: the stage, and rows written once they are known; while Spark
runs, the tasks done out of all (one per WAL piece), polled from its status tracker."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# How often the tracker is polled: a terminal bar needs no more than a few redraws a second.
POLL_S = 0.5


@dataclass(frozen=True)
class BackfillProgress:
    """`stage` (e.g. "planning", "evaluating the topic, writing Parquet", "done");
    `rows` written so far (the live engine counts them as its tasks finish; the Spark SQL
    one knows them at "done"); `tasks_done` of `tasks` Spark tasks (one per WAL piece)
    while Spark runs."""

    stage: str
    rows: int
    tasks_done: int = 0
    tasks: int = 0


class ProgressWatch:
    """Reports the tasks of the Spark jobs run inside it, and the rows `rows()` counts
    (the tasks finished so far), every `POLL_S`."""

    def __init__(
        self, spark: SparkSession, report: Callable[[BackfillProgress], None], stage: str,
        rows: Callable[[], int] = lambda: 0,
    ) -> None:  # fmt: skip
        self._sc = spark.sparkContext
        self._report = report
        self._stage = stage
        self._rows = rows
        self._group = f"sqltopic-backfill-{uuid.uuid4().hex}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ProgressWatch:
        self._sc.setJobGroup(self._group, self._stage)
        self._report(BackfillProgress(self._stage, 0))
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        if kind is None:  # the stage's last figures: every task done
            self._report_now()
        self._sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self._report_now()

    def _report_now(self) -> None:
        done, total = self._tasks()
        self._report(BackfillProgress(self._stage, self._rows(), done, total))

    def _tasks(self) -> tuple[int, int]:
        tracker = self._sc.statusTracker()
        done = total = 0
        for job in tracker.getJobIdsForGroup(self._group):
            info = tracker.getJobInfo(job)
            for stage_id in info.stageIds if info is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total
