"""The asyncio `Connection` of `sqltopic.aio` (`await connect()`): SQL and Arrow writes
as coroutines, routed on a cluster exactly as the sync Connection routes them
(connection.py, routing.py). Writes to the server connected to go as messages on one
`Sql.Writes` stream (write_stream.py): writes awaited together are under way together;
on a cluster, each part on a stream to its dnode.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

import grpc
import pyarrow as pa
from grpc import aio

from sqltopic.client.connection import (
    CLIENT_NAME,
    DEFAULT_ADDRESS,
    DEFAULT_TIMEOUT_S,
    LOGOUT_TIMEOUT_S,
    Result,
    Unreachable,
    _error_of,
    _read_result,
    _translated,
    _write_frames,
    dnode_error,
    writes_only,
)
from sqltopic.client.effects import Metadata
from sqltopic.client.routing import (
    HERE,
    Outcome,
    ReadRoutes,
    Routes,
    SendPart,
    database_of,
    outcomes_of,
    write_flow,
)
from sqltopic.client.tls import PLAIN, PathArg, Transport, load_transport, tls_files
from sqltopic.client.write_stream import (
    STREAM_WRITE_BYTES,
    AioWriteStream,
    Retired,
    Unstreamed,
)
from sqltopic.errors import AuthenticationFailed, Error, ServerUnavailable, VgroupUnavailable
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, MESSAGE_OPTIONS, chunks, from_ipc, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import unimplemented


@dataclass
class _Dnode:
    """A dnode this connection writes to, logged in; its parts of writes go as messages
    on one Writes stream (as connection.py's)."""

    channel: aio.Channel
    sql: pb_grpc.SqlAsyncStub
    metadata: Metadata
    writes: AioWriteStream | None = None  # opened by the first part sent
    unstreamed: bool = False  # the dnode has no Sql.Writes: Write calls
    retired: list[AioWriteStream] = field(default_factory=list)  # ending after a refusal

    def stream(self, translate: Callable[[grpc.RpcError], Error]) -> AioWriteStream:
        if self.writes is None or self.writes.broken:
            self.writes = AioWriteStream(self.sql.Writes(metadata=self.metadata), translate)
        return self.writes

    def retire(self, stream: AioWriteStream) -> None:
        """`stream` refused a write as VgroupUnavailable, and refuses the ones after it:
        it ends once they are answered, and the next parts go on a new stream."""
        if self.writes is stream:
            self.writes = None
            stream.finish()
            self.retired.append(stream)

    async def close(self) -> None:
        for stream in [*self.retired, *([self.writes] if self.writes else [])]:
            stream.close()
        await self.channel.close()


class Connection:
    """A logged-in session (as `sqltopic.Connection`), with coroutine methods."""

    def __init__(
        self,
        address: str,
        token: str,
        channel: aio.Channel,
        timeout: float,
        transport: Transport = PLAIN,
        login: tuple[str, str] | None = None,
    ) -> None:
        """`login`: the user and password, for the dnodes of a cluster (writes to
        them); without it every call goes to `address`."""
        self.address = address
        self._login = login
        self._database: str | None = None  # the session's, as the last statement left it
        self._routes: Routes | None = None
        self._dnodes: dict[str, _Dnode] = {}
        self._transport = transport
        self._channel = channel
        self._sql = pb_grpc.SqlStub(channel)
        self._session = pb_grpc.SessionStub(channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout
        self._closed = False
        self._writes: AioWriteStream | None = None  # opened by the first write
        self._unstreamed = False  # the server has no Sql.Writes: Write calls

    async def execute(self, sql: str) -> Result:
        """Run one or more statements; the last one's result."""
        request = pb.ExecuteRequest(sql=sql)
        with _translated(self._transport):
            if writes_only(sql):
                answer = await self._sql.Run(
                    request, metadata=self._metadata, timeout=self._timeout
                )
                header, parts = _read_result([answer])
            else:
                call = self._sql.Execute(request, metadata=self._metadata, timeout=self._timeout)
                header, parts = _read_result([frame async for frame in call])
        self._database = header.database or None
        return Result(from_ipc(parts), header.affected_rows, header.database or None)

    async def query(self, sql: str) -> pa.Table:
        """Run a query; its rows as an Arrow table."""
        return (await self.execute(sql)).to_arrow()

    async def write(self, target: str, data: pa.Table, database: str | None = None) -> int:
        """Append Arrow rows to `[db.]table` or `[db.]stable` (see Connection.write: on a
        cluster, straight to the dnodes hosting them)."""
        db = database_of(target, database or self._database)
        routes = self._routes if self._routes is not None else await self._read_routes()
        if not routes.routed or db is None:
            return await self._write_here(target, data, database)
        flow = write_flow(routes, db, target, data)
        try:
            step = next(flow)
            while True:
                if isinstance(step, ReadRoutes):
                    await asyncio.sleep(step.pause_s)
                    step = flow.send(await self._read_routes())
                else:
                    step = flow.send(await self._send_parts(step.parts, target, db))
        except StopIteration as done:
            return int(done.value)
        except Unreachable as exc:
            raise exc.error from None

    async def _write_here(self, target: str, data: pa.Table, database: str | None) -> int:
        """A write to the server connected to: on the Writes stream when it fits one
        message and the server has the method, else by a Write call."""
        ipc = to_ipc(data)
        if not self._unstreamed and len(ipc) <= STREAM_WRITE_BYTES:
            if self._writes is None or self._writes.broken:
                call = self._sql.Writes(metadata=self._metadata)
                self._writes = AioWriteStream(call, self._translate)
            try:
                return await self._writes.write(target, database, ipc.to_pybytes(), self._timeout)
            except Unstreamed:  # nothing was written
                self._unstreamed = True
        return await self._write_at(HERE, target, data, database)

    def _translate(self, exc: grpc.RpcError) -> Error:
        return _error_of(exc, self._transport)

    async def _send_parts(self, parts: tuple[SendPart, ...], target: str, db: str) -> list[Outcome]:
        """Each part written at its dnode, the calls all under way at once."""
        calls = (self._write_at(p.endpoint, target, p.data, db) for p in parts)
        return outcomes_of(await asyncio.gather(*calls, return_exceptions=True))

    async def _write_at(self, endpoint: str, target: str, data: pa.Table, db: str | None) -> int:
        """Write `data` at `endpoint` (HERE: the server connected to), logging in to a
        dnode first, and again once if it restarted meanwhile (its sessions are gone)."""
        ipc = to_ipc(data)
        for again in (False, True):
            if endpoint == HERE:
                return await self._write_call(self._sql, self._metadata, target, ipc, db)
            dnode = await self._dnode(endpoint)
            stream: AioWriteStream | None = None
            try:
                if dnode.unstreamed or len(ipc) > STREAM_WRITE_BYTES:
                    return await self._write_call(dnode.sql, dnode.metadata, target, ipc, db)
                stream = dnode.stream(self._translate)
                try:
                    return await stream.write(target, db, ipc.to_pybytes(), self._timeout)
                except Unstreamed:  # nothing was written
                    dnode.unstreamed = True
                    return await self._write_call(dnode.sql, dnode.metadata, target, ipc, db)
                except Retired:  # retired while this write waited for room: the next one
                    return await self._write_at(endpoint, target, data, db)
            except Error as exc:
                error = exc
            gone = type(error) is ServerUnavailable or isinstance(error, AuthenticationFailed)
            if isinstance(error, VgroupUnavailable) and stream is not None:
                dnode.retire(stream)  # it refuses every later write: a new one for those
            elif gone and self._dnodes.get(endpoint) is dnode:  # not again for one old login
                await self._forget_dnode(endpoint)
            if isinstance(error, AuthenticationFailed) and not again:
                continue  # nothing was written: log in anew and send it again
            raise dnode_error(endpoint, error)
        raise AssertionError("unreachable")

    async def _write_call(
        self, stub: pb_grpc.SqlAsyncStub, metadata: Metadata, target: str, ipc: pa.Buffer,
        db: str | None,
    ) -> int:  # fmt: skip
        """The rows of a Write call of a write's Arrow stream `ipc`."""
        frames = _write_frames(target, db, chunks(ipc, MAX_CHUNK_BYTES))
        try:
            answer = await stub.Write(frames, metadata=metadata, timeout=self._timeout)
        except aio.AioRpcError as exc:
            raise _error_of(exc, self._transport) from None
        return int(answer.rows)

    async def _dnode(self, endpoint: str) -> _Dnode:
        found = self._dnodes.get(endpoint)
        if found is not None:
            return found
        if self._closed:
            raise ServerUnavailable("the connection is closed")
        if self._login is None:
            raise ServerUnavailable(
                f"this connection has no credentials to log in to the dnode at {endpoint}: "
                "connect with sqltopic.aio.connect()"
            )
        channel = self._transport.aio_channel(endpoint, MESSAGE_OPTIONS)
        user, password = self._login
        request = pb.LoginRequest(user=user, password=password, client_name=CLIENT_NAME)
        try:
            login = await pb_grpc.SessionStub(channel).Login(request, timeout=self._timeout)
        except aio.AioRpcError as exc:
            await channel.close()
            error = _error_of(exc, self._transport)
            raise dnode_error(endpoint, error) from None
        bearer = (("authorization", f"Bearer {login.token}"),)
        found = self._dnodes[endpoint] = _Dnode(channel, pb_grpc.SqlStub(channel), bearer)
        return found

    async def _forget_dnode(self, endpoint: str) -> None:
        found = self._dnodes.pop(endpoint, None)
        if found is not None:
            await found.close()

    async def _read_routes(self) -> Routes:
        """The routes as the server now gives them (none from a server without them)."""
        stub = pb_grpc.MnodeStub(self._channel)
        try:
            answer = await stub.Routes(
                pb.RoutesRequest(), metadata=self._metadata, timeout=self._timeout
            )
            self._routes = Routes.of(answer)
        except aio.AioRpcError as exc:
            if not unimplemented(exc):
                raise _error_of(exc, self._transport) from None
            self._routes = Routes()
        return self._routes

    async def close(self) -> None:
        """Log out and close the channel; later calls fail."""
        if self._closed:
            return
        self._closed = True
        if self._writes is not None:
            self._writes.close()
        for endpoint, dnode in list(self._dnodes.items()):
            with contextlib.suppress(aio.AioRpcError):  # gone: the token died with it
                await pb_grpc.SessionStub(dnode.channel).Logout(
                    pb.LogoutRequest(), metadata=dnode.metadata, timeout=LOGOUT_TIMEOUT_S
                )
            await self._forget_dnode(endpoint)
        try:
            await self._session.Logout(
                pb.LogoutRequest(), metadata=self._metadata, timeout=LOGOUT_TIMEOUT_S
            )
        except aio.AioRpcError:
            pass  # the server may be gone; the token dies with it
        finally:
            await self._channel.close()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def connect(
    address: str = DEFAULT_ADDRESS,
    user: str = "root",
    password: str = "taosdata",
    database: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    tls: bool = False,
    tls_ca: PathArg = None,
    tls_cert: PathArg = None,
    tls_key: PathArg = None,
) -> Connection:
    """Log in to the server at `address` (`host:port`); `database` is then in use. TLS
    as `sqltopic.connect`: `tls_ca` or `tls=True`, and `tls_cert` + `tls_key` for mutual
    TLS."""
    transport = load_transport(tls_files(tls, tls_ca, tls_cert, tls_key))
    channel = transport.aio_channel(address, MESSAGE_OPTIONS)
    try:
        request = pb.LoginRequest(user=user, password=password, client_name=CLIENT_NAME)
        with _translated(transport):
            login = await pb_grpc.SessionStub(channel).Login(request, timeout=timeout)
        conn = Connection(address, login.token, channel, timeout, transport, (user, password))
        if database is not None:
            await conn.execute(f"USE {database}")
    except BaseException:
        await channel.close()
        raise
    return conn
