"""Both Connections' writes on the `Sql.Writes` stream against a real server
(client/write_stream.py): `write`, `write_async` many under way, the asyncio client's
writes awaited together; each write's own error; a broken stream; and a server without
the method (a real gRPC proxy of the real server that leaves Writes out), where the
client goes back to Write calls; a routed write's parts on each dnode's own stream."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent import futures
from typing import Any, cast

import grpc
import pyarrow as pa
import pytest

from sqltopic import aio
from sqltopic.client import Connection, connect
from sqltopic.client.routing import Routes
from sqltopic.client.write_stream import (
    MAX_WRITES_IN_FLIGHT,
    AioWriteStream,
    Retired,
    WriteStream,
)
from sqltopic.errors import InvalidValueError, NotFoundError, ServerUnavailable
from sqltopic.proto.arrow_ipc import to_ipc
from tests.live_server import POWER, ServerProcess
from tests.server.test_writes_stream import ANSWER_DEADLINE_S, rows, voltages
from tests.wal.waits import wait_for


def test_write_and_write_async_apply_every_write_in_order(live_power: Connection) -> None:
    assert live_power.write("power.meters", rows(0, [1, 2])) == 2
    pending = [
        live_power.write_async("power.meters", rows(100 + 10 * k, [100 + k]))
        for k in range(3 * MAX_WRITES_IN_FLIGHT)  # more than the window: waits for room
    ]
    assert [f.result(ANSWER_DEADLINE_S) for f in pending] == [1] * (3 * MAX_WRITES_IN_FLIGHT)
    assert voltages(live_power) == [1, 2, *range(100, 100 + 3 * MAX_WRITES_IN_FLIGHT)]


def test_a_failed_write_async_fails_its_future_only(live_power: Connection) -> None:
    bad = rows(10, [9]).set_column(2, "voltage", pa.array(["high"]))
    made = [
        live_power.write_async("power.meters", rows(0, [1])),
        live_power.write_async("power.meters", bad),
        live_power.write_async("power.nothing", rows(20, [2])),
        live_power.write_async("power.meters", rows(30, [3])),
    ]
    futures.wait(made, timeout=ANSWER_DEADLINE_S)
    assert [type(f.exception()) for f in made] == [
        type(None),
        InvalidValueError,
        NotFoundError,
        type(None),
    ]
    with pytest.raises(InvalidValueError, match="voltage"):
        live_power.write("power.meters", bad)
    assert voltages(live_power) == [1, 3]


def test_writes_under_way_when_the_server_dies_fail_with_server_unavailable(
    server: ServerProcess, live_power: Connection
) -> None:
    assert live_power.write("power.meters", rows(0, [1])) == 1
    server.kill()
    with pytest.raises(ServerUnavailable):
        live_power.write("power.meters", rows(10, [2]))
    made = live_power.write_async("power.meters", rows(20, [3]))
    assert isinstance(made.exception(ANSWER_DEADLINE_S), ServerUnavailable)


def test_closing_with_writes_under_way_settles_every_one(server: ServerProcess) -> None:
    conn = connect(server.address)
    conn.execute(POWER)
    made = [conn.write_async("power.meters", rows(10 * k, [k])) for k in range(16)]
    stream = conn._writes
    assert stream is not None
    assert stream.reading()
    conn.close()
    assert not stream.reading()  # its reader ended with close() (client/readers.py)
    done, pending = futures.wait(made, timeout=ANSWER_DEADLINE_S)
    assert not pending
    # each was answered (written) or failed as cut off: ServerUnavailable, never a hang
    errors = {type(f.exception()) for f in done if f.exception() is not None}
    assert errors <= {ServerUnavailable}
    answered = sum(f.result() for f in done if f.exception() is None)
    with connect(server.address) as again:
        [(count,)] = again.execute("SELECT count(*) FROM power.meters").rows
    assert answered <= count <= 16  # one cut off may or may not have been written


def test_asyncio_writes_awaited_together_all_land(server: ServerProcess) -> None:
    async def main() -> None:
        async with await aio.connect(server.address) as conn:
            await conn.execute(POWER)
            writes = [conn.write("power.meters", rows(10 * k, [k])) for k in range(40)]
            bad = conn.write("power.nothing", rows(1000, [0]))
            got = await asyncio.gather(*writes, bad, return_exceptions=True)
            assert got[:40] == [1] * 40
            assert isinstance(got[40], NotFoundError)
            table = await conn.query("SELECT voltage FROM power.meters ORDER BY ts")
            assert table.column("voltage").to_pylist() == list(range(40))

    asyncio.run(main())


# --- a server without Writes ---------------------------------------------------------


def _forward(
    channel: grpc.Channel, method: str, streaming: bool
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler passing `method`'s request bytes to `channel` and its answer back."""

    def call(request: object, context: grpc.ServicerContext) -> bytes:
        metadata = context.invocation_metadata()
        forward: Any = channel.stream_unary(method) if streaming else channel.unary_unary(method)
        try:
            return cast(bytes, forward(request, metadata=metadata))
        except grpc.RpcError as exc:
            failed = cast(grpc.Call, exc)
            context.abort(failed.code(), failed.details() or "")

    if streaming:
        return grpc.stream_unary_rpc_method_handler(call)
    return grpc.unary_unary_rpc_method_handler(call)


