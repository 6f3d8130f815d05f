"""`sqltopic demo`: a server, a producer, a topic and a consumer, so a newcomer sees it
work in one command.

It starts a `sqltopic server` child on a data directory (a temporary one by default,
removed afterwards), creates database `power`, super table `meters` and topic
`demo_overvoltage` (rows over 225 V), and then a producer thread writes smart-meter rows
with `Connection.write` while a `Consumer` (a new group, from earliest) prints what the
topic delivers as it arrives. When the producer is done and the consumer has caught up,
everything stops and a summary compares the rows delivered with `SELECT count(*)` over
the same WHERE: they are equal (exit 0) or the demo says they are not (exit 1).
"""

from __future__ import annotations

import argparse
import random
import secrets
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from sqltopic.cli.connect import ServerOptions, open_connection, positive_int
from sqltopic.cli.format import counted
from sqltopic.cli.spawn import ServerChild
from sqltopic.cli.stop import StopRequest, stop_requests
from sqltopic.client.connection import Connection
from sqltopic.errors import Error, require_extra

if TYPE_CHECKING:
    from sqltopic.client.consumer import Consumer
    from sqltopic.client.message import Message

TOPIC = "demo_overvoltage"
WHERE = "voltage > 225"
SETUP = f"""
CREATE DATABASE IF NOT EXISTS power VGROUPS 2 PRECISION 'ms' WAL_LEVEL 2;
USE power;
CREATE STABLE IF NOT EXISTS meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);
CREATE TOPIC IF NOT EXISTS {TOPIC} AS
    SELECT ts, current, voltage, location, tbname FROM power.meters WHERE {WHERE};
"""
ROOT_PASSWORD = "taosdata"
LOCATIONS = ("California.SanFrancisco", "California.LosAngeles", "California.SanDiego")
METERS = 4
DEFAULT_ROWS = 10_000
# The producer writes in this many batches, pausing between them, so that rows arrive
# over a few seconds and the consumer is seen printing them live.
BATCHES = 20
PAUSE_S = 0.2
# How long the consumer may take to deliver the last rows once the producer is done.
DRAIN_DEADLINE_S = 60.0
# One consumer poll's wait: short, so the loop notices that the producer finished.
POLL_WAIT_S = 0.5


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "demo",
        help="start a server, produce meter rows and consume a topic of them",
        description="Start a server of its own, create database power, super table meters "
        "and topic demo_overvoltage, write meter rows while a consumer prints what the topic "
        "delivers, then compare the rows delivered with SELECT count(*).",
    )
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="data directory (default: a temporary one, removed after)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port of the demo's server (default: any free one)"
    )
    parser.add_argument(
        "--rows",
        type=positive_int,
        default=DEFAULT_ROWS,
        metavar="N",
        help=f"rows to produce (default: {DEFAULT_ROWS:,})",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    require_extra("server", "sqltopic demo")  # it starts a server of its own
    with ExitStack() as stack:
        data: Path = args.data or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="sqltopic-demo-"))
        )
        server = stack.enter_context(ServerChild(data, args.port, ROOT_PASSWORD))
        address = server.start()
        options = ServerOptions(address, "root", ROOT_PASSWORD)
        print(f"server {address} on data directory {data}")
        summary = demo(options, args.rows)
    print(f"server stopped\n{summary.text()}")
    return 0 if summary.delivered == summary.selected else 1


@dataclass
class Summary:
    produced: int = 0
    writes: int = 0
    produce_s: float = 0.0
    delivered: int = 0
    selected: int = 0

    def text(self) -> str:
        verdict = "equal" if self.delivered == self.selected else "NOT EQUAL"
        return (
            f"produced {self.produced:,} rows in {self.writes} writes over "
            f"{self.produce_s:.1f} s\n"
            f"topic {TOPIC} delivered {self.delivered:,} rows\n"
            f"SELECT count(*) FROM power.meters WHERE {WHERE}: {self.selected:,} rows "
            f"({verdict} to the rows delivered)"
        )


