"""`--metrics-port`: /metrics scraped over HTTP from a real server and parsed with
prometheus_client's own parser; the values checked against the work done (rows
written, polls, a consumer behind by a known number of rows, failed logins and calls)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer
from sqltopic.errors import AuthenticationFailed, TopicNotFound
from sqltopic.server.rpc.metrics import _histogram
from sqltopic.wal.stats import BUCKETS, Timings
from tests.client.support import config, drain, later_rows
from tests.live_server import POWER, ServerProcess

METRICS_LINE = "sqltopic metrics on "
# A scrape answers within this (it is one HTTP request on loopback).
SCRAPE_TIMEOUT_S = 30.0
WRITTEN = 12


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    """A server with --metrics-port 0, and its metrics URL (from its stdout)."""
    server = ServerProcess(tmp_path / "data", extra=("--metrics-port", "0"))
    try:
        server.wait_ready()
        (line,) = server.before_ready
        assert line.startswith(METRICS_LINE)
        yield server, line[len(METRICS_LINE) :].strip()
    finally:
        server.kill()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_figures_follow_the_work_done(metered: tuple[ServerProcess, str]) -> None:
    server, url = metered
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/metrics")
    with connect(server.address) as conn:
        conn.execute(POWER + "; CREATE TOPIC t AS SELECT * FROM power.meters")
        conn.execute("CREATE TABLE power.d1001 USING power.meters TAGS ('x', 1)")
        conn.execute(later_rows(1_700_000_000_000, WRITTEN))
        with pytest.raises(TopicNotFound):
            conn.execute("DROP TOPIC nosuch")
    with pytest.raises(AuthenticationFailed):
        connect(server.address, user="root", password="wrong")
    consumer = Consumer(config(server.address, "g"))
    try:
        consumer.subscribe(["t"])
        drain(consumer)
        consumer.commit()  # SHOW SUBSCRIPTIONS' position until its heartbeat reports one
        with connect(server.address) as conn:
            conn.execute(later_rows(1_700_000_001_000, 5))
        found = scrape(url)
    finally:
        consumer.close()
    assert found[("sqltopic_rows_written_total", (("database", "power"),))] == WRITTEN + 5
    assert found[("sqltopic_bytes_written_total", (("database", "power"),))] > 0
    appends = found[("sqltopic_wal_append_seconds_count", (("database", "power"),))]
    assert appends >= 2  # the two INSERTs at least (the DDL events too)
    assert (
        found[("sqltopic_wal_append_seconds_bucket", (("database", "power"), ("le", "+Inf")))]
        == appends
    )
    assert found[("sqltopic_polls_total", ())] >= 2
    assert found[("sqltopic_login_failures_total", ())] == 1
    assert found[("sqltopic_failed_calls_total", (("code", "UNAUTHENTICATED"),))] >= 1
    assert found[("sqltopic_failed_calls_total", (("code", "NOT_FOUND"),))] >= 1
    assert found[("sqltopic_consumers", (("state", "ready"),))] == 1
    assert found[("sqltopic_consumers_removed_total", ())] == 0
    assert found[("sqltopic_rebalance_assignment_changes_total", ())] >= 1
    assert ("sqltopic_rebalance_settle_seconds_count", ()) in found  # none waited here
    lag = {
        dict(labels)["vgroup"]: value
        for (name, labels), value in found.items()
        if name == "sqltopic_lag_rows" and dict(labels)["group"] == "g"
    }
    assert sorted(lag.values()) == [0, 5]  # d1001's vgroup is 5 rows behind
    assert ("process_cpu_seconds_total", ()) in found
    # what the server made while starting is out of the collector's sight
    assert found[("sqltopic_gc_frozen_objects", ())] > 10_000
    assert ("python_gc_collections_total", (("generation", "2"),)) in found


def test_a_port_in_use_is_one_line(tmp_path: Path, metered: tuple[ServerProcess, str]) -> None:
    _, url = metered
    port = url.rsplit(":", 1)[1].split("/")[0]
    other = ServerProcess(tmp_path / "other", extra=("--metrics-port", port))
    try:
        assert other.proc.wait(timeout=SCRAPE_TIMEOUT_S) == 1
    finally:
        other.kill()
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in other.stderr()


def test_timings_become_cumulative_buckets() -> None:
    fast, slow = Timings(), Timings()
    fast.observe(0.00001)  # below the first bound
    fast.observe(0.0003)
    slow.observe(5.0)  # above every bound
    buckets, total = _histogram([fast, slow])
    assert buckets[0] == (str(BUCKETS[0]), 1.0)
    assert buckets[-2] == (str(BUCKETS[-1]), 2.0)
    assert buckets[-1] == ("+Inf", 3.0)
    assert total == pytest.approx(5.00031)
    assert [count for _, count in buckets] == sorted(count for _, count in buckets)
