"""`sqltopic.taos` rows, results, cursors and errors without a server: nanosecond
timestamps as ints and timestamps `datetime` cannot hold as None (taospy's
`taos/field.py`), TaosResult and TaosCursor over a Result, taospy's error tree."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

import sqltopic
from sqltopic import taos
from sqltopic.client.connection import Result
from sqltopic.client.message import Block
from sqltopic.client.message import Message as SqlMessage
from sqltopic.client.taos_errors import sql_error, tmq_error
from sqltopic.client.taos_rows import taos_rows
from sqltopic.errors import (
    AuthenticationFailed,
    ConversionError,
    OffsetOutOfRange,
    ServerUnavailable,
    SqlSyntaxError,
)

MAX_INT64 = 9_223_372_036_854_775_807
# A nanosecond value that is a whole microsecond: still an int, as taospy (not datetime).
WHOLE_US_NS = 1_626_006_833_639_000_000
ODD_NS = 1_626_006_833_639_000_001


def _table() -> pa.Table:
    return pa.table({
        "ns": pa.array([WHOLE_US_NS, ODD_NS, None], pa.timestamp("ns")),
        "ms": pa.array([1_538_548_685_000, MAX_INT64, None], pa.timestamp("ms")),
        "us_utc": pa.array([0, -MAX_INT64, 1], pa.timestamp("us", tz="UTC")),
        "v": pa.array([1, 2, 3], pa.int32()),
        "s": pa.array(["a", None, "ccc"], pa.string()),
    })  # fmt: skip


def test_nanoseconds_are_ints_and_unrepresentable_timestamps_none() -> None:
    rows = taos_rows(_table())
    assert rows[0] == (
        WHOLE_US_NS, datetime(2018, 10, 3, 6, 38, 5), datetime(1970, 1, 1, tzinfo=UTC), 1, "a",
    )  # fmt: skip
    assert rows[1] == (ODD_NS, None, None, 2, None)
    assert rows[2][:3] == (None, None, datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
    assert all(type(row[0]) is int for row in rows[:2])
    assert taos_rows(_table(), decode_binary=False)[2][4] == b"ccc"
    assert taos_rows(pa.table({})) == []
    # sqltopic's own rows() keep their documented ConversionError
    with pytest.raises(ConversionError, match="column ms"):
        Result(_table().select(["ms"])).rows  # noqa: B018


def test_a_message_block_never_fails_to_convert() -> None:
    message = SqlMessage("t", "dns", 1, 1, 2, "data", [Block("t1", _table())])
    [block] = taos.Message(message).value() or []
    assert [row[:2] for row in block.fetchall()] == [
        (WHOLE_US_NS, datetime(2018, 10, 3, 6, 38, 5)), (ODD_NS, None), (None, None),
    ]  # fmt: skip
    assert [str(f) for f in block.fields()][:2] == [
        "{name: ns, type: 9, bytes: 8}", "{name: ms, type: 9, bytes: 8}",
    ]  # fmt: skip
    assert block.fields()[4] == taos.TaosField("s", 8, 3)


def test_a_result_as_taospy_shows_it() -> None:
    result = taos.TaosResult(Result(_table().select(["ns", "v", "s"]), affected_rows=0))
    assert [f.name for f in result.fields] == ["ns", "v", "s"]
    assert [(f["type"], f.bytes) for f in result.fields] == [(9, 8), (4, 4), (8, 3)]
    assert (result.field_count, result.row_count, result.affected_rows) == (3, 0, 0)
    assert next(iter(result)) == (WHOLE_US_NS, 1, "a")
    assert result.row_count == 1  # rows fetched so far, as taospy
    assert result.fetch_all() == [(WHOLE_US_NS, 1, "a"), (ODD_NS, 2, None), (None, 3, "ccc")]
    assert result.row_count == 3
    assert result.fetch_all_into_dict()[1] == {"ns": ODD_NS, "v": 2, "s": None}
    assert [length for _, length in result.blocks_iter()] == [3]


class _Connection:
    """What a cursor needs of a TaosConnection: `query`."""

    def __init__(self, result: Result) -> None:
        self.result = result

    def query(self, sql: str) -> taos.TaosResult:
        return taos.TaosResult(self.result)


def test_cursor_as_taospy_and_pep_249() -> None:
    rows = _table().select(["v", "s"])
    cursor = taos.TaosCursor(_Connection(Result(rows)))  # type: ignore[arg-type]
    assert (cursor.rowcount, cursor.description) == (-1, [])
    with pytest.raises(taos.OperationalError, match="Invalid use of fetchall"):
        cursor.fetchall()
    assert cursor.execute("SELECT v, s FROM t") == 3
    assert cursor.rowcount == 3
    assert [d[:2] for d in cursor.description] == [("v", 4), ("s", 8)]
    assert cursor.fetchone() == (1, "a")
    assert cursor.fetchmany(1) == [(2, None)]
    assert cursor.fetchall() == [(3, "ccc")]
    assert cursor.fetchone() is None
    cursor.execute("SELECT v, s FROM t")
    assert list(cursor) == [(1, "a"), (2, None), (3, "ccc")]
    with pytest.raises(taos.ProgrammingError, match="params are not supported"):
        cursor.execute("SELECT ?", (1,))
    insert = taos.TaosCursor(_Connection(Result(affected_rows=2)))  # type: ignore[arg-type]
    assert insert.execute("INSERT ...") == insert.rowcount == insert.affected_rows == 2
    assert insert.close() is True
    assert insert.close() is False
    with pytest.raises(taos.ProgrammingError, match="Cursor is not connected"):
        insert.execute("SELECT 1")


def test_taospy_error_tree_rooted_in_sqltopic() -> None:
    assert issubclass(taos.TmqError, taos.DatabaseError)
    assert issubclass(taos.ProgrammingError, taos.DatabaseError)
    assert issubclass(taos.Error, sqltopic.Error)
    assert str(taos.Error("plain")) == "[0xffff]: plain"
    assert not issubclass(taos.ConnectionError, ConnectionError)  # taospy's, not the builtin
    cases = [
        (SqlSyntaxError("syntax error near 'x'"), taos.ProgrammingError),
        (AuthenticationFailed("wrong user or password"), taos.ConnectionError),
        (ServerUnavailable("no server"), taos.ConnectionError),
        (OffsetOutOfRange("outside", begin=1, end=2), taos.OperationalError),
    ]
    for err, kind in cases:
        raised = sql_error(err)
        assert isinstance(raised, kind)
        assert isinstance(raised, type(err))  # still sqltopic's class
        assert raised.msg == str(err)
    tmq = tmq_error(OffsetOutOfRange("outside", begin=1, end=2))
    assert isinstance(tmq, taos.Error)
    assert isinstance(tmq, OffsetOutOfRange)
    assert (tmq.errno, tmq.begin) == (0x4007, 1)
