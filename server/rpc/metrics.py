"""`--metrics-port PORT`: the process's figures for Prometheus at `/metrics`, on an HTTP
port of their own (loopback unless `--metrics-host` says otherwise), served by
`prometheus_client` in a thread.

Nothing is counted for Prometheus on the hot paths: the server keeps plain counters
where the work happens (a WAL's `stats`, the polls of the Vnode service, failed calls at
the RPC boundary, failed logins, the coordinator's assignment changes) and a collector
reads them at scrape time, with the gauges (held polls, consumers by state, lag per
subscription) computed then. docs/operations.md §9.4 lists every metric.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector

from sqltopic.errors import ConfigError
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.rpc.rpc import FAILED_CALLS
from sqltopic.server.rpc.vnode_service import VnodeService
from sqltopic.wal.stats import BUCKETS, Timings, WalStats

log = logging.getLogger("sqltopic.server")

PREFIX = "sqltopic"


@dataclass(frozen=True)
class Sources:
    """What the collector reads: the engine (WALs, and on an mnode or server the groups
    through SHOW SUBSCRIPTIONS), the sessions (failed logins), the Vnode service (polls)."""

    engine: Engine
    sessions: Sessions
    vnodes: VnodeService
    groups: bool  # the groups are this process's (a server or an mnode, not a dnode)


class ServerCollector:
    """The server's metrics, read from `sources` at each scrape."""

    def __init__(self, sources: Sources) -> None:
        self._s = sources

    def collect(self) -> Iterator[Metric]:
        yield from self._written()
        yield from self._calls()
        yield GaugeMetricFamily(
            f"{PREFIX}_gc_frozen_objects",
            "Objects the garbage collector never scans (made while the server started)",
            value=gc.get_freeze_count(),
        )
        if self._s.groups:
            yield from self._groups()

    def _written(self) -> Iterator[Metric]:
        rows = CounterMetricFamily(
            f"{PREFIX}_rows_written", "Data rows appended to the WALs", labels=["database"]
        )
        data = CounterMetricFamily(
            f"{PREFIX}_bytes_written", "Entry bytes appended to the WALs", labels=["database"]
        )
        appends = HistogramMetricFamily(
            f"{PREFIX}_wal_append_seconds",
            "Time of one WAL append call, its fsync included at WAL_LEVEL 2",
            labels=["database"],
        )
        fsyncs = HistogramMetricFamily(
            f"{PREFIX}_wal_fsync_seconds", "Time of one WAL fsync", labels=["database"]
        )
        by_db: dict[str, list[WalStats]] = {}
        for db, _, wal in self._s.engine.wal_stats():
            by_db.setdefault(db, []).append(wal)
        for db, wals in sorted(by_db.items()):
            rows.add_metric([db], sum(w.rows for w in wals))
            data.add_metric([db], sum(w.bytes for w in wals))
            appends.add_metric([db], *_histogram([w.appends for w in wals]))
            fsyncs.add_metric([db], *_histogram([w.fsyncs for w in wals]))
        yield from (rows, data, appends, fsyncs)

    def _calls(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            f"{PREFIX}_polls", "Polls started (Poll, Fetch and each poll on a Consume stream)",
            value=self._s.vnodes.polls,
        )  # fmt: skip
        yield GaugeMetricFamily(
            f"{PREFIX}_held_polls", "Polls waiting for rows now, in the shared passes",
            value=self._s.vnodes.held_polls,
        )  # fmt: skip
        failed = CounterMetricFamily(
            f"{PREFIX}_failed_calls", "Calls ended with an error, by gRPC status code",
            labels=["code"],
        )  # fmt: skip
        for code, count in sorted(Counter(FAILED_CALLS).items()):
            failed.add_metric([code], count)
        yield failed
        yield CounterMetricFamily(
            f"{PREFIX}_login_failures", "Logins refused for a wrong user or password",
            value=self._s.sessions.login_failures,
        )  # fmt: skip

    def _groups(self) -> Iterator[Metric]:
        engine = self._s.engine
        coordinator = engine.coordinator
        consumers = GaugeMetricFamily(f"{PREFIX}_consumers", "Consumers by state", labels=["state"])
        changes = removed = 0
        if coordinator is not None:
            members, _ = coordinator.snapshot()
            states = Counter(m.status for m in members)
            for state in ("ready", "rebalancing"):
                consumers.add_metric([state], states.get(state, 0))
            changes, removed = coordinator.assignment_changes, coordinator.removed
        yield consumers
        yield CounterMetricFamily(
            f"{PREFIX}_consumers_removed",
            "Consumers removed for missing heartbeats or polls (session.timeout.ms, "
            "max.poll.interval.ms)",
            value=removed,
        )
        settle = HistogramMetricFamily(
            f"{PREFIX}_rebalance_settle_seconds",
            "How long a consumer waited in `rebalancing` for vgroups their holders let go",
        )
        if coordinator is not None:
            settle.add_metric([], *_histogram([coordinator.settles]))
        yield settle
        yield CounterMetricFamily(
            f"{PREFIX}_rebalance_assignment_changes",
            "Consumers' assignments changed by rebalances (one per consumer and topic)",
            value=changes,
        )  # fmt: skip
        yield from _subscriptions(engine.execute("SHOW SUBSCRIPTIONS").table.to_pylist())


