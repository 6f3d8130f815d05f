"""The `Session` and `Sql` gRPC services: log in and out, run SQL with results streamed
as chunked Arrow IPC, and fast Arrow writes. Engine work runs off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import version

import pyarrow as pa

from sqltopic.errors import TooLarge
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, MAX_MESSAGE_BYTES, chunks, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server import ingest
from sqltopic.server.auth import Sessions
from sqltopic.server.engine import Engine
from sqltopic.server.result import Session
from sqltopic.server.rpc import Context, streaming, unary
from sqltopic.server.rwlock import here_or_worker

# The installed distribution's version, as Login reports it.
SERVER_VERSION = version("sqltopic")
# Text of a lone INSERT up to which Run executes it on the event loop (a few dozen rows,
# ~0.1-0.3 ms of work): a trip to a worker thread and back costs about as much, and is
# most of the latency of a one-row write.
INLINE_SQL_BYTES = 4096


class SessionService(pb_grpc.SessionServicer):
    """Login hands out tokens; Logout ends the token of the call."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    @unary
    async def Login(self, request: pb.LoginRequest, context: Context) -> pb.LoginResponse:
        # off the event loop: a password check is a deliberately slow hash (~15 ms)
        token, session = await asyncio.to_thread(
            self._sessions.login, request.user, request.password
        )
        return pb.LoginResponse(
            token=token,
            server_version=SERVER_VERSION,
            user=session.user,
            max_request_bytes=MAX_MESSAGE_BYTES,
            max_chunk_bytes=MAX_CHUNK_BYTES,
        )

    @unary
    async def Logout(self, request: pb.LogoutRequest, context: Context) -> pb.LogoutResponse:
        self._sessions.logout(context.invocation_metadata())
        return pb.LogoutResponse()


@dataclass(frozen=True)
class _Outcome:
    """A statement's result, ready to stream."""

    header: pb.ResultHeader
    stream: pa.Buffer


class SqlService(pb_grpc.SqlServicer):
    """Execute and Write over one engine, in the caller's session."""

    def __init__(self, engine: Engine, sessions: Sessions) -> None:
        self._engine = engine
        self._sessions = sessions

    @streaming
    async def Execute(
        self, request: pb.ExecuteRequest, context: Context
    ) -> AsyncIterator[pb.ExecuteResponse]:
        outcome = await self._statements(request, context)
        yield pb.ExecuteResponse(header=outcome.header)
        for chunk in chunks(outcome.stream):
            yield pb.ExecuteResponse(arrow_ipc=chunk)

    @unary
    async def Run(self, request: pb.ExecuteRequest, context: Context) -> pb.ExecuteResponse:
        inline = _one_small_insert(request.sql)
        outcome = await self._statements(request, context, inline)
        if outcome.stream.size > MAX_CHUNK_BYTES:
            raise TooLarge(
                f"Run: the result is {outcome.stream.size} bytes of Arrow, over the "
                f"{MAX_CHUNK_BYTES} a unary answer may hold: run queries with Execute"
            )
        return pb.ExecuteResponse(header=outcome.header, arrow_ipc=outcome.stream.to_pybytes())

    async def _statements(
        self, request: pb.ExecuteRequest, context: Context, inline: bool = False
    ) -> _Outcome:
        """The result of an Execute or Run call's statements in the caller's session: on
        a worker thread, or, `inline`, here on the event loop unless that would wait (for
        DDL's lock, a table's creation, an fsync), which leaves everything unchanged."""
        session = self._sessions.session(context.invocation_metadata())
        database = request.database if request.HasField("database") else None
        args = (request.sql, session, database)
        if inline:
            lock = self._engine.state.lock
            return await here_or_worker(lock, asyncio.to_thread, self._execute, *args)
        return await asyncio.to_thread(self._execute, *args)

    @unary
    async def Write(
        self, request_iterator: AsyncIterator[pb.WriteRequest], context: Context
    ) -> pb.WriteResponse:
        session = self._sessions.session(context.invocation_metadata())
        sent = await ingest.receive(request_iterator)
        call = _for_call(session, sent.database)
        rows = await asyncio.to_thread(lambda: self._engine.write(sent.target, sent.table(), call))
        return pb.WriteResponse(rows=rows)

    def _execute(self, sql: str, session: Session, database: str | None) -> _Outcome:
        result = self._engine.execute(sql, _for_call(session, database))
        header = pb.ResultHeader(
            columns=result.columns,
            row_count=result.table.num_rows,
            affected_rows=result.affected_rows,
            database=session.db or "",
        )
        return _Outcome(header, to_ipc(result.table))


def _for_call(session: Session, database: str | None) -> Session:
    """The session a call runs in: its own, or a copy with the database overridden."""
    if database is None:
        return session
    return Session(db=database, user=session.user)


def _one_small_insert(sql: str) -> bool:
    """Whether `sql` is one INSERT statement of at most INLINE_SQL_BYTES: that is run on
    the event loop when it need not wait (a `;` inside may end the statement, or sit in a
    string: the worker pool then, to be safe)."""
    text = sql.strip().rstrip(";")
    return len(text) <= INLINE_SQL_BYTES and text[:6].upper() == "INSERT" and ";" not in text
