"""Shared groups under crashes: a consumer SIGKILLed while holding leases loses them to
the others when they expire, and a server SIGKILLed and restarted keeps every
acknowledgement that returned, delivering again only the rows not acknowledged."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message
from tests.client.support import (
    DEADLINE_S,
    METERS,
    SELECT,
    TOPIC,
    config,
    keyed_rows,
    later_rows,
)
from tests.live_server import POWER, ServerProcess, once_answering

Row = tuple[Any, ...]
# A lease much shorter than the session timeout (60 s below): the rows come back by
# lease expiry, not because the consumer was removed.
ACK_TIMEOUT_MS = 1_000
HOLDER = """
import sys
from sqltopic.client.consumer import Consumer
config = {"server": sys.argv[1], "group.id": "s", "group.type": sys.argv[4],
          "ack.timeout.ms": sys.argv[2], "session.timeout.ms": sys.argv[5],
          "heartbeat.interval.ms": "1000", "max.poll.rows": sys.argv[6],
          "auto.offset.reset": "earliest", "enable.auto.commit": "false",
          "fetch.max.wait.ms": "100"}
consumer = Consumer(config)
consumer.subscribe([sys.argv[7]])
held = 0
while held < int(sys.argv[3]):
    message = consumer.poll(0.5)
    held += message.row_count if message is not None else 0
print("holding", held, flush=True)
sys.stdin.read()  # until killed
"""


def _take(
    consumer: Consumer, wanted: int, ack: bool = False, within: float = DEADLINE_S
) -> list[Message]:
    """Messages until `wanted` rows came; with `ack`, each acknowledged as it comes (a
    lease of ACK_TIMEOUT_MS must not run out while the rest arrive on a slow machine)."""
    got: list[Message] = []
    deadline = time.monotonic() + within
    while sum(m.row_count for m in got) < wanted:
        assert time.monotonic() < deadline, f"{sum(m.row_count for m in got)} of {wanted} rows"
        message = consumer.poll(0.5)
        if message is not None:
            got.append(message)
            if ack:
                assert consumer.ack(message) == message.row_count
    return got


def _rows(messages: list[Message]) -> Counter[Row]:
    return Counter(row for m in messages for row in m.rows())


def test_a_killed_consumers_leases_go_to_the_others_when_they_expire(
    power: Any, server: ServerProcess
) -> None:
    everything = Counter(power.execute(SELECT).rows)
    total = sum(everything.values())
    args = [sys.executable, "-c", HOLDER, server.address, str(ACK_TIMEOUT_MS), str(total),
            "shared", "60000", "100000", "overvoltage"]  # fmt: skip
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["holding", str(total)]
        group = config(server.address, "s", group_type="shared", ack_timeout_ms=ACK_TIMEOUT_MS)
        with Consumer(group) as survivor:
            survivor.subscribe(["overvoltage"])
            child.kill()  # SIGKILL, holding every row: no close, no acknowledgement
            child.wait(DEADLINE_S)
            got = _take(survivor, total, ack=True)
            assert _rows(got) == everything  # nothing lost, nothing twice
            # each came again (a second time, or later when the holder's own lease ran
            # out while it was still gathering on a slow machine)
            assert min(m.delivery_count or 0 for m in got) >= 2
    finally:
        child.kill()


def test_a_restarted_server_keeps_acknowledgements_and_redelivers_the_rest(
    data: Path,
) -> None:
    server = ServerProcess(data)
    server.wait_ready()
    try:
        with connect(server.address) as conn:
            conn.execute(POWER + METERS + ";" + TOPIC)
            conn.execute(later_rows(1_600_000_000_000, 200))
            everything = Counter(conn.execute(SELECT).rows)
        total = sum(everything.values())
        group = config(server.address, "s", group_type="shared", max_poll_rows=10)
        consumer = Consumer(group)
        consumer.subscribe(["overvoltage"])
        got = _take(consumer, total)
        acked = got[::2]  # every other message, out of order with the ones left
        assert sum(consumer.ack(m) for m in acked) == sum(m.row_count for m in acked)
        server.kill()  # SIGKILL: whatever was not on disk is lost
        server = ServerProcess(data, port=server.port)
        server.wait_ready()
        consumer.close()  # its leases died with the server
        left = _rows(got) - _rows(acked)
        with once_answering(lambda: Consumer(group)) as again:
            again.subscribe(["overvoltage"])
            redelivered = _take(again, sum(left.values()))
            assert _rows(redelivered) == left  # only the rows not acknowledged
            # their counts survived the crash where a save of their window followed their
            # lease (each acknowledgement saves the window's counts): they come second
            saved = {m.vgroup for m in acked}
            assert saved
            assert all(m.delivery_count == (2 if m.vgroup in saved else 1) for m in redelivered)
            for message in redelivered:
                again.ack(message)
            assert again.poll(0.5) is None
    finally:
        server.kill()


def test_a_graceful_stop_saves_the_acknowledgements_polls_carried(data: Path) -> None:
    """Implicit acknowledgements ride on polls and reach the disk a little later; a
    SIGTERM saves those not saved yet before the server exits: after the restart the
    group has nothing left to deliver."""
    server = ServerProcess(data)
    server.wait_ready()
    consumer = None
    try:
        with connect(server.address) as conn:
            conn.execute(POWER + METERS + ";" + TOPIC)
            conn.execute(later_rows(1_600_000_000_000, 200))
            total = sum(Counter(conn.execute(SELECT).rows).values())
        group = config(server.address, "s", group_type="shared", enable_auto_commit="true")
        consumer = Consumer(group)
        consumer.subscribe(["overvoltage"])
        assert sum(_rows(_take(consumer, total)).values()) == total
        consumer.poll(0.05)  # its polls carry the acknowledgements of every row
        assert server.stop() == 0
        server = ServerProcess(data, port=server.port)
        server.wait_ready()
        with once_answering(
            lambda: Consumer(group)
        ) as again:  # the first one has not closed: no last ack
            again.subscribe(["overvoltage"])
            assert again.poll(1.0) is None
    finally:
        if consumer is not None:
            consumer.close()
        server.kill()


# The shortest session timeout: a killed key_shared consumer owns its keys until removed.
SESSION_TIMEOUT_MS = 6_000


def test_a_killed_key_shared_consumers_keys_move_with_their_order_kept(
    conn: Any, server: ServerProcess
) -> None:
    total = keyed_rows(conn, tables=6, writes=3, rows=20)
    group = config(server.address, "s", group_type="key_shared", ack_timeout_ms=ACK_TIMEOUT_MS,
                   max_poll_rows=10)  # fmt: skip
    with Consumer(group) as survivor:
        survivor.subscribe(["by_meter"])
        args = [sys.executable, "-c", HOLDER, server.address, str(ACK_TIMEOUT_MS), "1",
                "key_shared", str(SESSION_TIMEOUT_MS), "10", "by_meter"]  # fmt: skip
        child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().split()[0] == "holding"  # rows of its keys
            child.kill()  # SIGKILL: its keys stay its own until it is removed
            child.wait(DEADLINE_S)
            # the killed owner's keys wait for its removal (its session timeout)
            got = _take(survivor, total, ack=True, within=2 * DEADLINE_S)
        finally:
            child.kill()
    stamps: dict[str, list[int]] = {}
    for message in got:
        for ts, _, table in message.rows():
            stamps.setdefault(table, []).append(ts)
    assert sorted(stamps) == [f"m{n}" for n in range(6)]
    for table, seen in stamps.items():  # every row once, each table's in WAL order
        assert seen == sorted(seen), table
        assert len(set(seen)) == len(seen) == 60, table
