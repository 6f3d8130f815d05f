"""The Python client of a sqltopic server: `connect()` logs in and returns a
`Connection` that runs SQL (`execute`, `query`) and fast Arrow writes (`write`), over
plain text or TLS (tls.py).

It speaks only the public protocol (`proto/sqltopic/v1/sqltopic.proto`); a server error
comes back as the very `sqltopic.Error` subclass the server raised, and a failed TLS
handshake as a `TlsHandshakeError` that says what to check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

import grpc
import pyarrow as pa

from sqltopic.client.rows import table_rows
from sqltopic.client.tls import (
    PLAIN,
    PathArg,
    Transport,
    handshake_error,
    load_transport,
    tls_files,
)
from sqltopic.errors import Error, ServerUnavailable
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, MESSAGE_OPTIONS, chunks, from_ipc, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import from_status

DEFAULT_ADDRESS = "127.0.0.1:6030"
CLIENT_NAME = "sqltopic-python"
# Generous for a large query or write, but a dead server still fails the call eventually.
DEFAULT_TIMEOUT_S = 300.0


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


class Connection:
    """A logged-in session on a server. Not thread-safe: use one per thread."""

    def __init__(
        self,
        address: str,
        token: str,
        channel: grpc.Channel,
        timeout: float,
        transport: Transport = PLAIN,
    ) -> None:
        self.address = address
        self._transport = transport
        self._channel = channel
        self._sql = pb_grpc.SqlStub(channel)
        self._session = pb_grpc.SessionStub(channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout = timeout
        self._closed = False

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
        return Result(from_ipc(parts), header.affected_rows, header.database or None)

    def query(self, sql: str) -> pa.Table:
        """Run a query; its rows as an Arrow table."""
        return self.execute(sql).to_arrow()

    def write(self, target: str, data: pa.Table, database: str | None = None) -> int:
        """Append Arrow rows to `[db.]table`, or to `[db.]stable` with a `tbname` column
        (and tag columns). Returns rows written, after the server's WAL append."""
        frames = _write_frames(target, database, chunks(to_ipc(data), MAX_CHUNK_BYTES))
        with _translated(self._transport):
            answer = self._sql.Write(frames, metadata=self._metadata, timeout=self._timeout)
        return int(answer.rows)

    def close(self) -> None:
        """Log out and close the channel; later calls fail."""
        if self._closed:
            return
        self._closed = True
        try:
            self._session.Logout(pb.LogoutRequest(), metadata=self._metadata, timeout=5.0)
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
        conn = Connection(address, login.token, channel, timeout, transport)
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
    first = pb.WriteRequest(target=target)
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


def unimplemented(exc: grpc.RpcError) -> bool:
    """Whether a call failed for want of the method on the server (an older server)."""
    # every RpcError a call raises is also that call's grpc.Call (its status)
    code = getattr(exc, "code", None)
    return callable(code) and code() == grpc.StatusCode.UNIMPLEMENTED


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
