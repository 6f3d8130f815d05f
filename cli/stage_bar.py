"""The backfill's progress line: its stage, the WAL pieces done (a Spark task each) and the
rows written so far."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TextIO

from sqltopic.cli.format import counted
from sqltopic.cli.progress import BAR_WIDTH, REDRAW_S, TerminalLine

if TYPE_CHECKING:
    from sqltopic.spark_jobs.backfill import BackfillProgress


class StageBar(TerminalLine):
    """The stage, Spark's tasks done and the rows written, on one line redrawn at most
    every REDRAW_S (a new stage at once); only when `stream` is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.shown = ""

    def stage(self, name: str) -> None:
        """One of the command's own stages (checks, snapshot, hand-off)."""
        self._draw(name, stage_line(name, 0, 0, 0))

    def report(self, progress: BackfillProgress) -> None:
        """The job's progress callback (called from Spark's watcher thread too)."""
        p = progress
        self._draw(p.stage, stage_line(p.stage, p.rows, p.tasks_done, p.tasks))

    def _draw(self, stage: str, text: str) -> None:
        now = time.monotonic()
        fresh = not self.shown.startswith(stage + ":")
        if not self.enabled or text == self.shown or (not fresh and now - self._last < REDRAW_S):
            return
        self.shown = text
        self._show(text)


def stage_line(stage: str, rows: int, tasks_done: int, tasks: int) -> str:
    """`evaluating the topic, writing Parquet: [#####---] 3/8 pieces 1,234 rows`,
    `done: 1,234 rows`."""
    text = f"{stage}:"
    if tasks:
        filled = BAR_WIDTH * min(tasks_done, tasks) // tasks
        text += f" [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {tasks_done}/{tasks} pieces"
    if rows or stage == "done":
        text += f" {counted(rows, 'row')}"
    return text
