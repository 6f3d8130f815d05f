"""The Python client of a sqltopic server: `connect()` logs in and returns a
`Connection` that runs SQL (`execute`, `query`) and fast Arrow writes (`write`, and
`write_async` to keep several under way), over plain text or TLS (tls.py). Writes go
as messages on one `Sql.Writes` stream (write_stream.py). On a cluster, writes go
straight to the dnodes that host their rows (routing.py): the connection logs in to
each with the same credentials.

It speaks only the public protocol (`proto/sqltopic/v1/sqltopic.proto`); a server error
comes back as the very `sqltopic.Error` subclass the server raised, and a failed TLS
handshake as a `TlsHandshakeError` that says what to check.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeAlias, cast

import grpc
import pyarrow as pa

from sqltopic.client.routed_writes import Routed, RoutedWrites
from sqltopic.client.routing import (
    HERE,
    Outcome,
    ReadRoutes,
    Routes,
    SendPart,
    SendParts,
    WriteStep,
    database_of,
    outcomes_of,
    write_flow,
)
from sqltopic.client.rows import table_rows
from sqltopic.client.tls import (
    PLAIN,
    PathArg,
    Transport,
    handshake_error,
    load_transport,
    tls_files,
)
from sqltopic.client.write_stream import (
    STREAM_WRITE_BYTES,
    Retired,
    Unstreamed,
    WriteStream,
    write_timed_out,
)
from sqltopic.errors import AuthenticationFailed, Error, ServerUnavailable, VgroupUnavailable
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, MESSAGE_OPTIONS, chunks, from_ipc, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import from_status, unimplemented

DEFAULT_ADDRESS = "127.0.0.1:6030"
CLIENT_NAME = "sqltopic-python"
# Generous for a large query or write, but a dead server still fails the call eventually.
DEFAULT_TIMEOUT_S = 300.0
# A logout is a courtesy (the token dies with the process anyway): never wait long.
LOGOUT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Result:
    """What a statement returned: its rows as an Arrow table, and how many rows (INSERT)
    or objects (DDL) it changed."""

    table: pa.Table = field(default_factory=lambda: pa.table({}))
    affected_rows: int = 0
    database: str | None = None

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        return table_rows(self.table)

    def to_arrow(self) -> pa.Table:
        return self.table


@dataclass
class _Dnode:
    """A dnode this connection writes to, logged in with its credentials; its parts of
    writes go as messages on one Writes stream (a Write call each costs a call and, in
    grpc's sync client, a thread to send its frames)."""

    channel: grpc.Channel
    sql: pb_grpc.SqlStub
    metadata: tuple[tuple[str, str], ...]
    writes: WriteStream | None = None  # opened by the first part sent
    unstreamed: bool = False  # the dnode has no Sql.Writes: Write calls
    retired: list[WriteStream] = field(default_factory=list)  # ending after a refusal

    def stream(self, translate: Callable[[grpc.RpcError], Error]) -> WriteStream:
        if self.writes is None or self.writes.broken:
            self.writes = WriteStream(self._start, translate)
        return self.writes

    def _start(self, requests: Iterator[pb.WritesRequest]) -> Any:
        return self.sql.Writes(requests, metadata=self.metadata)

    def retire(self, stream: WriteStream) -> None:
        """`stream` refused a write: it refuses the ones after it too, then ends (its
        requests end here); the next parts go on a new stream."""
        if self.writes is stream:
            self.writes = None
            stream.finish()
            self.retired.append(stream)

    def close(self) -> None:
        for stream in [*self.retired, *([self.writes] if self.writes else [])]:
            stream.close()
        self.channel.close()


@dataclass(frozen=True)
class _StreamPart:
    """A part of a write under way on a dnode's Writes stream."""

    stream: WriteStream
    future: futures.Future[int]
    dnode: _Dnode  # logged in to then (a restarted dnode's parts see a newer one)


# A part of a write under way at a dnode: a Write call, or a write on its Writes stream.
_Sent: TypeAlias = "grpc.Future[pb.WriteResponse] | _StreamPart"
# A part as it was started: under way, or what starting it raised (a call is itself an
# RpcError, so the two are kept apart).
_Started: TypeAlias = "tuple[_Sent | None, Exception | None]"


class Unreachable(Exception):
    """A dnode did not answer: the write may or may not have reached it, so it is not
    sent again (the error says so)."""

    def __init__(self, error: Error) -> None:
        self.error = error


class Connection:
    """A logged-in session on a server. Not thread-safe: use one per thread."""

    def __init__(
        self,
        address: str,
        token: str,
        channel: grpc.Channel,
        timeout: float,
        transport: Transport = PLAIN,
        login: tuple[str, str] | None = None,
    ) -> None:
        """`login`: the user and password, for the dnodes of a cluster (writes to
        them); without it every call goes to `address`."""
        self.address = address
        self._transport = transport
        self._channel = channel
        self._sql = pb_grpc.SqlStub(channel)
        self._session = pb_grpc.SessionStub(channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout
        self._closed = False
        self._login = login
        self._database: str | None = None  # the session's, as the last statement left it
        self._routes: Routes | None = None
        self._dnodes: dict[str, _Dnode] = {}
        self._writes: WriteStream | None = None  # opened by the first write
        self._routed: RoutedWrites | None = None  # a cluster's writes under way
        self._unstreamed = False  # the server has no Sql.Writes: Write calls

    def execute(self, sql: str) -> Result:
        """Run one or more statements; the last one's result."""
        request = pb.ExecuteRequest(sql=sql)
        with _translated(self._transport):
            if writes_only(sql):
                answer = self._sql.Run(request, metadata=self._metadata, timeout=self._timeout)
                header, parts = _read_result([answer])
            else:
                frames = self._sql.Execute(request, metadata=self._metadata, timeout=self._timeout)
                header, parts = _read_result(frames)
        self._database = header.database or None
        return Result(from_ipc(parts), header.affected_rows, header.database or None)

    def query(self, sql: str) -> pa.Table:
        """Run a query; its rows as an Arrow table."""
        return self.execute(sql).to_arrow()

    def write(self, target: str, data: pa.Table, database: str | None = None) -> int:
        """Append Arrow rows to `[db.]table`, or to `[db.]stable` with a `tbname` column
        (and tag columns). Returns rows written, after the server's WAL append.

        On a cluster the rows go to the dnodes hosting their vgroups, each part atomic
        on its vgroup (as a write over several vgroups of one server is); a dnode that
        says the routes are stale gets its part again after they are read anew."""
        return self.write_async(target, data, database).result()

    def write_async(
        self, target: str, data: pa.Table, database: str | None = None
    ) -> futures.Future[int]:
        """`write` without waiting for the answer: the future of the rows written (or of
        the error `write` would raise). Writes are applied in the order they are made;
        each is atomic on its own, and one failing leaves the others as they are. Up to
        16 are under way at once (MAX_WRITES_IN_FLIGHT): past that, this waits for room.
        On a cluster (rows routed to dnodes) as many are under way on each dnode's
        stream, and the order holds on every vgroup (routed_writes.py)."""
        db = database_of(target, database or self._database)
        if not self._current_routes().routed or db is None:
            return self._write_here(target, data, database)
        if self._closed:
            raise ServerUnavailable("the connection is closed")
        if self._routed is None:
            self._routed = RoutedWrites()
        return self._routed.submit(lambda: self._send_routed(db, target, data))

    def _send_routed(self, db: str, target: str, data: pa.Table) -> Routed:
        """A write's parts sent to the dnodes hosting them (by the current routes)."""
        flow = write_flow(self._current_routes(), db, target, data)
        step = next(flow)  # the first step sends every part
        assert isinstance(step, SendParts)
        started = self._start_parts(step.parts, target, db)

        def finish() -> int:
            try:
                outcomes = self._finish_parts(step.parts, started, target, db)
                return self._drive(flow, outcomes, target, db)
            except Unreachable as exc:
                raise exc.error from None

        return Routed(lambda: self._all_written(started), finish)

    def _drive(
        self, flow: Generator[WriteStep, Any, int], outcomes: list[Outcome], target: str, db: str
    ) -> int:
        """The rest of a routed write's flow, given its first parts' outcomes: the parts
        a dnode refused as stale sent again once the routes are read anew."""
        try:
            step = flow.send(outcomes)
            while True:
                if isinstance(step, ReadRoutes):
                    time.sleep(step.pause_s)
                    step = flow.send(self._read_routes())
                else:
                    step = flow.send(self._send_parts(step.parts, target, db))
        except StopIteration as done:
            return int(done.value)

    def _write_here(self, target: str, data: pa.Table, database: str | None) -> _Written:
        """A write to the server connected to, under way: on the Writes stream when it
        fits one message and the server has the method, else by a Write call."""
        ipc = to_ipc(data)
        if self._unstreamed or len(ipc) > STREAM_WRITE_BYTES:
            return _Written.made(lambda: self._write_at(HERE, target, data, database))
        if self._writes is None or self._writes.broken:
            self._writes = WriteStream(self._start_writes, self._translate)
        future = self._writes.submit(target, database, ipc.to_pybytes())
        return _Written(future, self._timeout, lambda: self._unstream(target, data, database))

    def _start_writes(self, requests: Iterator[pb.WritesRequest]) -> Any:
        return self._sql.Writes(requests, metadata=self._metadata)

    def _translate(self, exc: grpc.RpcError) -> Error:
        return _error_of(exc, self._transport)

    def _unstream(self, target: str, data: pa.Table, database: str | None) -> int:
        """The server has no Writes (nothing was written): Write calls from now on."""
        self._unstreamed = True
        return self._write_at(HERE, target, data, database)

    def _send_parts(self, parts: tuple[SendPart, ...], target: str, db: str) -> list[Outcome]:
        """Each part written at its dnode, all under way at once."""
        return self._finish_parts(parts, self._start_parts(parts, target, db), target, db)

    def _start_parts(self, parts: tuple[SendPart, ...], target: str, db: str) -> list[_Started]:
        started: list[_Started] = []
        for part in parts:
            try:
                started.append((self._start_part(part.endpoint, target, part.data, db), None))
            except Exception as exc:  # raised once every part was answered
                started.append((None, exc))
        return started

    def _finish_parts(
        self, parts: tuple[SendPart, ...], started: list[_Started], target: str, db: str
    ) -> list[Outcome]:
        """Each part's outcome (its rows, or its dnode's word that the routes are stale),
        once every part was answered; the first other error is raised then."""
        results: list[int | BaseException] = []
        for part, (sent, failed) in zip(parts, started, strict=True):
            try:
                if sent is None:
                    raise cast(Exception, failed)
                results.append(self._finish_write(part.endpoint, target, part.data, db, sent))
            except Exception as exc:  # as above
                results.append(exc)
        return outcomes_of(results)

    def _all_written(self, started: list[_Started]) -> bool:
        """Waits for every part's answer: whether each was written."""
        for sent, _failed in started:
            if sent is None:
                return False
            try:
                if isinstance(sent, _StreamPart):
                    sent.future.result(self._timeout)
                else:
                    sent.result(self._timeout)
            except Exception:  # refused, failed or late: _finish_write says how
                return False
        return True

    def _start_part(self, endpoint: str, target: str, data: pa.Table, db: str) -> _Sent:
        """A part of a routed write under way: on the dnode's Writes stream when it fits
        one message and the dnode has the method, else by a Write call."""
        ipc = to_ipc(data)
        if endpoint == HERE:
            return self._start_write(endpoint, target, ipc, db)
        dnode = self._dnode(endpoint)
        if dnode.unstreamed or len(ipc) > STREAM_WRITE_BYTES:
            return self._start_write(endpoint, target, ipc, db)
        stream = dnode.stream(self._translate)
        return _StreamPart(stream, stream.submit(target, db, ipc.to_pybytes()), dnode)

    def _write_at(self, endpoint: str, target: str, data: pa.Table, db: str | None) -> int:
        """Write `data` at `endpoint` (HERE: the server connected to)."""
        call = self._start_write(endpoint, target, to_ipc(data), db)
        return self._finish_write(endpoint, target, data, db, call)

    def _start_write(
        self, endpoint: str, target: str, ipc: pa.Buffer, db: str | None
    ) -> grpc.Future[pb.WriteResponse]:
        """The Write call of a write's Arrow stream `ipc` at `endpoint`, under way; at a
        dnode, logged in first."""
        stub: pb_grpc.SqlStub = self._sql
        metadata: tuple[tuple[str, str], ...] = self._metadata
        if endpoint != HERE:
            dnode = self._dnode(endpoint)
            stub, metadata = dnode.sql, dnode.metadata
        frames = _write_frames(target, db, chunks(ipc, MAX_CHUNK_BYTES))
        return stub.Write.future(frames, metadata=metadata, timeout=self._timeout)

    def _finish_write(
        self, endpoint: str, target: str, data: pa.Table, db: str | None, sent: _Sent,
        again: bool = False,
    ) -> int:  # fmt: skip
        """The rows `sent` wrote; a dnode without Writes gets `data` by a Write call, and
        one that restarted meanwhile (its sessions are gone) is logged in to anew and
        sent `data` again, once (nothing was written in either case)."""
        try:
            return self._rows_of(sent)
        except Unstreamed:
            self._dnode(endpoint).unstreamed = True
            retry = self._start_write(endpoint, target, to_ipc(data), db)
            return self._finish_write(endpoint, target, data, db, retry, again)
        except Retired:  # finished before this part went out: nothing was written
            resent = self._start_part(endpoint, target, data, db or "")
            return self._finish_write(endpoint, target, data, db, resent, again)
        except Error as exc:
            error = exc
        if endpoint == HERE:
            raise error
        gone = type(error) is ServerUnavailable or isinstance(error, AuthenticationFailed)
        current = self._dnodes.get(endpoint)
        if isinstance(error, VgroupUnavailable) and isinstance(sent, _StreamPart):
            # the stream refuses every later write (server/rpc/write_stream.py): the
            # next ones go on a new one
            sent.dnode.retire(sent.stream)
        elif gone and (not isinstance(sent, _StreamPart) or current is sent.dnode):
            # gone, or restarted: log in anew next time (once: not again for a later
            # part sent with the same old login)
            self._forget_dnode(endpoint)
        if isinstance(error, AuthenticationFailed) and not again:
            retry = self._start_write(endpoint, target, to_ipc(data), db)
            return self._finish_write(endpoint, target, data, db, retry, again=True)
        raise dnode_error(endpoint, error)

    def _rows_of(self, sent: _Sent) -> int:
        """The rows of a Write call or of a write on a stream, or the sqltopic error."""
        if isinstance(sent, _StreamPart):
            try:
                return sent.future.result(self._timeout)
            except futures.TimeoutError:
                raise write_timed_out(self._timeout) from None
        try:
            return int(sent.result().rows)
        except grpc.RpcError as exc:
            raise _error_of(exc, self._transport) from None

    def _dnode(self, endpoint: str) -> _Dnode:
        found = self._dnodes.get(endpoint)
        if found is not None:
            return found
        if self._closed:
            raise ServerUnavailable("the connection is closed")
        if self._login is None:
            raise ServerUnavailable(
                f"this connection has no credentials to log in to the dnode at {endpoint}: "
                "connect with sqltopic.connect()"
            )
        channel = self._transport.channel(endpoint, MESSAGE_OPTIONS)
        user, password = self._login
        try:
            login = pb_grpc.SessionStub(channel).Login(
                pb.LoginRequest(user=user, password=password, client_name=CLIENT_NAME),
                timeout=self._timeout,
            )
        except grpc.RpcError as exc:
            channel.close()
            error = _error_of(exc, self._transport)
            raise dnode_error(endpoint, error) from None
        bearer = (("authorization", f"Bearer {login.token}"),)
        dnode = _Dnode(channel, pb_grpc.SqlStub(channel), bearer)
        self._dnodes[endpoint] = dnode
        return dnode

    def _forget_dnode(self, endpoint: str) -> None:
        dnode = self._dnodes.pop(endpoint, None)
        if dnode is not None:
            dnode.close()

    def _current_routes(self) -> Routes:
        return self._routes if self._routes is not None else self._read_routes()

    def _read_routes(self) -> Routes:
        """The routes as the server now gives them (none from a server without them)."""
        stub = pb_grpc.MnodeStub(self._channel)
        try:
            answer = stub.Routes(pb.RoutesRequest(), metadata=self._metadata, timeout=self._timeout)
            self._routes = Routes.of(answer)
        except grpc.RpcError as exc:
            if not unimplemented(exc):
                raise _error_of(exc, self._transport) from None
            self._routes = Routes()
        return self._routes

    def close(self) -> None:
        """Log out and close the channel; later calls fail."""
        if self._closed:
            return
        self._closed = True
        if self._writes is not None:
            self._writes.close()
        # the dnodes' streams close below (what they had under way fails at once), then
        # the routed writes' thread, having settled them, ends
        for endpoint, dnode in list(self._dnodes.items()):
            with contextlib.suppress(grpc.RpcError):  # gone: the token died with it
                pb_grpc.SessionStub(dnode.channel).Logout(
                    pb.LogoutRequest(), metadata=dnode.metadata, timeout=LOGOUT_TIMEOUT_S
                )
            self._forget_dnode(endpoint)
        if self._routed is not None:
            self._routed.close()
        try:
            self._session.Logout(
                pb.LogoutRequest(), metadata=self._metadata, timeout=LOGOUT_TIMEOUT_S
            )
        except grpc.RpcError:
            pass  # the server may be gone; the token dies with it
        finally:
            self._channel.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _Written(futures.Future[int]):
    """A write under way on the Writes stream: its rows, its error, or (the server has no
    Writes) the rows of the Write call `instead` makes, on the ended stream's thread in
    the writes' order. `result()` waits at most the connection's timeout."""

    def __init__(
        self, sent: futures.Future[int] | None, timeout: float, instead: Callable[[], int]
    ) -> None:
        super().__init__()
        self._timeout = timeout
        self._instead = instead
        if sent is not None:
            sent.add_done_callback(self._settle)

    @classmethod
    def made(cls, write: Callable[[], int]) -> _Written:
        """A write made at once by `write` (Write calls)."""
        written = cls(None, 0.0, write)
        written._run(write)
        return written

    def _run(self, write: Callable[[], int]) -> None:
        try:
            self.set_result(write())
        except Error as exc:
            self.set_exception(exc)

    def _settle(self, sent: futures.Future[int]) -> None:
        error = sent.exception()
        if isinstance(error, Unstreamed):  # on the ended stream's thread, in order
            self._run(self._instead)
        elif error is not None:
            self.set_exception(error)
        else:
            self.set_result(sent.result())

    def result(self, timeout: float | None = None) -> int:
        try:
            return super().result(self._timeout if timeout is None else timeout)
        except futures.TimeoutError:
            if not self.done():
                raise write_timed_out(self._timeout) from None
            raise


def connect(
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
    """Log in to the server at `address` (`host:port`); `database` is then in use.

    TLS: `tls_ca` (the PEM file of the CA that signed the server's certificate) or
    `tls=True` (gRPC's default roots); `tls_cert` and `tls_key` (PEM files, both or
    neither) add the client's certificate for a server that requires one (mutual TLS).
    A bad file raises ConfigError; a failed handshake TlsHandshakeError."""
    transport = load_transport(tls_files(tls, tls_ca, tls_cert, tls_key))
    return connect_with(transport, address, user, password, database, timeout=timeout)


def connect_with(
    transport: Transport,
    address: str = DEFAULT_ADDRESS,
    user: str = "root",
    password: str = "taosdata",
    database: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Connection:
    """`connect()` over a transport loaded already (the CLI names its own options)."""
    channel = transport.channel(address, MESSAGE_OPTIONS)
    try:
        with _translated(transport):
            login = pb_grpc.SessionStub(channel).Login(
                pb.LoginRequest(user=user, password=password, client_name=CLIENT_NAME),
                timeout=timeout,
            )
        conn = Connection(address, login.token, channel, timeout, transport, (user, password))
        if database is not None:
            conn.execute(f"USE {database}")
    except BaseException:
        channel.close()
        raise
    return conn


def writes_only(sql: str) -> bool:
    """Whether `sql` is INSERT statements only, whose result is small: those go by the
    unary Sql.Run (cheaper than the stream of Execute). A `;` inside (other than a last
    one) may start a query, or sit in a string: Execute then, to be safe."""
    text = sql.strip().rstrip(";")
    return text[:6].upper() == "INSERT" and ";" not in text


def _read_result(frames: Iterable[pb.ExecuteResponse]) -> tuple[pb.ResultHeader, list[bytes]]:
    header = pb.ResultHeader()
    parts: list[bytes] = []
    for frame in frames:
        if frame.HasField("header"):
            header = frame.header
        if frame.arrow_ipc:
            parts.append(frame.arrow_ipc)
    return header, parts


def _write_frames(
    target: str, database: str | None, parts: Iterator[bytes]
) -> Iterator[pb.WriteRequest]:
    # the first frame carries the first part too: a small write is one message
    first = pb.WriteRequest(target=target, arrow_ipc=next(parts, b""))
    if database is not None:
        first.database = database
    yield first
    for part in parts:
        yield pb.WriteRequest(arrow_ipc=part)


@contextmanager
def _translated(transport: Transport) -> Iterator[None]:
    """Turns a failed call on a channel of `transport` into the sqltopic error its
    status describes."""
    try:
        yield
    except grpc.RpcError as exc:
        raise _error_of(exc, transport) from None


def dnode_error(endpoint: str, error: Error) -> Exception:
    """What a failed call at a dnode raises: Unreachable when the dnode did not answer (the
    transport's failure: its part is not sent again), else the dnode's own error."""
    if type(error) is not ServerUnavailable:
        return error
    return Unreachable(VgroupUnavailable(
        f"the dnode at {endpoint}, which hosts rows of this write, does not answer "
        f"({error}); the other dnodes' parts were written. Retry those rows once "
        "it is back (SHOW DNODES on the mnode)"
    ))  # fmt: skip


def _error_of(exc: grpc.RpcError, transport: Transport) -> Error:
    # Every RpcError a call raises is also that call's grpc.Call (status and trailers).
    call = cast("grpc.Call", exc)
    code = call.code()
    trailers = call.trailing_metadata() or ()
    details = call.details() or code.name
    error = from_status(code, details, [(k, v) for k, v in trailers])
    if type(error) is ServerUnavailable:  # the transport's failure, not the server's word
        return handshake_error(transport, details) or error
    return error
