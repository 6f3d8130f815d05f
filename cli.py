"""The `sqltopic` command line. It sits on top of every other layer.

`sqltopic server` serves a data directory over gRPC (docs/protocol.md). `sqltopic demo`
shows the embedded engine at work on a data directory: it creates the `power` database,
the `meters` super table and a topic, a producer INSERTs smart-meter rows, and a
consumer reads the topic back from each vnode as the rows arrive.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from sqltopic.errors import Error
from sqltopic.server.engine import Engine
from sqltopic.server.grpc_server import ServerConfig
from sqltopic.server.grpc_server import run as run_server
from sqltopic.server.topic_reader import TopicBlock

# How long the consumer waits for new versions before looking again: short enough to
# show rows promptly, long enough not to spin.
FOLLOW_WAIT_S = 0.2
TOPIC = "demo_overvoltage"
SETUP = f"""
CREATE DATABASE IF NOT EXISTS power VGROUPS 2 PRECISION 'ms' WAL_LEVEL 2;
USE power;
CREATE STABLE IF NOT EXISTS meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)
    TAGS (location VARCHAR(64), groupid INT);
CREATE TOPIC IF NOT EXISTS {TOPIC} AS
    SELECT ts, current, voltage, location, tbname FROM power.meters WHERE voltage > 225;
"""
# Where `server` takes the root password when --root-password is not given.
ROOT_PASSWORD_ENV = "SQLTOPIC_ROOT_PASSWORD"
DEFAULT_ROOT_PASSWORD = "taosdata"
LOCATIONS = ("California.SanFrancisco", "California.LosAngeles", "California.SanDiego")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqltopic", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="produce meter rows and consume a topic of them")
    demo.add_argument("--data", default="./sqltopic-data", help="data directory")
    demo.add_argument("--statements", type=int, default=20, help="INSERT statements to run")
    demo.add_argument("--rows", type=int, default=500, help="rows per statement")
    _add_server(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "server":
            return _server(args)
        return run_demo(Path(args.data), args.statements, args.rows)
    except (Error, OSError) as exc:
        print(f"sqltopic: {exc}", file=sys.stderr)
        return 1


def _add_server(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = sub.add_parser("server", help="serve a data directory over gRPC")
    server.add_argument("--data", default="./sqltopic-data", help="data directory")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on")
    server.add_argument("--port", type=int, default=6030, help="port to listen on")
    server.add_argument(
        "--root-password",
        default=os.environ.get(ROOT_PASSWORD_ENV, DEFAULT_ROOT_PASSWORD),
        help=f"password of user root (default: ${ROOT_PASSWORD_ENV} or taosdata)",
    )


def _server(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    data = Path(args.data)
    config = ServerConfig(data, args.host, args.port, args.root_password)

    def ready(address: str) -> None:
        print(f"sqltopic server listening on {address}, data {data}", flush=True)

    run_server(config, ready)
    return 0


def run_demo(data: Path, statements: int, rows: int) -> int:
    with Engine(data) as engine:
        engine.execute(SETUP)
        vgroups = engine.state.catalog.database("power").vgroups
        start = {v: engine.state.vnode(v).wal.next_version for v in vgroups}
        print(f"data directory {data}: database power, vgroups {list(vgroups)}, topic {TOPIC}")
        done = threading.Event()
        consumer = threading.Thread(target=_consume, args=(engine, start, done), daemon=True)
        consumer.start()
        began = time.perf_counter()
        for i in range(statements):
            engine.execute(_insert(i, rows))
        elapsed = time.perf_counter() - began
        done.set()
        consumer.join()
        total = statements * rows
        print(f"inserted {total:,} rows in {statements} statements at WAL_LEVEL 2: "
              f"{total / elapsed:,.0f} rows/s")  # fmt: skip
        counted = engine.execute("SELECT count(*) FROM power.meters").rows[0][0]
        print(f"SELECT count(*) FROM power.meters: {counted:,} rows retained")
    return 0


def _consume(engine: Engine, positions: dict[int, int], done: threading.Event) -> None:
    delivered = 0
    while True:
        progressed = False
        for vgroup, position in positions.items():
            items, next_version = engine.read_topic(TOPIC, vgroup, position, 10_000)
            positions[vgroup] = next_version
            progressed |= next_version != position
            for block in items:
                if isinstance(block, TopicBlock) and block.data.num_rows:
                    delivered += block.data.num_rows
                    first = block.data.slice(0, 1).to_pylist()[0]
                    print(f"  vgroup {vgroup} versions {block.first_version}..."
                          f"{block.last_version}: {block.data.num_rows} rows over 225 V, "
                          f"e.g. {first['tbname']} {first['voltage']} V")  # fmt: skip
        if not progressed:
            if done.is_set():
                print(f"topic {TOPIC} delivered {delivered:,} rows")
                return
            reader = engine.state.vnode(next(iter(positions))).reader()
            reader.wait_for(max(positions.values()), FOLLOW_WAIT_S)


def _insert(statement: int, rows: int) -> str:
    rng = random.Random(statement)
    table = f"d{1001 + statement % 4}"
    location = LOCATIONS[statement % len(LOCATIONS)]
    base = int(time.time() * 1000)
    values = " ".join(
        f"({base + i}, {10 + rng.random() * 3:.2f}, {rng.randint(215, 229)}, "
        f"{0.3 + rng.random() / 10:.3f})"
        for i in range(rows)
    )
    using = f"USING meters TAGS ('{location}', {statement % 4})"
    return f"INSERT INTO {table} {using} VALUES {values}"


if __name__ == "__main__":
    sys.exit(main())
