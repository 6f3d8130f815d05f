"""Vnode.ReadTopic against a real server (client/topic_read.py): a query topic's rows by
version range, as a consumer's poll evaluates them, each with its WAL version; the
right it needs (SUBSCRIBE alone), every refusal, large answers in several frames, and
versions retention deleted (OffsetOutOfRange with the retained range)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, cast

import grpc
import pyarrow as pa
import pytest

from sqltopic.client import Connection, admin, connect, history
from sqltopic.client.topic_read import TopicRows, read_topic
from sqltopic.errors import (
    ConfigError,
    NoPermission,
    NotFoundError,
    OffsetOutOfRange,
    TopicNotFound,
    VersionNotRetained,
)
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from tests.live_server import ServerProcess
from tests.support import meters_rows

SELECT = "SELECT ts, voltage, tbname, location FROM power.meters WHERE voltage > 220"
VGROUPS = (1, 2)
# A condition that does not hold within this long never will (retention runs every 1 s).
DEADLINE_S = 30.0
Row = tuple[Any, ...]


@pytest.fixture
def hot(live_power: Connection) -> Connection:
    live_power.execute(f"CREATE TOPIC hot AS {SELECT}")
    for i, table in enumerate(("d1", "d2", "d3", "d4")):
        for part in range(3):
            live_power.write("meters", meters_rows(i * 10_000 + part * 100, 100, table))
    return live_power


def _normal(table: pa.Table) -> Counter[Row]:
    ts = table["ts"].cast(pa.int64()).to_pylist()
    return Counter(zip(ts, table["voltage"].to_pylist(), table["tbname"].to_pylist(),
                       table["location"].to_pylist(), strict=True))  # fmt: skip


def _read(conn: Connection, vgroup: int, start: int, end: int, topic: str = "hot") -> list[
    TopicRows
]:  # fmt: skip
    return list(read_topic(conn, topic, vgroup, start, end))


def _rows(blocks: list[TopicRows]) -> pa.Table | None:
    tables = [b.rows for b in blocks if b.rows is not None]
    return pa.concat_tables(tables) if tables else None


def test_rows_are_the_topic_s_with_their_versions(hot: Connection) -> None:
    ranges = admin.offset_ranges(hot, "hot", VGROUPS)
    got: Counter[Row] = Counter()
    for vgroup in VGROUPS:
        r = ranges[vgroup]
        blocks = _read(hot, vgroup, r.begin, r.end)
        assert blocks[-1].next_version == r.end
        table = _rows(blocks)
        assert table is not None
        assert table.column_names == ["ts", "voltage", "tbname", "location", "_version"]
        versions = table["_version"].to_pylist()
        assert versions == sorted(versions)
        assert r.begin <= versions[0]
        assert versions[-1] < r.end
        got += _normal(table)
        # two halves read apart are the whole, each row once
        middle = (r.begin + r.end) // 2
        halves = [_rows(_read(hot, vgroup, r.begin, middle)), _rows(_read(hot, vgroup, middle, 0))]
        joined = pa.concat_tables([t for t in halves if t is not None])
        assert joined["_version"].to_pylist() == versions
        assert all(v < middle for v in (halves[0] or joined)["_version"].to_pylist())
    assert got == _normal(hot.query(SELECT))
    assert _read(hot, 1, ranges[1].end, ranges[1].end) == []  # an empty range: no frame


def test_a_large_answer_comes_in_several_frames(hot: Connection) -> None:
    before = admin.offset_ranges(hot, "hot", VGROUPS)
    hot.write("meters", meters_rows(1_000_000, 300_000, "d1"))  # ~9 MB of output rows
    after = admin.offset_ranges(hot, "hot", VGROUPS)
    vgroup = next(v for v in VGROUPS if after[v].end > before[v].end)  # d1's
    stub = pb_grpc.VnodeStub(hot._channel)
    request = pb.ReadTopicRequest(topic="hot", vgroup=vgroup, from_version=before[vgroup].end)
    frames = list(stub.ReadTopic(request, metadata=hot._metadata))
    assert sum(1 for f in frames if f.arrow_ipc) > 1
    assert all(len(f.SerializeToString()) <= 4 << 20 for f in frames)
    assert [f.next_version for f in frames if f.HasField("next_version")][-1] == after[vgroup].end
    table = _rows(_read(hot, vgroup, before[vgroup].end, 0))
    assert table is not None
    assert table.num_rows == sum(1 for i in range(1_000_000, 1_300_000) if 200 + i % 40 > 220)
    assert set(table["_version"].to_pylist()) == {before[vgroup].end}  # one write, one entry


def test_subscribe_alone_is_the_right_it_needs(server: ServerProcess, hot: Connection) -> None:
    hot.execute("CREATE USER sub PASS 'subscriber_pass1'; GRANT SUBSCRIBE ON hot TO sub")
    hot.execute("CREATE USER reader PASS 'reader_pass1'; GRANT READ ON power.* TO reader")
    hot.execute("CREATE USER nobody PASS 'nobody_pass1'")
    with connect(server.address, "sub", "subscriber_pass1") as sub:
        assert _rows(_read(sub, 1, 0, 0)) == _rows(_read(hot, 1, 0, 0))
    with (
        connect(server.address, "reader", "reader_pass1") as reader,
        pytest.raises(NoPermission, match="may not consume topic hot"),
    ):
        _read(reader, 1, 0, 0)
    with (
        connect(server.address, "nobody", "nobody_pass1") as nobody,
        pytest.raises(TopicNotFound),  # names do not leak
    ):
        _read(nobody, 1, 0, 0)


def test_refusals(hot: Connection) -> None:
    hot.execute("CREATE TOPIC whole AS STABLE power.meters")
    hot.execute("CREATE TOPIC bound AS SELECT ts, voltage FROM power.meters WHERE tbname = ?")
    end = admin.offset_ranges(hot, "hot", [1])[1].end
    cases: list[tuple[type[Exception], str, tuple[str, int, int, int]]] = [
        (ConfigError, "stable topic", ("whole", 1, 0, 0)),
        (ConfigError, "has parameters", ("bound", 1, 0, 0)),
        (ConfigError, "binding of a parameterized topic", ("bound?d1", 1, 0, 0)),
        (ConfigError, "from_version -1 is negative", ("hot", 1, -1, 0)),
        (ConfigError, "to_version -2 is negative", ("hot", 1, 0, -2)),
        (ConfigError, "below from_version", ("hot", 1, 5, 3)),
        (ConfigError, "longer than a topic name", ("t" * 500, 1, 0, 0)),
        (ConfigError, "give the topic", ("", 1, 0, 0)),
        (TopicNotFound, "nope", ("nope", 1, 0, 0)),
        (NotFoundError, "not a vgroup of topic hot", ("hot", 99, 0, 0)),
        (OffsetOutOfRange, "past its readable end", ("hot", 1, 0, end + 5)),
    ]
    for cls, words, (topic, vgroup, start, stop) in cases:
        with pytest.raises(cls, match=words):
            _read(hot, vgroup, start, stop, topic)
    with pytest.raises(OffsetOutOfRange) as past:
        _read(hot, 1, 0, end + 5)
    assert (past.value.begin, past.value.end) == (1, end)


def test_a_garbled_request_is_invalid_argument(hot: Connection) -> None:
    call: grpc.UnaryStreamMultiCallable[bytes, bytes] = hot._channel.unary_stream(
        "/sqltopic.v1.Vnode/ReadTopic", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as refused:
        list(call(b"\xff\xff\xff", metadata=hot._metadata))
    assert cast("grpc.Call", refused.value).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_versions_retention_deleted_are_out_of_range_with_the_retained_range(
    hot: Connection,
) -> None:
    hot.execute("ALTER DATABASE power WAL_RETENTION_PERIOD 0 WAL_SEGMENT_SIZE 1")
    for i in range(20):
        hot.write("meters", meters_rows(100_000 + i * 1000, 500, "d1"))
        hot.write("meters", meters_rows(100_000 + i * 1000, 500, "d2"))
    deadline = time.monotonic() + DEADLINE_S
    while min(r.begin for r in admin.offset_ranges(hot, "hot", VGROUPS).values()) == 1:
        assert time.monotonic() < deadline, "retention deleted nothing"
        time.sleep(0.1)
    ranges = admin.offset_ranges(hot, "hot", VGROUPS)
    vgroup = next(v for v in VGROUPS if ranges[v].begin > 1)
    gone = r"versions 1\.\.\d+ .* deleted by retention"
    with pytest.raises(OffsetOutOfRange, match=gone) as lost:
        _read(hot, vgroup, 1, 0)
    begin, end = lost.value.begin, lost.value.end
    assert begin is not None
    assert begin >= ranges[vgroup].begin
    assert end is not None
    assert end >= ranges[vgroup].end
    blocks = _read(hot, vgroup, begin, end)  # from the first retained one: read
    assert [b.next_version for b in blocks[-1:]] == ([end] if begin < end else [])
    # ReadEntries (raw history) from the deleted versions: OUT_OF_RANGE too, with the
    # retained range (VersionNotRetained; it was INTERNAL before)
    with pytest.raises(VersionNotRetained, match="deleted by retention") as raw:
        list(history.read_entries(hot, vgroup, 1, 0, topic="hot"))
    assert raw.value.first_version >= ranges[vgroup].begin
    assert raw.value.next_version >= ranges[vgroup].end