def demo(options: ServerOptions, rows: int) -> Summary:
    # imported here, so that the other commands (`server` above all) never load it
    from sqltopic.client.consumer import Consumer  # noqa: PLC0415

    with open_connection(options) as conn:
        conn.execute(SETUP)
        print(f"database power (2 vgroups), super table meters, topic {TOPIC}: rows {WHERE}")
        summary = Summary()
        producer = Producer(options, rows, summary)
        with stop_requests() as stop, Consumer(_consumer_config(options)) as consumer:
            consumer.subscribe([TOPIC])
            producer.start()
            try:
                _consume(consumer, producer, summary, conn, stop)
            finally:
                producer.stop()
        summary.selected = _count(conn)
    return summary


def _consumer_config(options: ServerOptions) -> dict[str, str]:
    return {
        "server": options.server,
        "user": options.user,
        "password": options.password,
        "group.id": f"demo-{secrets.token_hex(4)}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
    }


def _count(conn: Connection) -> int:
    return int(conn.execute(f"SELECT count(*) FROM power.meters WHERE {WHERE}").rows[0][0])


def _consume(
    consumer: Consumer, producer: Producer, summary: Summary, conn: Connection, stop: StopRequest
) -> None:
    """Print messages until the producer is done and every matching row came."""
    expected: int | None = None
    deadline = 0.0
    while expected is None or summary.delivered < expected:
        if stop.requested:  # raised here, between calls: everything closes in order
            raise KeyboardInterrupt
        if expected is None and producer.finished():
            producer.check()
            expected = _count(conn)
            deadline = time.monotonic() + DRAIN_DEADLINE_S
        elif expected is not None and time.monotonic() > deadline:
            raise Error(
                f"the topic delivered {summary.delivered:,} of {expected:,} rows within "
                f"{DRAIN_DEADLINE_S:.0f} s after the producer finished"
            )
        msg = consumer.poll(POLL_WAIT_S)
        if msg is not None and msg.kind == "data":
            summary.delivered += msg.row_count
            print(_describe(msg), flush=True)


def _describe(msg: Message) -> str:
    rows = msg.rows()
    first = dict(zip(msg.blocks[0].data.column_names, rows[0], strict=True)) if rows else {}
    example = f", e.g. {first.get('tbname')} {first.get('voltage')} V" if first else ""
    return (
        f"  vgroup {msg.vgroup} versions {msg.offset}..{msg.end_offset - 1}: "
        f"{counted(msg.row_count, 'row')} over 225 V{example}"
    )


class Producer:
    """Writes `rows` meter rows in `BATCHES` Arrow writes, on a thread and a connection
    of its own, counting them in `summary`."""

    def __init__(self, options: ServerOptions, rows: int, summary: Summary) -> None:
        self.options = options
        self.rows = rows
        self.summary = summary
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self._thread.start()

    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def check(self) -> None:
        """Raise the producer's error, if it failed."""
        if self._error is not None:
            raise Error(f"the producer failed: {self._error}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        try:
            with open_connection(self.options) as conn:
                began = time.perf_counter()
                base = int(time.time() * 1000)
                size = -(-self.rows // BATCHES)
                for start in range(0, self.rows, size):
                    if self._stop.wait(PAUSE_S if start else 0):
                        return
                    batch = meter_rows(base, start, min(size, self.rows - start))
                    self.summary.produced += conn.write("power.meters", batch)
                    self.summary.writes += 1
                    self.summary.produce_s = time.perf_counter() - began
        except BaseException as exc:  # reported by check() in the main thread
            self._error = exc


def meter_rows(base_ms: int, start: int, count: int) -> pa.Table:
    """Rows `start`..`start + count - 1` of the demo: 4 meters, 215..229 V."""
    rng = random.Random(start)
    numbers = range(start, start + count)
    return pa.table(
        {
            "tbname": [f"d{1001 + i % METERS}" for i in numbers],
            "ts": pa.array([base_ms + i for i in numbers], pa.timestamp("ms")),
            "current": pa.array([10 + rng.random() * 3 for _ in numbers], pa.float32()),
            "voltage": pa.array([rng.randint(215, 229) for _ in numbers], pa.int32()),
            "phase": pa.array([0.3 + rng.random() / 10 for _ in numbers], pa.float32()),
            "location": [LOCATIONS[i % METERS % len(LOCATIONS)] for i in numbers],
            "groupid": pa.array([i % METERS for i in numbers], pa.int32()),
        }
    )
