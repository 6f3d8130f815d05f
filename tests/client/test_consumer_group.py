"""The Consumer following its group through a real server: a second member takes half of
the vgroups (fencing, refresh), a dropped topic, and a server restart (new session,
rejoin, resume from the committed offsets)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sqltopic.client import Connection, connect
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message
from sqltopic.errors import TopicDropped
from tests.client.support import (
    DEADLINE_S,
    METERS,
    SELECT,
    TOPIC,
    config,
    drain,
    first_error,
    later_rows,
    rows_of,
)
from tests.live_server import POWER, ServerProcess, once_answering

# Heartbeats this often make the group react within a couple of seconds.
FAST = {"heartbeat_interval_ms": 1000, "session_timeout_ms": 6000}


def _vgroups(consumer: Consumer) -> set[int]:
    return {p.vgroup for p in consumer.assignment()}


def test_a_second_member_takes_over_half_and_nothing_is_lost(
    power: Connection, server: ServerProcess
) -> None:
    with (
        Consumer(config(server.address, "g", **FAST)) as first,
        Consumer(config(server.address, "g", **FAST)) as second,
    ):
        first.subscribe(["overvoltage"])
        assert _vgroups(first) == {1, 2}
        second.subscribe(["overvoltage"])
        deadline = time.monotonic() + DEADLINE_S
        got: list[Message] = []
        # the first member learns of the rebalance from its heartbeat or a fenced poll
        while len(_vgroups(first)) != 1 or len(_vgroups(second)) != 1:
            assert time.monotonic() < deadline, "the group did not rebalance"
            for consumer in (first, second):
                message = consumer.poll(0.2)
                got += [message] if message is not None else []
        assert _vgroups(first) | _vgroups(second) == {1, 2}
        got += drain(first) + drain(second)
        # at least once: every row of the SELECT arrived (duplicates only if uncommitted)
        assert set(rows_of(got)) == set(power.execute(SELECT).rows)


def test_a_dropped_topic_fails_the_poll(power: Connection, server: ServerProcess) -> None:
    with Consumer(config(server.address, "g", **FAST)) as consumer:
        consumer.subscribe(["overvoltage"])
        drain(consumer)
        power.execute("DROP TOPIC FORCE overvoltage")
        error = first_error(consumer)
        assert isinstance(error, TopicDropped)
        # the heartbeat's flag (client's words) or the poll's error (server's) comes first
        assert str(error).startswith("topic overvoltage was dropped")
        assert str(error).endswith("unsubscribe from it")
        with pytest.raises(TopicDropped):  # until the application unsubscribes
            consumer.poll(0.1)
        consumer.unsubscribe()
        assert consumer.poll(0.1) is None


def test_the_consumer_survives_a_server_restart(data: Path) -> None:
    server = ServerProcess(data)
    server.wait_ready()
    consumer = None
    try:
        with connect(server.address) as conn:
            conn.execute(POWER + METERS + ";" + TOPIC)
        consumer = Consumer(config(server.address, "g", **FAST))
        consumer.subscribe(["overvoltage"])
        drain(consumer)
        consumer.commit()
        assert server.stop() == 0
        assert consumer.poll(0.5) is None  # no server: nothing yet, and no error
        server = ServerProcess(data, port=server.port)
        server.wait_ready()
        with once_answering(lambda: connect(server.address)) as conn:
            conn.execute(later_rows(1_600_000_000_000, 3, voltage=235))
        got: list[Message] = []
        deadline = time.monotonic() + DEADLINE_S
        while sum(rows_of(got).values()) < 3:
            assert time.monotonic() < deadline, f"only {rows_of(got)} after the restart"
            message = consumer.poll(0.5)
            got += [message] if message is not None else []
        # resumed at the committed offsets: the new rows, none of the old ones again
        assert max(rows_of(got).values()) == 1
        assert sorted(row[2] for row in rows_of(got).elements()) == [235, 235, 235]
    finally:
        if consumer is not None:
            consumer.close()
        server.kill()
