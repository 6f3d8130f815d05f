"""The console's lag history (no server): samples share their times, a new series is
shorter, a missing value is NO_LAG, an absent series is forgotten after a whole window,
at most max_series are kept; the sampler's thread samples until stopped."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sqltopic.server.console.lag_history import NO_LAG, LagHistory, LagSampler, SeriesKey


def row(topic: str, group: str, vgroup: int, lag_ms: int | None) -> dict[str, Any]:
    return {"topic_name": topic, "consumer_group": group, "vgroup_id": vgroup, "lag_ms": lag_ms}


def everything(key: SeriesKey) -> bool:
    return True


def values(history: LagHistory) -> dict[SeriesKey, list[int]]:
    return {(s.topic, s.group, s.vgroup): s.values for s in history.read(everything)[1]}


def test_series_share_the_sample_times_and_start_when_they_appear() -> None:
    history = LagHistory(points=4)
    history.add(1000, [row("t", "g", 1, 0)])
    history.add(3000, [row("t", "g", 1, 5), row("t", "g", 2, None)])
    history.add(5000, [row("t", "g", 1, 7), row("t", "g", 2, 40)])
    times, _ = history.read(everything)
    assert times == [1000, 3000, 5000]
    assert values(history) == {("t", "g", 1): [0, 5, 7], ("t", "g", 2): [NO_LAG, 40]}


def test_the_window_slides_and_an_absent_series_is_forgotten_after_it() -> None:
    history = LagHistory(points=3)
    history.add(1, [row("t", "g", 1, 10), row("t", "h", 1, 20)])
    for time_ms in (2, 3):
        history.add(time_ms, [row("t", "g", 1, 10 + time_ms)])
    assert values(history) == {("t", "g", 1): [10, 12, 13], ("t", "h", 1): [20, NO_LAG, NO_LAG]}
    history.add(4, [row("t", "g", 1, 14)])
    assert history.read(everything)[0] == [2, 3, 4]
    assert values(history) == {("t", "g", 1): [12, 13, 14]}  # h absent for a whole window


def test_series_beyond_the_bound_are_not_charted() -> None:
    history = LagHistory(points=3, max_series=2)
    history.add(1, [row("t", "g", v, v) for v in (1, 2, 3)])
    assert set(values(history)) == {("t", "g", 1), ("t", "g", 2)}
    assert history.dropped == 1


def test_read_keeps_only_what_the_filter_lets_through() -> None:
    history = LagHistory()
    history.add(1, [row("t", "g", 1, 1), row("u", "g", 1, 2)])
    _, series = history.read(lambda key: key[0] == "u")
    assert [(s.topic, s.values) for s in series] == [("u", [2])]


def test_the_sampler_samples_until_stopped_and_survives_a_failed_sample() -> None:
    history = LagHistory()
    calls = 0
    third = threading.Event()

    def subscriptions() -> list[dict[str, Any]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a dnode went away")
        if calls >= 3:
            third.set()
        return [row("t", "g", 1, calls)]

    sampler = LagSampler(history, subscriptions, lambda: calls, interval_s=0.01)
    sampler.start()
    try:
        assert third.wait(timeout=30)
    finally:
        sampler.stop()
    times, series = history.read(everything)
    assert len(times) >= 2
    assert series[0].values[:2] == [2, 3]  # the failed sample left a gap, nothing else


@pytest.mark.parametrize("lag", [None, 0, 123])
def test_a_single_sample_reads_back(lag: int | None) -> None:
    history = LagHistory()
    history.add(5, [row("t", "g", 3, lag)])
    assert values(history) == {("t", "g", 3): [NO_LAG if lag is None else lag]}
