"""The one error boundary of every RPC, and the protocol's enums as the server's names.

Each service method is wrapped by `unary` (a unary or client-streaming call) or
`streaming` (a server-streaming call, an async generator, whose tail is covered too).
A sqltopic error becomes its status code, plain message and trailing metadata
(`proto.status.to_status`); the few failures of the machine that a client can cause
(out of memory, out of file descriptors, a statement nested too deeply for the parser)
become the sqltopic errors that name them; anything else is a server bug, logged and
answered as INTERNAL without its text, and the server keeps serving.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
import pyarrow as pa
from grpc import aio

from sqltopic.errors import Error, LimitExceeded, SqlError, TooLarge
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import to_status
from sqltopic.server.poll import Reset

log = logging.getLogger("sqltopic.server")

Context = aio.ServicerContext[Any, Any]
S = TypeVar("S")
Q = TypeVar("Q")
R = TypeVar("R")

# auto.offset.reset on the wire; unspecified is TDengine's default, latest.
RESETS: dict[int, Reset] = {
    pb.OFFSET_RESET_UNSPECIFIED: "latest",
    pb.OFFSET_RESET_EARLIEST: "earliest",
    pb.OFFSET_RESET_LATEST: "latest",
    pb.OFFSET_RESET_NONE: "none",
}
# Descriptor errors: the process (or the system) ran out of file descriptors.
_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def unary(
    method: Callable[[S, Q, Context], Awaitable[R]],
) -> Callable[[S, Q, Context], Awaitable[R]]:
    """The boundary around a call that answers once."""

    @functools.wraps(method)
    async def call(self: S, request: Q, context: Context) -> R:
        try:
            return await method(self, request, context)
        except aio.AbortError:
            raise
        except Exception as exc:
            await fail(context, exc)

    return call


def streaming(
    method: Callable[[S, Q, Context], AsyncIterator[R]],
) -> Callable[[S, Q, Context], AsyncIterator[R]]:
    """The boundary around a call that answers with a stream: an error at any point of
    the stream, after frames were sent too, ends it with its status."""

    @functools.wraps(method)
    async def call(self: S, request: Q, context: Context) -> AsyncIterator[R]:
        try:
            async for item in method(self, request, context):
                yield item
        except aio.AbortError:
            raise
        except Exception as exc:
            await fail(context, exc)

    return call


async def fail(context: Context, exc: Exception) -> NoReturn:
    """End the call with the status that describes `exc`."""
    err = exc if isinstance(exc, Error) else client_caused(exc)
    if err is not None:
        code, message, trailers = to_status(err)
        await context.abort(code, message, trailing_metadata=tuple(trailers))
    log.error("unexpected error", exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL,
        f"internal server error ({type(exc).__name__}); the server log has the details",
    )


def client_caused(exc: BaseException) -> Error | None:
    """The sqltopic error for a failure of the machine that a request can cause: too
    deep a statement, too large a request for the memory, no file descriptors left."""
    if isinstance(exc, RecursionError):
        return SqlError(
            "the statement is nested too deeply to analyse: split it, or use fewer "
            "nested parentheses, CASEs or operators"
        )
    if isinstance(exc, MemoryError | pa.ArrowMemoryError):
        return TooLarge(
            "the request needs more memory than the server can give it: send less at "
            "once (fewer rows per write, a narrower query)"
        )
    if isinstance(exc, OSError) and exc.errno in _NO_DESCRIPTORS:
        return LimitExceeded(
            "the server ran out of file descriptors (its open-files limit, `ulimit -n`): "
            "retry later; the operator can raise the limit or use fewer vgroups"
        )
    return None
