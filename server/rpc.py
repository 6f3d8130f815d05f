"""How a failed call ends: a sqltopic error becomes its status code, plain message and
trailing metadata (`proto.status.to_status`); anything else is a server bug, logged and
answered as INTERNAL, and the server keeps serving. Also the protocol's enums as the
server's names."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import grpc
from grpc import aio

from sqltopic.errors import Error
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import to_status
from sqltopic.server.poll import Reset

log = logging.getLogger("sqltopic.server")

Context = aio.ServicerContext[Any, Any]

# auto.offset.reset on the wire; unspecified is TDengine's default, latest.
RESETS: dict[int, Reset] = {
    pb.OFFSET_RESET_UNSPECIFIED: "latest",
    pb.OFFSET_RESET_EARLIEST: "earliest",
    pb.OFFSET_RESET_LATEST: "latest",
    pb.OFFSET_RESET_NONE: "none",
}


async def fail(context: Context, exc: Exception) -> NoReturn:
    """End the call with the status that describes `exc`."""
    if isinstance(exc, Error):
        code, message, trailers = to_status(exc)
        await context.abort(code, message, trailing_metadata=tuple(trailers))
    log.error("unexpected error", exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"internal server error: {type(exc).__name__}: {exc}"
    )
