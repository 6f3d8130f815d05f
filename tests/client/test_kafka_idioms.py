"""confluent-kafka's idioms on sqltopic's consumer core and records, without a server:
`consume(num_messages, timeout)`, `committed(parts, timeout)`, `TopicPartition(topic,
partition=...)`, `Message.error()` and `Message.value()` (the live calls are in
tests/compat/test_consumer_idioms.py)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

import sqltopic.client.effects as fx
from sqltopic.client.message import Block, Message, TopicPartition
from sqltopic.errors import ConfigError
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.client.test_core import make


def test_consume_returns_up_to_num_messages() -> None:
    core, server = make([1, 2])
    batch = server.run(core.consume(3, 0))  # the fake answers every fetch at once
    assert [(m.vgroup, m.offset) for m in batch] == [(1, 5), (2, 5), (1, 6)]
    assert len(server.run(core.consume(2, -1))) == 2  # no limit: waits for both
    assert len(server.run(core.consume(1, None))) == 1
    core.pause([TopicPartition("t", 1), TopicPartition("t", 2)])
    assert server.run(core.consume(5, 0)) == []  # nothing by the deadline: what there is
    for wrong, why in ((0, "is out of range 1..1000000"), (True, "is not an int")):
        with pytest.raises(ConfigError, match=f"consume: num_messages {wrong!r} {why}"):
            server.run(core.consume(wrong, 1))


def test_committed_timeout_bounds_the_call() -> None:
    core, _ = make([1])
    stepper = fx.Stepper(core.committed([TopicPartition("t", 1)], timeout=1.5))
    effect = stepper.next()
    assert isinstance(effect, fx.Rpc)
    assert (effect.method, effect.timeout) == ("Committed", 1.5)
    answer = pb.CommittedResponse(offsets=[pb.CommittedOffset(topic="t", vgroup=1, offset=9)])
    stepper.answer(answer)
    assert stepper.next() is None
    assert stepper.value == [TopicPartition("t", 1, 9)]
    default = fx.Stepper(core.committed([TopicPartition("t", 1)])).next()
    assert isinstance(default, fx.Rpc)
    assert default.timeout == fx.RPC_TIMEOUT_S
    with pytest.raises(ConfigError, match="committed: timeout 0 is not"):
        fx.Stepper(core.committed([], timeout=0)).next()


def test_topic_partition_takes_partition_as_another_name_of_the_vgroup() -> None:
    part = TopicPartition("t", partition=3, offset=7)
    assert part == TopicPartition("t", 3, 7)
    assert (part.vgroup, part.partition) == (3, 3)
    part.partition = 4
    assert part.vgroup == 4
    part.vgroup = 5
    assert part.partition == 5
    assert replace(part, offset=1) == TopicPartition("t", 5, 1)
    assert TopicPartition("t", 2, partition=2).vgroup == 2
    with pytest.raises(TypeError, match="give the vgroup"):
        TopicPartition("t")
    with pytest.raises(TypeError, match="vgroup 1 and partition 2 differ"):
        TopicPartition("t", 1, partition=2)


def test_message_error_is_none_and_value_the_blocks() -> None:
    block = Block("d1001", pa.table({"v": pa.array([1, 2], pa.int32())}))
    data = Message("t", "db", 1, 1, 2, "data", [block])
    assert data.error() is None
    assert data.value() == [block]
    assert [list(b) for b in data.value() or []] == [[(1,), (2,)]]
    assert Message("t", "db", 1, 1, 2, "meta", meta={"type": "create"}).value() is None
    assert Message("t", "db", 1, 1, 2, "data_lost").value() == []