def _subscriptions(rows: Iterable[dict[str, Any]]) -> Iterator[Metric]:
    """Rows delivered per (topic, group), lag in rows and ms per (topic, group, vgroup)."""
    delivered = CounterMetricFamily(
        f"{PREFIX}_rows_delivered", "Rows consumers of the group reported delivering",
        labels=["topic", "group"],
    )  # fmt: skip
    lag_rows = GaugeMetricFamily(
        f"{PREFIX}_lag_rows", "Data rows in the WAL from the group's position to the end",
        labels=["topic", "group", "vgroup"],
    )  # fmt: skip
    lag_ms = GaugeMetricFamily(
        f"{PREFIX}_lag_ms",
        "Milliseconds since the first entry the group has not read was written",
        labels=["topic", "group", "vgroup"],
    )
    totals: Counter[tuple[str, str]] = Counter()
    for row in rows:
        key = (row["topic_name"], row["consumer_group"])
        totals[key] += row["rows"] or 0
        labels = [*key, str(row["vgroup_id"])]
        if row["lag_rows"] is not None:
            lag_rows.add_metric(labels, row["lag_rows"])
            lag_ms.add_metric(labels, row["lag_ms"])
    for (topic, group), count in sorted(totals.items()):
        delivered.add_metric([topic, group], count)
    yield from (delivered, lag_rows, lag_ms)


def _histogram(timings: list[Timings]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative buckets (Prometheus' `le` bounds, +Inf last) and the sum, of several
    timings with the same bounds together."""
    bounds = timings[0].buckets if timings else BUCKETS
    counts = [sum(t.counts[i] for t in timings) for i in range(len(bounds) + 1)]
    out, running = [], 0
    for bound, count in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        running += count
        out.append((bound, float(running)))
    return out, sum(t.total for t in timings)


class MetricsServer:
    """The HTTP endpoint, started by `start` and stopped by `stop`."""

    def __init__(self, host: str, port: int, sources: Sources) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(ServerCollector(sources))
        self.registry.register(ProcessCollector(registry=None))
        GCCollector(registry=self.registry)  # collections by generation (registers itself)
        self._host, self._port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Listen; the address it listens on (`host:port`, the bound port for 0)."""
        try:
            self._server, self._thread = start_http_server(
                self._port, addr=self._host, registry=self.registry
            )
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port: cannot listen on {self._host}:{self._port}: "
                f"{exc.strerror or exc}; choose another port"
            ) from None
        port = self._server.server_address[1]
        return f"{self._host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def start_metrics(where: tuple[str, int] | None, sources: Sources) -> MetricsServer | None:
    """The endpoint of `--metrics-port` (None: not asked for), started, its address
    printed on stdout (`sqltopic metrics on http://HOST:PORT/metrics`) before the
    process's ready line."""
    if where is None:
        return None
    metrics = MetricsServer(where[0], where[1], sources)
    address = metrics.start()
    print(f"sqltopic metrics on http://{address}/metrics", flush=True)
    return metrics