@pytest.fixture
def without_writes(server: ServerProcess) -> Iterator[str]:
    """The address of a real gRPC server forwarding Session and Sql.Write to `server`,
    as a server from before Sql.Writes would serve them (Writes: UNIMPLEMENTED)."""
    channel = grpc.insecure_channel(server.address)
    proxy = grpc.server(futures.ThreadPoolExecutor(4))
    methods = {"Session": ("Login", "Logout"), "Sql": ("Write",)}
    for service, names in methods.items():
        handlers = {
            name: _forward(channel, f"/sqltopic.v1.{service}/{name}", name == "Write")
            for name in names
        }
        proxy.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(f"sqltopic.v1.{service}", handlers),)
        )
    port = proxy.add_insecure_port("127.0.0.1:0")
    proxy.start()
    yield f"127.0.0.1:{port}"
    proxy.stop(None)
    channel.close()


def test_without_writes_on_the_server_the_client_uses_write_calls(
    without_writes: str, live_power: Connection
) -> None:
    with connect(without_writes) as old:
        assert old.write("power.meters", rows(0, [1])) == 1  # the stream refused: Write
        made = [old.write_async("power.meters", rows(10 * k, [k])) for k in range(2, 6)]
        assert [f.result(ANSWER_DEADLINE_S) for f in made] == [1, 1, 1, 1]

    async def main() -> None:
        async with await aio.connect(without_writes) as conn:
            assert await conn.write("power.meters", rows(100, [6])) == 1
            assert await conn.write("power.meters", rows(110, [7])) == 1

    asyncio.run(main())
    assert voltages(live_power) == [1, 2, 3, 4, 5, 6, 7]


# --- routed writes (a cluster's dnodes) ------------------------------------------------


def _spread(devices: int, first_ts: int) -> pa.Table:
    """One row for each of `devices` children d0.., voltage = the device's number, ts
    from `first_ts` on in the devices' order."""
    return pa.concat_tables([rows(first_ts + d, [d], f"d{d}") for d in range(devices)])


def test_routed_parts_go_on_each_dnode_s_stream_or_by_write_calls(
    server: ServerProcess, without_writes: str, live_power: Connection
) -> None:
    """A connection whose routes place power's two vgroups at two "dnodes": the server
    itself (its part goes on a Writes stream of its own) and the proxy without Writes
    (its part goes by a Write call, from the first on). Every row lands, in order."""
    with connect(server.address, password="taosdata") as conn:
        conn._routes = Routes(1, True, {"power": ((1, server.address), (2, without_writes))})
        for k in range(3):
            assert conn.write("power.meters", _spread(40, 1000 * k)) == 40
        streamed, proxied = conn._dnodes[server.address], conn._dnodes[without_writes]
        assert streamed.writes is not None
        assert not streamed.writes.broken
        assert not streamed.unstreamed
        assert proxied.unstreamed
        conn.close()
        assert not streamed.writes.reading()  # closed with the connection
    got = live_power.execute("SELECT tbname, voltage FROM power.meters ORDER BY ts").rows
    assert got == [(f"d{d}", d) for _ in range(3) for d in range(40)]


def test_an_asyncio_connection_s_routed_parts_go_the_same_ways(
    server: ServerProcess, without_writes: str, live_power: Connection
) -> None:
    async def main() -> None:
        async with await aio.connect(server.address) as conn:
            conn._routes = Routes(1, True, {"power": ((1, server.address), (2, without_writes))})
            for k in range(3):
                assert await conn.write("power.meters", _spread(40, 1000 * k)) == 40
            streamed, proxied = conn._dnodes[server.address], conn._dnodes[without_writes]
            assert streamed.writes is not None
            assert not streamed.writes.broken
            assert proxied.unstreamed

    asyncio.run(main())
    got = live_power.execute("SELECT tbname, voltage FROM power.meters ORDER BY ts").rows
    assert got == [(f"d{d}", d) for _ in range(3) for d in range(40)]


def test_a_finished_stream_answers_the_writes_under_way_and_refuses_later_ones(
    live_power: Connection,
) -> None:
    """`finish` (a dnode's stream retired after a refusal): the writes sent before it
    are answered, one sent after fails unsent (Retired), and the stream ends."""
    conn = live_power
    stream = WriteStream(conn._start_writes, conn._translate)
    made = [stream.submit("power.meters", None, to_ipc(rows(10 * k, [k])).to_pybytes())
            for k in range(1, 4)]  # fmt: skip
    stream.finish()
    late = stream.submit("power.meters", None, to_ipc(rows(100, [9])).to_pybytes())
    assert [f.result(ANSWER_DEADLINE_S) for f in made] == [1, 1, 1]
    assert isinstance(late.exception(ANSWER_DEADLINE_S), Retired)
    wait_for(lambda: not stream.reading(), "the finished stream's end")
    stream.close()

    async def main() -> None:
        async with await aio.connect(conn.address) as aconn:
            astream = AioWriteStream(aconn._sql.Writes(metadata=aconn._metadata), aconn._translate)
            under_way = [asyncio.create_task(astream.write(
                "power.meters", None, to_ipc(rows(200 + 10 * k, [k])).to_pybytes(), 30.0,
            )) for k in range(4, 7)]  # fmt: skip
            await asyncio.sleep(0)  # each sent (queued) before the finish
            astream.finish()
            assert await asyncio.gather(*under_way) == [1, 1, 1]
            with pytest.raises(Retired):
                await astream.write("power.meters", None, to_ipc(rows(300, [9])).to_pybytes(), 30.0)
            astream.close()

    asyncio.run(main())
    assert voltages(live_power) == [1, 2, 3, 4, 5, 6]
