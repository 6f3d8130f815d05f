"""The lag-in-time history the console charts: every `LAG_SAMPLE_INTERVAL_S` a thread
reads SHOW SUBSCRIPTIONS (as the server, every group) and keeps each (topic, group,
vgroup)'s `lag_ms` for the last `LAG_HISTORY_POINTS` samples.

The samples share one list of times; a series holds its values for the newest of them
(a series that appeared later is shorter), -1 where its row had no lag (its dnode did
not answer, no position yet). A series absent for a whole window is forgotten; at most
`MAX_LAG_SERIES` are kept, the rest are shown without a chart.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("sqltopic.server")

# Often enough for a chart that moves while one watches; one SHOW SUBSCRIPTIONS each.
LAG_SAMPLE_INTERVAL_S = 2.0
# Ten minutes at two seconds: the recent past of an incident (Prometheus keeps more).
LAG_HISTORY_POINTS = 300
# Series charted at most: 1,024 series of 300 values stay within ~10 MB of Python ints.
MAX_LAG_SERIES = 1024
# A value the sample had no lag for.
NO_LAG = -1

SeriesKey = tuple[str, str, int]  # topic, group, vgroup
# The rows of SHOW SUBSCRIPTIONS (as dicts by column name), read as the server.
Subscriptions = Callable[[], Iterable[dict[str, Any]]]
Clock = Callable[[], int]  # wall-clock ms


@dataclass(frozen=True)
class Series:
    topic: str
    group: str
    vgroup: int
    values: list[int]  # lag_ms, aligned with the newest len(values) times; NO_LAG: none


class LagHistory:
    """The samples. Thread-safe: the sampler adds, console requests read."""

    def __init__(self, points: int = LAG_HISTORY_POINTS, max_series: int = MAX_LAG_SERIES) -> None:
        self._points = points
        self._max_series = max_series
        self._times: deque[int] = deque(maxlen=points)
        self._series: dict[SeriesKey, deque[int]] = {}
        self._missing: dict[SeriesKey, int] = {}  # samples in a row without the series
        self.dropped = 0  # series not charted for MAX_LAG_SERIES, in the last sample
        self._lock = threading.Lock()

    def add(self, time_ms: int, rows: Iterable[dict[str, Any]]) -> None:
        """One sample: the SHOW SUBSCRIPTIONS rows read at `time_ms`."""
        seen: dict[SeriesKey, int] = {}
        for row in rows:
            lag = row.get("lag_ms")
            key = (row["topic_name"], row["consumer_group"], int(row["vgroup_id"]))
            seen[key] = NO_LAG if lag is None else int(lag)
        with self._lock:
            self._times.append(time_ms)
            dropped = 0
            for key, lag in seen.items():
                series = self._series.get(key)
                if series is None:
                    if len(self._series) >= self._max_series:
                        dropped += 1
                        continue
                    series = self._series[key] = deque(maxlen=self._points)
                series.append(lag)
                self._missing.pop(key, None)
            self._forget_absent(seen)
            self.dropped = dropped

    def _forget_absent(self, seen: dict[SeriesKey, int]) -> None:
        for key in [k for k in self._series if k not in seen]:
            self._series[key].append(NO_LAG)
            self._missing[key] = self._missing.get(key, 0) + 1
            if self._missing[key] >= self._points:
                del self._series[key], self._missing[key]

    def read(self, keep: Callable[[SeriesKey], bool]) -> tuple[list[int], list[Series]]:
        """The sample times and the series `keep` lets through, by key."""
        with self._lock:
            times = list(self._times)
            series = [
                Series(*key, list(values))
                for key, values in sorted(self._series.items()) if keep(key)
            ]  # fmt: skip
        return times, series


class LagSampler:
    """The thread that samples into a history until `stop`."""

    def __init__(
        self, history: LagHistory, subscriptions: Subscriptions, clock: Clock,
        interval_s: float = LAG_SAMPLE_INTERVAL_S,
    ) -> None:  # fmt: skip
        self._history = history
        self._subscriptions = subscriptions
        self._clock = clock
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqltopic-lag", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sample(self) -> None:
        """One sample now (the thread's step)."""
        self._history.add(self._clock(), self._subscriptions())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a failed sample leaves a gap, never ends the thread
                log.exception("console: a lag sample failed")
            self._stop.wait(self._interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
