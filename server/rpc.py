"""How a failed call ends: a sqltopic error becomes its status code, plain message and
trailing metadata (`proto.status.to_status`); anything else is a server bug, logged and
answered as INTERNAL, and the server keeps serving."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import grpc
from grpc import aio

from sqltopic.errors import Error
from sqltopic.proto.status import to_status

log = logging.getLogger("sqltopic.server")

Context = aio.ServicerContext[Any, Any]


async def fail(context: Context, exc: Exception) -> NoReturn:
    """End the call with the status that describes `exc`."""
    if isinstance(exc, Error):
        code, message, trailers = to_status(exc)
        await context.abort(code, message, trailing_metadata=tuple(trailers))
    log.error("unexpected error", exc_info=exc)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"internal server error: {type(exc).__name__}: {exc}"
    )
