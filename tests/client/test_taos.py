"""`sqltopic.taos` without a server: taospy's records built from sqltopic's messages, and
TmqError as taospy shows it (the live behaviour is in tests/compat)."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

import sqltopic
from sqltopic.client.message import Block
from sqltopic.client.message import Message as SqlMessage
from sqltopic.client.taos_errors import tmq_error
from sqltopic.errors import ConfigError, Error, OffsetOutOfRange
from sqltopic.taos import Message, TaosField, TmqError, TopicPartition

ROWS = pa.table({
    "ts": pa.array([1_538_548_685_000, 1_538_548_686_000], pa.timestamp("ms")),
    "current": pa.array([10.5, None], pa.float64()),
    "voltage": pa.array([219, 221], pa.int32()),
    "location": pa.array(["California.SanFrancisco", "LA"], pa.string()),
})  # fmt: skip


def _message(kind: str = "data") -> SqlMessage:
    blocks = [Block("d1001", ROWS)] if kind == "data" else []
    meta = {"type": "create"} if kind == "meta" else None
    return SqlMessage("t", "power", 2, 10, 12, kind, blocks, meta)  # type: ignore[arg-type]


def test_a_message_as_taospy_shows_it() -> None:
    message = Message(_message())
    assert message.error() is None
    assert (message.topic(), message.database(), message.vgroup(), message.offset()) == (
        "t", "power", 2, 10,
    )  # fmt: skip
    blocks = message.value()
    assert blocks is not None
    [block] = blocks
    assert (block.nrows(), block.ncols(), block.table()) == (2, 4, "d1001")
    first = datetime.datetime(2018, 10, 3, 6, 38, 5)
    assert block.fetchall()[0] == (first, 10.5, 219, "California.SanFrancisco")
    assert list(block) == block.fetchall()
    assert [list(b) for b in message] == [block.fetchall()]
    assert block.fields() == [
        TaosField("ts", 9, 8), TaosField("current", 7, 8), TaosField("voltage", 4, 4),
        TaosField("location", 8, len("California.SanFrancisco")),
    ]  # fmt: skip
    assert block.fields()[2]["name"] == "voltage"
    raw = Message(_message(), decode_binary=False).value()
    assert raw is not None
    assert raw[0].fetchall()[1][3] == b"LA"


def test_meta_and_data_lost_messages() -> None:
    assert Message(_message("meta")).value() is None  # taospy: TMQ_RES_TABLE_META
    assert Message(_message("data_lost")).value() == []
    with pytest.raises(TmqError, match="carries an error"):
        Message(error=TmqError("x")).topic()


def test_tmq_error_is_also_the_sqltopic_error() -> None:
    err = tmq_error(OffsetOutOfRange("seek: outside 1..5", begin=1, end=5))
    assert isinstance(err, TmqError)
    assert isinstance(err, OffsetOutOfRange)
    assert isinstance(err, sqltopic.Error)
    assert (err.begin, err.end, err.errno) == (1, 5, 0x4007)
    assert str(err) == "[0x4007]: seek: outside 1..5"
    config = tmq_error(ConfigError("group.id: bad"))
    assert isinstance(config, ValueError)
    assert type(config) is type(tmq_error(ConfigError("other")))  # one class per kind
    assert str(TmqError("plain")) == "[0xffff]: plain"
    assert tmq_error(err) is err
    assert str(tmq_error(Error("x"), 0x4008)).startswith("[0x4008]")


def test_topic_partition_as_taospy() -> None:
    part = TopicPartition("t", 3, 7)
    assert (part.begin, part.end) == (0, 0)
    assert str(part) == "TopicPartition(topic=t, partition=3, offset=7)"
