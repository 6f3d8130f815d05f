"""Consumer idioms of TDengine's and taospy's own subscription tests and examples, on
`sqltopic.taos` (and one on `sqltopic.Consumer`). Each case names its source; where a
source waits long (poll(10)) or reads TDengine's versions (which start at 0, ours at 1),
the adaptation is said next to it.

Sources (commits as read):
* taospy: taosdata/taos-connector-python `tests/test_tmq.py`@e86229a3 (test_tmq_seek,
  test_tmq_list_topics, test_tmq_committed_and_position, test_tmq_assignment),
  `examples/tmq_consumer.py`@214cb2e4, `taos/tmq.py`@e86229a3 (errors).
* TDengine: `tests/system-test/7-tmq/tmqOffset.py`@95b58019 (seek errors read from
  str(error), polling until a poll returns None),
  `docs/examples/python/tmq_native.py`@584d2531 (seek to 0 rewinds).
* confluent-kafka-python's `Consumer` API (on `sqltopic.Consumer` and `sqltopic.aio`):
  `consume(num_messages, timeout)`, `commit(asynchronous=...)`, `committed(partitions,
  timeout)`, `TopicPartition(topic, partition=...)`, `Message.error()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from sqltopic.aio import Consumer as AsyncConsumer
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer as SqlConsumer
from sqltopic.client.message import Message as SqlMessage
from sqltopic.client.message import TopicPartition as SqlPartition
from sqltopic.client.taos_config import tmq_settings
from sqltopic.errors import ConfigError, Error, NoCommittedOffset, OffsetOutOfRange
from sqltopic.taos import Consumer, Message, MessageBlock, TmqError, TopicPartition
from tests.client.support import DEADLINE_S, METERS, SELECT, TOPIC, config, later_rows
from tests.live_server import ServerProcess

VGROUPS = 2  # of `power` (tests/live_server.py)
# tmqOffset.py polls with poll(10) until a poll returns None; 1 s ends the drain sooner.
DRAIN_POLL_S = 1.0


def _power(conn: Connection) -> None:
    conn.execute(METERS)
    conn.execute(TOPIC)


def _consumer(server: ServerProcess, **extra: str) -> Consumer:
    config = {
        "group.id": "1",
        "td.connect.ip": "127.0.0.1",
        "td.connect.port": str(server.port),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
    }
    return Consumer(config | {key.replace("_", "."): value for key, value in extra.items()})


def _poll_all_rows(consumer: Consumer) -> list[tuple[Any, ...]]:
    """tmqOffset.py's tmqPollAllRows: poll until a poll returns None, raising error()."""
    rows: list[tuple[Any, ...]] = []
    res = consumer.poll(DRAIN_POLL_S)
    while res:
        err = res.error()
        if err is not None:
            raise err
        for block in res.value() or []:
            rows += block.fetchall()
        res = consumer.poll(DRAIN_POLL_S)
    return rows


def _error_code(err: Exception) -> str:
    """tmqOffset.py's reading of an error code: the text between "[" and "]"."""
    text = str(err)
    return text[text.index("[") + 1 : text.index("]")]


def test_config_keys_of_taospy_and_tdengine_examples() -> None:
    # examples/tmq_consumer.py (taospy)
    example = tmq_settings({
        "group.id": "3", "td.connect.user": "root", "td.connect.pass": "taosdata",
        "msg.with.table.name": "true", "enable.auto.commit": "true",
    }).config  # fmt: skip
    assert (example.group_id, example.user, example.enable_auto_commit) == ("3", "root", True)
    # tmqOffset.py: snapshot off, auto.commit.interval.ms, client.id
    offset_test = tmq_settings({
        "group.id": "offsetGrp", "client.id": "client", "auto.commit.interval.ms": "1000",
        "experimental.snapshot.enable": "false", "msg.with.table.name": "false",
        "td.connect.db": "dbt", "td.connect.ip": "localhost", "td.connect.port": 6030,
    }).config  # fmt: skip
    assert offset_test.server == "localhost:6030"
    assert (offset_test.auto_commit_interval_ms, offset_test.msg_with_table_name) == (1000, False)
    # taos/tmq.py: the errors of a bad config are TmqError
    with pytest.raises(TmqError, match=r"missing group\.id in consumer config setting"):
        tmq_settings({"td.connect.user": "root"})
    with pytest.raises(TmqError, match=r"experimental\.snapshot\.enable: 'true' is not supported"):
        tmq_settings({"group.id": "g", "experimental.snapshot.enable": "true"})
    with pytest.raises(ConfigError, match=r"auto\.offset\.reset: 'smallest' is not one of") as info:
        tmq_settings({"group.id": "g", "auto.offset.reset": "smallest"})
    assert isinstance(info.value, TmqError)
    assert _error_code(info.value) == "0xffff"
    assert not tmq_settings({"group.id": "g", "decode_binary": False}).decode_binary


