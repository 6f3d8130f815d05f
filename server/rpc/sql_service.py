"""The `Session` and `Sql` gRPC services: log in and out, run SQL with results streamed
as chunked Arrow IPC, and fast Arrow writes. Engine work runs off the event loop.

A call's last statement, when it is a SELECT, is not run through the engine's
materialised Result: `Execute` streams DuckDB's result batch by batch as one Arrow IPC
stream (the header's `row_count` is then -1), and `Run` reads it under its 4 MiB cap. A
call that ends early (cancelled by the client, past its deadline) interrupts the query.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, TypeVar, cast

import pyarrow as pa

from sqltopic.errors import Error, SqlError, TooLarge
from sqltopic.proto.arrow_ipc import MAX_CHUNK_BYTES, MAX_MESSAGE_BYTES, chunks, to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.limits import Limits
from sqltopic.server.common.result import Result, Session
from sqltopic.server.common.rwlock import here_or_worker
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.query_run import QueryRun, ResultCap, brief, size
from sqltopic.server.core.writes import Refused
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.throttle import peer_address
from sqltopic.server.rpc import ingest
from sqltopic.server.rpc.rpc import Context, streaming, unary, unexpected
from sqltopic.server.rpc.slots import Slots
from sqltopic.server.rpc.write_stream import Ahead, answer, runs
from sqltopic.sql import statements as st

# The installed distribution's version, as Login reports it.
SERVER_VERSION = version("sqltopic")
# Text of a lone INSERT up to which Run executes it on the event loop (a few dozen rows,
# ~0.1-0.3 ms of work): a trip to a worker thread and back costs about as much, and is
# most of the latency of a one-row write.
INLINE_SQL_BYTES = 4096
# Arrow bytes up to which a write (or a group of writes of a Writes stream) decodes and
# appends on the event loop (a 1,000-row batch over 1,000 children is 28 KB, ~0.8 ms of
# work alone, four of them appended as one group ~1.5 ms), under the same rule: the trip
# to a worker thread and back, and the two threads taking turns at the GIL, cost a
# quarter more than the work (wide writes: 446k against 351k rows/s).
INLINE_WRITE_BYTES = 128 * 1024
T = TypeVar("T")
# A call's metadata, where its session's token is.
Metadata = Iterable[tuple[str, str | bytes]] | None
# ResultHeader.row_count of a streamed result: its rows are not counted ahead.
STREAMED_ROWS = -1
# Explicit IPC writer options: without them pyarrow reads environment variables per call.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions()


class SessionService(pb_grpc.SessionServicer):
    """Login hands out tokens; Logout ends the token of the call."""

    def __init__(self, sessions: Sessions) -> None:
        self._sessions = sessions

    @unary
    async def Login(self, request: pb.LoginRequest, context: Context) -> pb.LoginResponse:
        # off the event loop: a password check is a deliberately slow hash (~15 ms)
        peer = peer_address(context.peer())
        token, session = await asyncio.to_thread(
            self._sessions.login, request.user, request.password, peer
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


@dataclass(frozen=True)
class _Streamed:
    """A SELECT running in DuckDB (the call's QueryRun): the header, rows still to read."""

    header: pb.ResultHeader


class SqlService(pb_grpc.SqlServicer):
    """Execute and Write over one engine, in the caller's session."""

    def __init__(
        self, engine: Engine, sessions: Sessions, slots: Slots, stopping: asyncio.Event
    ) -> None:
        """`stopping`: set when the server stops (open Writes streams end then)."""
        self._engine = engine
        self._sessions = sessions
        self._slots = slots
        self._stopping = stopping

    @streaming
    async def Execute(
        self, request: pb.ExecuteRequest, context: Context
    ) -> AsyncIterator[pb.ExecuteResponse]:
        token, session = self._sessions.caller(context.invocation_metadata())
        with self._slots.hold(token, session.user, "Execute"):
            async for frame in self._execute_frames(request, context):
                yield frame

    async def _execute_frames(
        self, request: pb.ExecuteRequest, context: Context
    ) -> AsyncIterator[pb.ExecuteResponse]:
        run = QueryRun(self._engine.limits)
        _close_when_done(context, run)
        try:
            outcome = await self._statements(request, context, run)
            yield pb.ExecuteResponse(header=outcome.header)
            if isinstance(outcome, _Outcome):
                for chunk in chunks(outcome.stream):
                    yield pb.ExecuteResponse(arrow_ipc=chunk)
                return
            frames = _Frames(run.schema)
            while (parts := await asyncio.to_thread(frames.next, run)) is not None:
                for part in parts:
                    yield pb.ExecuteResponse(arrow_ipc=part)
        finally:
            run.close()  # interrupts the query when the call ends first

    @unary
    async def Run(self, request: pb.ExecuteRequest, context: Context) -> pb.ExecuteResponse:
        inline = _one_small_insert(request.sql)
        run = QueryRun(self._engine.limits, _run_cap(self._engine.limits))
        _close_when_done(context, run)
        try:
            outcome = await self._statements(request, context, run, inline)
            if isinstance(outcome, _Streamed):
                outcome = await asyncio.to_thread(_collected, outcome, run)
        finally:
            run.close()
        if outcome.stream.size > MAX_CHUNK_BYTES:
            raise TooLarge(
                f"Run: the result is {outcome.stream.size} bytes of Arrow, over the "
                f"{MAX_CHUNK_BYTES} a unary answer may hold: run queries with Execute"
            )
        return pb.ExecuteResponse(header=outcome.header, arrow_ipc=outcome.stream.to_pybytes())

    async def _statements(
        self, request: pb.ExecuteRequest, context: Context, run: QueryRun, inline: bool = False
    ) -> _Outcome | _Streamed:
        """The result of an Execute or Run call's statements in the caller's session: on
        a worker thread, or, `inline`, here on the event loop unless that would wait (for
        DDL's lock, a table's creation, an fsync), which leaves everything unchanged. A
        last SELECT is started in `run`, its rows left to read."""
        session = self._sessions.session(context.invocation_metadata())
        database = request.database if request.HasField("database") else None
        args = (request.sql, session, database, run)
        if inline:
            lock = self._engine.lock
            return await here_or_worker(lock, asyncio.to_thread, self._execute, *args)
        return await asyncio.to_thread(self._execute, *args)

    @unary
    async def Write(
        self, request_iterator: AsyncIterator[pb.WriteRequest], context: Context
    ) -> pb.WriteResponse:
        token, session = self._sessions.caller(context.invocation_metadata())
        with self._slots.hold(token, session.user, "Write"):
            limit = self._engine.limits.max_write_bytes
            sent = await ingest.receive(request_iterator, limit)
            rows = await self._apply(sent, _for_call(session, sent.database))
        return pb.WriteResponse(rows=rows)

    @streaming
    async def Writes(
        self, requests: AsyncIterator[pb.WritesRequest], context: Context
    ) -> AsyncIterator[pb.WritesResponse]:
        metadata = context.invocation_metadata()
        token, session = self._sessions.caller(metadata)
        with self._slots.hold(token, session.user, "Writes"):
            # the headers at once: a client waits for them before its first write, so
            # that a server without Writes refuses the call before anything is sent
            await context.send_initial_metadata(())
            ahead, refused = Ahead(requests, self._stopping), Refused()
            try:
                while taken := await ahead.take():
                    for answered in await self._stream_writes(taken, metadata, refused):
                        yield answered
            finally:
                ahead.close()

    async def _stream_writes(
        self, taken: list[pb.WritesRequest], metadata: Metadata, refused: Refused
    ) -> list[pb.WritesResponse]:
        """Writes of a Writes stream that waited together, applied in order (a run of
        consecutive ones to one target as one group); each write's answer. Once a write
        was refused as VgroupUnavailable, every later one is (`Refused`)."""
        results: dict[int, int | Error] = {}
        try:
            session = self._sessions.session(metadata)  # logged out meanwhile: refused
        except Error as err:
            return [answer(r.ticket, err) for r in taken]
        checked: list[tuple[int, ingest.Received]] = []
        for place, request in enumerate(taken):
            try:
                checked.append((place, ingest.one(request, self._engine.limits.max_write_bytes)))
            except Error as err:
                results[place] = err
        for run in runs(checked):
            if refused.first is not None:
                results |= {place: refused.later() for place, _ in run}
                continue
            sent = [s for _, s in run]
            done = await self._apply_run(sent, _for_call(session, sent[0].database))
            refused.note(done)
            results |= {place: result for (place, _), result in zip(run, done, strict=True)}
        return [answer(r.ticket, results[place]) for place, r in enumerate(taken)]

    async def _apply(self, sent: ingest.Received, call: Session) -> int:
        """The rows of a checked write appended."""
        return await self._here_if_small(len(sent.stream), self._write, sent, call)

    async def _apply_run(self, run: list[ingest.Received], call: Session) -> list[int | Error]:
        """A run's writes appended (as one group when all pass): per write its rows or
        its error."""
        try:
            if len(run) == 1:
                return [await self._apply(run[0], call)]
            size = sum(len(sent.stream) for sent in run)
            return await self._here_if_small(size, self._write_run, run, call)
        except Exception as exc:  # the stream goes on: only these writes failed
            err = exc if isinstance(exc, Error) else unexpected(exc)
            return [err] * len(run)

    def _write_run(self, run: list[ingest.Received], call: Session) -> list[int | Error]:
        tables: list[pa.Table | Error] = []
        for sent in run:
            try:
                tables.append(sent.table())
            except Error as err:  # its values: this write alone is refused
                tables.append(err)
        good = [t for t in tables if isinstance(t, pa.Table)]
        done = iter(self._engine.write_group(run[0].target, good, call) if good else ())
        return [t if isinstance(t, Error) else next(done) for t in tables]

    async def _here_if_small(self, size: int, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` here when its `size` Arrow bytes are few (INLINE_WRITE_BYTES) and
        the lock is free, else on a worker thread."""
        if size <= INLINE_WRITE_BYTES:
            return await here_or_worker(self._engine.lock, asyncio.to_thread, fn, *args)
        return await asyncio.to_thread(fn, *args)

    def _write(self, sent: ingest.Received, call: Session) -> int:
        return self._engine.write(sent.target, sent.table(), call, validated=True)

    def _execute(
        self, sql: str, session: Session, database: str | None, run: QueryRun
    ) -> _Outcome | _Streamed:
        """Every statement in order, as Engine.execute runs them, but a last SELECT
        started in `run` rather than read whole."""
        call = _for_call(session, database)
        statements = self._engine.statements(sql)
        for stmt in statements[:-1]:
            self._engine.run(stmt, call)
        last = statements[-1] if statements else None
        if isinstance(last, st.Select):
            self._engine.open_select(call, last, run)
            header = pb.ResultHeader(
                columns=run.schema.names, row_count=STREAMED_ROWS, database=session.db or ""
            )
            return _Streamed(header)
        result = self._engine.run(last, call) if last is not None else Result()
        header = pb.ResultHeader(
            columns=result.columns,
            row_count=result.table.num_rows,
            affected_rows=result.affected_rows,
            database=session.db or "",
        )
        return _Outcome(header, to_ipc(result.table))


class _Frames:
    """A run's record batches as one Arrow IPC stream, handed out as they are written
    in chunks of at most MAX_CHUNK_BYTES: the server holds one batch at a time."""

    def __init__(self, schema: pa.Schema) -> None:
        self._sink = io.BytesIO()
        self._writer = pa.ipc.new_stream(self._sink, schema, options=_IPC_OPTIONS)
        self._ended = False

    def next(self, run: QueryRun) -> list[bytes] | None:
        """The chunks of the run's next batch (of the stream's end after the last one);
        None once the stream has ended. Raises what the run raises (TooLarge past the
        result cap, QueryTimeout, SqlError)."""
        if self._ended:
            return None
        batch = run.next_batch()
        if batch is None:
            self._writer.close()
            self._ended = True
        else:
            try:
                self._writer.write_batch(batch)
            except pa.ArrowException as exc:  # a type Arrow IPC cannot carry
                raise SqlError(f"the result cannot be sent: {brief(str(exc))}") from None
        data = self._sink.getvalue()
        self._sink.seek(0)
        self._sink.truncate()
        return list(chunks(pa.py_buffer(data)))


def _close_when_done(context: Context, run: QueryRun) -> None:
    """Close `run` when the call ends however it ends: a client that cancels or passes
    its deadline leaves no query running for nobody."""

    def done(_: Context) -> None:
        run.close()

    # the stubs type the callback as a private class; any callable of the context works
    context.add_done_callback(cast("Any", done))


def _collected(streamed: _Streamed, run: QueryRun) -> _Outcome:
    """A streamed SELECT read whole, for Run."""
    table = run.read_all()
    header = pb.ResultHeader()
    header.CopyFrom(streamed.header)
    header.row_count = table.num_rows
    try:
        return _Outcome(header, to_ipc(table))
    except pa.ArrowException as exc:  # a type Arrow IPC cannot carry
        raise SqlError(f"the result cannot be sent: {brief(str(exc))}") from None


def _run_cap(limits: Limits) -> ResultCap:
    """Run's cap on a SELECT's rows: its one answer's 4 MiB, or the server's result
    limit when lower (past it the query stops, rather than after reading it all)."""
    if limits.max_result_bytes < MAX_CHUNK_BYTES:
        return ResultCap.of(limits)
    return ResultCap(
        MAX_CHUNK_BYTES,
        f"Run: the result is over the {size(MAX_CHUNK_BYTES)} of Arrow a unary answer may "
        "hold: run queries with Execute",
    )


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
