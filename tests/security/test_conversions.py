"""TDengine's TIMESTAMP takes the whole 64-bit range; Python's datetime holds years
1..9999. A value beyond it makes `rows()` raise ConversionError naming the column, from a
query's result and from a consumer's message alike, while the Arrow table still holds
it."""

from __future__ import annotations

import pytest

from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.errors import ConversionError, Error
from tests.client.support import config, drain
from tests.live_server import ServerProcess

FAR = 2**62  # ms: about 146 million years after 1970


@pytest.fixture
def far(conn: Connection) -> Connection:
    conn.execute("CREATE DATABASE d VGROUPS 1; CREATE TABLE d.t (ts TIMESTAMP, v INT)")
    conn.execute(f"INSERT INTO d.t VALUES ({FAR}, 1) (-{FAR}, 2) (1538548685000, 3)")
    conn.execute("CREATE TOPIC far AS SELECT ts, v FROM d.t")
    return conn


def test_a_query_result_names_the_column(far: Connection) -> None:
    result = far.execute("SELECT ts, v FROM d.t ORDER BY v")
    with pytest.raises(ConversionError, match=r"column ts \(timestamp\[ms\]\) holds a value"):
        result.rows  # noqa: B018
    assert isinstance(ConversionError("x"), Error)
    table = result.to_arrow()
    assert table.column("ts").cast("int64").to_pylist() == [FAR, -FAR, 1538548685000]
    assert far.execute("SELECT v FROM d.t ORDER BY v").rows == [(1,), (2,), (3,)]


def test_a_consumer_message_names_the_column(server: ServerProcess, far: Connection) -> None:
    with Consumer(config(server.address, "g")) as consumer:
        consumer.subscribe(["far"])
        messages = drain(consumer)
    assert sum(m.row_count for m in messages) == 3
    with pytest.raises(ConversionError, match="column ts"):
        [row for m in messages for row in m.rows()]
    values = [v for m in messages for v in m.to_arrow().column("ts").cast("int64").to_pylist()]
    assert sorted(values) == sorted([FAR, -FAR, 1538548685000])