def test_taospy_seek_list_topics_committed_and_position(
    live_power: Connection, server: ServerProcess
) -> None:
    _power(live_power)
    # test_tmq_seek: assignment before the first poll, one poll, seek back to it
    consumer = _consumer(server)
    consumer.subscribe(["overvoltage"])
    try:
        assignment = consumer.assignment()
        assert assignment is not None
        assert len(assignment) == VGROUPS
        # TDengine asserts offset 0 (its first version); ours is the vnode's begin
        assert [p.offset for p in assignment] == [p.begin for p in assignment]
        consumer.poll(1)
        for partition in assignment:
            consumer.seek(partition)
        assignment = consumer.assignment()
        assert assignment is not None
        assert [p.offset for p in assignment] == [p.begin for p in assignment]
        # test_tmq_list_topics
        assert consumer.list_topics() == ["overvoltage"]
        # test_tmq_committed_and_position: poll, commit(), committed == position > 0
        rows = _poll_all_rows(consumer)
        assert sorted(rows) == sorted(live_power.execute(SELECT).rows)
        consumer.commit()
        committees = consumer.committed(assignment)
        assert all(p.offset > 0 for p in committees)
        unknown = [TopicPartition(p.topic, p.partition, -1) for p in assignment]
        positions = consumer.position(unknown)
        assert [p.offset for p in positions] == [p.offset for p in committees]
        # tmq_native.py: offset 0 rewinds to the first retained version
        for partition in consumer.assignment() or []:
            partition.offset = 0
            consumer.seek(partition)
        assert sorted(_poll_all_rows(consumer)) == sorted(rows)
    finally:
        consumer.unsubscribe()
        consumer.close()


def test_tdengine_seek_errors_and_message_accessors(
    live_power: Connection, server: ServerProcess
) -> None:
    _power(live_power)
    with _consumer(server, group_id="offsetGrp") as consumer:
        consumer.subscribe(["overvoltage"])
        assignments = consumer.assignment()
        assert assignments is not None
        assignment = assignments[0]
        topic, partition, offset = assignment.topic, assignment.partition, assignment.offset
        # tmqOffset.py seekErrorVgid / seekErrorTopic / seekErrorVersion
        changes: list[tuple[dict[str, Any], str]] = [
            ({"partition": partition + VGROUPS + VGROUPS}, "0x4008"),
            ({"topic": "errorToipcName"}, "0x4009"),
            ({"offset": offset + 10 * 100000}, "0x4007"),
        ]
        for change, code in changes:
            wrong = TopicPartition(topic, partition, offset)
            for name, value in change.items():
                setattr(wrong, name, value)
            with pytest.raises(TmqError) as info:
                consumer.seek(wrong)
            assert _error_code(info.value) == code
        assert isinstance(info.value, OffsetOutOfRange)  # and still sqltopic's class
        # taospy's committed(): no committed offset is an error, as tmq_committed's
        with pytest.raises(TmqError, match="no committed offset") as no_commit:
            consumer.committed([TopicPartition(topic, partition, 0)])
        assert isinstance(no_commit.value, NoCommittedOffset)
        # test_tmq_assignment: a message's accessors and blocks; commit(message)
        message = consumer.poll(5)
        assert isinstance(message, Message)
        assert message.error() is None
        assert (message.topic(), message.database()) == ("overvoltage", "power")
        assert message.vgroup() in {1, 2}
        assert message.offset() >= 1
        blocks = message.value()
        assert blocks
        for block in message:
            assert isinstance(block, MessageBlock)
            assert block.ncols() == 5
            assert block.nrows() == len(block.fetchall()) == len(list(block))
            assert [f.name for f in block.fields()] == [
                "ts", "current", "voltage", "location", "tbname",
            ]  # fmt: skip
            assert [f["type"] for f in block.fields()][:3] == [9, 6, 4]  # TIMESTAMP FLOAT INT
        consumer.commit(message)
        vgroup = message.vgroup()
        committed = consumer.committed([TopicPartition("overvoltage", vgroup, -1)])
        assert committed[0].offset > message.offset()
        with pytest.raises(TmqError, match="Invalid offset type"):
            consumer.commit(offsets=[("overvoltage", vgroup, 1)])  # type: ignore[list-item]
    with pytest.raises(Error):  # closed
        consumer.poll(0.1)


