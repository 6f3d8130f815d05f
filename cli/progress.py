"""A one-line progress bar on stderr for long work (`sqltopic load`).

It draws only when stderr is a terminal, so logs and pipes never see carriage returns,
and redraws at most every `REDRAW_S` seconds, so a fast loop does not spend its time
printing.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from sqltopic.cli.format import counted

# Often enough to look alive, rarely enough to cost nothing.
REDRAW_S = 0.1
BAR_WIDTH = 30
KIB = 1024
MIB = 1024 * KIB


class TerminalLine:
    """One line of `stream`, redrawn in place while it is a terminal; `close()` ends it."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self._last = 0.0
        self._drawn = False

    def _show(self, text: str) -> None:
        self._last = time.monotonic()
        self.stream.write(f"\r\x1b[K{text}")  # to the line's start, clear it, draw
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the bar's line (if one was drawn)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()


class Progress(TerminalLine):
    """`update(done_bytes, rows)` as the work goes, `close()` at the end."""

    def __init__(self, total_bytes: int, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self.total = max(total_bytes, 1)

    def update(self, done_bytes: int, rows: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < REDRAW_S):
            return
        self._show(line(done_bytes, self.total, rows))


def line(done_bytes: int, total_bytes: int, rows: int) -> str:
    """`[#######-------]  45% 12.3/27.1 MiB 1,234,567 rows`."""
    share = min(max(done_bytes / max(total_bytes, 1), 0.0), 1.0)
    filled = int(share * BAR_WIDTH)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    unit, scale = ("MiB", MIB) if total_bytes >= MIB else ("KiB", KIB)
    size = f"{done_bytes / scale:.1f}/{total_bytes / scale:.1f} {unit}"
    return f"[{bar}] {share:4.0%} {size} {counted(rows, 'row')}"
