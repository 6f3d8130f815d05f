"""The RPC layer's one place for what every call shares: how services are registered,
the error boundary, and the protocol's enums as the server's names.

`add_service` registers a servicer with request decoders that never raise: bytes that
do not parse as the method's message (or carry invalid UTF-8 in a string field) arrive
as `Undecodable`, which the boundary answers with InvalidRequest instead of the
UNKNOWN status gRPC would give. Each service method is wrapped by `unary` (a unary or
client-streaming call) or `streaming` (a server-streaming call, an async generator,
whose tail is covered too).
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
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar, cast

import grpc
import pyarrow as pa
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message
from grpc import aio

from sqltopic.errors import Error, InvalidRequest, LimitExceeded, SqlError, TooLarge
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import from_status, to_status
from sqltopic.server.dnode.poll import Reset

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


class Undecodable:
    """A request whose bytes did not parse as its message."""

    def __init__(self, message: str, reason: str) -> None:
        self.message = message
        self.reason = reason

    def error(self) -> InvalidRequest:
        return InvalidRequest(
            f"the request is not a valid {self.message} message ({self.reason[:200]}): "
            "check the client's protobuf encoding (string fields must be UTF-8)"
        )


def add_service(server: aio.Server, servicer: object, name: str) -> None:
    """Register `servicer`'s methods for service `name` of sqltopic.proto."""
    service = pb.DESCRIPTOR.services_by_name[name]
    handlers = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = _HANDLERS[method.client_streaming, method.server_streaming]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_decoder(request),
            response_serializer=_encoder(response),
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


_HANDLERS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def _encoder(cls: type[Message]) -> Callable[[Message | bytes], bytes]:
    """A response's bytes: an answer serialized already (server/rpc/consume.py batches
    answers framed from bytes: sqltopic/proto/wire.py) goes out as it is."""
    serialize = cls.SerializeToString

    def encode(message: Message | bytes) -> bytes:
        return message if isinstance(message, bytes) else serialize(message)

    return encode


def _decoder(cls: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    def decode(data: bytes) -> Message | Undecodable:
        try:
            return cls.FromString(data)
        except DecodeError as exc:
            return Undecodable(cls.DESCRIPTOR.name, str(exc))

    return decode


def unary(
    method: Callable[[S, Q, Context], Awaitable[R]],
) -> Callable[[S, Q, Context], Awaitable[R]]:
    """The boundary around a call that answers once (its request may be a stream)."""

    @functools.wraps(method)
    async def call(self: S, request: Q, context: Context) -> R:
        try:
            if isinstance(request, Undecodable):
                raise request.error()
            if hasattr(request, "__aiter__"):
                request = cast("Q", _decoded(cast("AsyncIterator[object]", request)))
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
            if isinstance(request, Undecodable):
                raise request.error()
            if hasattr(request, "__aiter__"):
                request = cast("Q", _decoded(cast("AsyncIterator[object]", request)))
            async for item in method(self, request, context):
                yield item
        except aio.AbortError:
            raise
        except Exception as exc:
            await fail(context, exc)

    return call


async def _decoded(requests: AsyncIterator[object]) -> AsyncIterator[object]:
    """A request stream whose every message decoded (InvalidRequest at the first not)."""
    async for request in requests:
        if isinstance(request, Undecodable):
            raise request.error()
        yield request


async def fail(context: Context, exc: Exception) -> NoReturn:
    """End the call with the status that describes `exc` (counted in FAILED_CALLS)."""
    err = exc if isinstance(exc, Error) else client_caused(exc)
    if err is not None:
        code, message, trailers = to_status(err)
        FAILED_CALLS[code.name] += 1
        await context.abort(code, message, trailing_metadata=tuple(trailers))
    FAILED_CALLS[grpc.StatusCode.INTERNAL.name] += 1
    await context.abort(grpc.StatusCode.INTERNAL, internal_error(exc))


# Calls this process ended with an error, by status code name (/metrics): one count for
# the process, as every call's errors pass through `fail`.
FAILED_CALLS: Counter[str] = Counter()


def peer_error(exc: grpc.RpcError) -> Error:
    """The error a call to another node failed with: the very class that node raised
    (its status and trailers, as the client maps them), ServerUnavailable when it did not
    answer at all."""
    call = cast("grpc.Call", exc)  # every RpcError a call raises is also its grpc.Call
    trailers = [(k, v) for k, v in call.trailing_metadata() or ()]
    return from_status(call.code(), call.details() or call.code().name, trailers)


def unexpected(exc: Exception) -> Error:
    """The error to answer for a failure no sqltopic error describes, where no call's
    status can carry it (a poll on a Consume stream): the machine's (`client_caused`),
    or the server's internal error, logged."""
    err = client_caused(exc)
    return err if err is not None else Error(internal_error(exc))


def internal_error(exc: Exception) -> str:
    """Log a bug's exception; the message the client gets for it."""
    log.error("unexpected error", exc_info=exc)
    return f"internal server error ({type(exc).__name__}); the server log has the details"


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
