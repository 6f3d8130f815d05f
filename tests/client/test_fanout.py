"""Many topics subscribed at once over one server: every consumer receives exactly its
rows through the shared pass, whether it waits caught up or reads a backlog alone, and a
consumer whose poll is held (the default fetch.max.wait.ms of a minute) is woken by the
rows for it, not by its deadline."""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from tests.client.support import DEADLINE_S, config

DEVICES = [f"d{i}" for i in range(12)]
TOPICS = 16
ROUNDS = 4


def _setup(conn: Connection) -> dict[str, list[str]]:
    """Twelve devices, and sixteen topics each watching three of them."""
    conn.execute(
        "CREATE TABLE "
        + " ".join(f"{d} USING meters TAGS ('site{i % 3}', {i})" for i, d in enumerate(DEVICES))
    )
    rng = random.Random(14)
    topics = {}
    for k in range(TOPICS):
        watched = sorted(rng.sample(DEVICES, 3))
        names = ", ".join(f"'{d}'" for d in watched)
        conn.execute(
            f"CREATE TOPIC fan{k} AS SELECT ts, voltage, tbname FROM power.meters "
            f"WHERE tbname IN ({names})"
        )
        topics[f"fan{k}"] = watched
    return topics


def _write_round(conn: Connection, r: int) -> None:
    values = " ".join(
        f"{d} VALUES ({1_000 * r + i}, 1.0, {100 * r + i}, 0.5)" for i, d in enumerate(DEVICES)
    )
    conn.execute(f"INSERT INTO {values}")


def _expected(watched: list[str], rounds: range) -> Counter[tuple[Any, ...]]:
    return Counter((d, 100 * r + i) for r in rounds for i, d in enumerate(DEVICES) if d in watched)


def _received(consumer: Consumer, want: int, got: Counter[tuple[Any, ...]]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while sum(got.values()) < want:
        assert time.monotonic() < deadline, f"{sum(got.values())} of {want} rows arrived"
        message = consumer.poll(0.5)
        if message is not None:
            for row in message.rows():
                got[(row[2], row[1])] += 1


def test_every_topic_receives_exactly_its_rows_caught_up_or_behind(
    live_power: Connection, server: Any
) -> None:
    topics = _setup(live_power)
    names = sorted(topics)
    early = {n: Consumer(config(server.address, f"g-{n}")) for n in names[: TOPICS // 2]}
    got: dict[str, Counter[tuple[Any, ...]]] = {n: Counter() for n in names}
    try:
        for name, consumer in early.items():
            consumer.subscribe([name])
            _received(consumer, 0, got[name])
        for r in range(2):
            _write_round(live_power, r)
        for name, consumer in early.items():
            _received(consumer, sum(_expected(topics[name], range(2)).values()), got[name])
        # the others start now, behind: they read the backlog alone while the first half
        # waits caught up in the shared pass
        late = {n: Consumer(config(server.address, f"g-{n}")) for n in names[TOPICS // 2 :]}
        for name, consumer in late.items():
            consumer.subscribe([name])
        for r in range(2, ROUNDS):
            _write_round(live_power, r)
        every = early | late
        for name, consumer in every.items():
            expected = _expected(topics[name], range(ROUNDS))
            _received(consumer, sum(expected.values()), got[name])
            assert got[name] == expected, name
        # nothing more arrives for anyone: a write to a device nobody watches
        live_power.execute("CREATE TABLE lone USING meters TAGS ('none', 99)")
        live_power.execute("INSERT INTO lone VALUES (1, 1.0, 1, 1.0)")
        _write_round(live_power, ROUNDS)
        for name, consumer in every.items():
            expected = _expected(topics[name], range(ROUNDS + 1))
            _received(consumer, sum(expected.values()), got[name])
            assert got[name] == expected, name
    finally:
        for consumer in [*early.values(), *locals().get("late", {}).values()]:
            consumer.close()


def test_a_held_poll_is_woken_by_its_rows_not_its_deadline(
    live_power: Connection, server: Any
) -> None:
    live_power.execute("CREATE TABLE d0 USING meters TAGS ('x', 1)")
    live_power.execute("CREATE TOPIC quiet AS SELECT ts, voltage FROM power.meters")
    settings = config(server.address, "g-held")
    del settings["fetch.max.wait.ms"]  # the default: a poll is held a minute
    with Consumer(settings) as consumer:
        consumer.subscribe(["quiet"])
        deadline = time.monotonic() + DEADLINE_S
        while not consumer.assignment():  # then its polls are in flight, held
            assert time.monotonic() < deadline, "no assignment"
            assert consumer.poll(0.2) is None
        assert consumer.poll(0.5) is None
        live_power.execute("INSERT INTO d0 VALUES (1, 1.0, 7, 1.0)")
        # within the deadline (30 s), shorter than the poll's hold (60 s)
        deadline = time.monotonic() + DEADLINE_S
        message = None
        while message is None:
            assert time.monotonic() < deadline, "the held poll was not woken by its row"
            message = consumer.poll(0.5)
        assert [row[1] for row in message.rows()] == [7]