def test_taospy_errors_before_subscribe(server: ServerProcess) -> None:
    # taos/tmq.py: poll before subscribe, subscribe to nothing
    with _consumer(server) as consumer:
        with pytest.raises(TmqError, match="unsubscribe topic"):
            consumer.poll(0.1)
        with pytest.raises(TmqError, match="Unset topic for Consumer"):
            consumer.subscribe([])
        assert consumer.assignment() is None


# --- confluent-kafka's idioms on sqltopic.Consumer (sync and asyncio) ---------------
# confluent_kafka.Consumer: commit(asynchronous=False), committed(parts, timeout=...),
# consume(num_messages, timeout), TopicPartition(topic, partition=...), msg.error().
BATCH = 100


def _confluent_config(server: ServerProcess) -> dict[str, object]:
    return config(server.address, "confluent", enable_auto_commit="false")


def _consume_all(consume: Callable[[], list[SqlMessage]], want: int) -> list[SqlMessage]:
    """consume() batches until `want` rows arrived (a deadline, no sleep)."""
    messages: list[SqlMessage] = []
    deadline = time.monotonic() + DEADLINE_S
    while sum(m.row_count for m in messages) < want:
        assert time.monotonic() < deadline, messages
        batch = consume()
        assert len(batch) <= BATCH
        messages += batch
    return messages


def _check_batch(messages: list[SqlMessage], expected: list[tuple[Any, ...]]) -> None:
    for msg in messages:
        assert msg.error() is None  # confluent's `if msg.error():` check
        assert [len(block) for block in msg.value() or []] == [len(b) for b in msg.blocks]
    assert sorted(row for m in messages for row in m.rows()) == sorted(expected)


def test_confluent_consume_commit_and_committed(
    live_power: Connection, server: ServerProcess
) -> None:
    _power(live_power)
    expected = live_power.execute(SELECT).rows
    with SqlConsumer(_confluent_config(server)) as consumer:
        consumer.subscribe(["overvoltage"])
        messages = _consume_all(
            lambda: consumer.consume(num_messages=BATCH, timeout=1), len(expected)
        )
        _check_batch(messages, expected)
        assert consumer.commit(asynchronous=False) is None
        parts = [SqlPartition(p.topic, partition=p.partition) for p in consumer.assignment()]
        committed = consumer.committed(parts, timeout=1)
        assert [p.offset for p in committed] == [p.offset for p in consumer.position(parts)]
        live_power.execute(later_rows(1_700_000_000_000, 1))
        [later] = consumer.consume(num_messages=1, timeout=DEADLINE_S)
        future = consumer.commit(later, asynchronous=True)
        assert future is not None
        assert future.result(timeout=DEADLINE_S) is None
        part = SqlPartition("overvoltage", partition=later.vgroup)
        assert consumer.committed([part], timeout=1)[0].offset == later.end_offset


def test_confluent_idioms_on_the_asyncio_consumer(
    live_power: Connection, server: ServerProcess
) -> None:
    _power(live_power)
    expected = live_power.execute(SELECT).rows

    async def main() -> None:
        async with AsyncConsumer(_confluent_config(server)) as consumer:
            await consumer.subscribe(["overvoltage"])
            messages: list[SqlMessage] = []
            deadline = time.monotonic() + DEADLINE_S
            while sum(m.row_count for m in messages) < len(expected):
                assert time.monotonic() < deadline, messages
                messages += await consumer.consume(num_messages=BATCH, timeout=1)
            _check_batch(messages, expected)
            task = await consumer.commit(messages[-1], asynchronous=True)
            assert task is not None
            await task
            assert await consumer.commit(asynchronous=False) is None
            parts = [SqlPartition(p.topic, partition=p.vgroup) for p in await consumer.assignment()]
            committed = await consumer.committed(parts, timeout=1)
            assert [p.offset for p in committed] == [p.offset for p in consumer.position(parts)]

    asyncio.run(main())
