"""sqltopic errors on the wire: each class's gRPC status code, and the trailing metadata
that lets a client rebuild the very exception the server raised (docs/protocol.md,
"Errors"). The one place where classes and codes meet; the server and the client both
use it."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import grpc

import sqltopic.errors as e
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

ERROR_KEY = "sqltopic-error"
LINE_KEY = "sqltopic-line"
COLUMN_KEY = "sqltopic-column"
BEGIN_KEY = "sqltopic-begin"
END_KEY = "sqltopic-end"

Code = grpc.StatusCode
# Characters of an error message a status carries at most. gRPC refuses a status whose
# headers pass 16 KiB, and percent-encoding makes a character up to 9 bytes: a longer
# message is cut (and marked), so the client still gets the error and not a transport
# failure.
MAX_MESSAGE_CHARS = 1000

# Most specific first: a class takes the code of its first entry it is a subclass of.
CODES: tuple[tuple[type[e.Error], Code], ...] = (
    (e.NoCommittedOffset, Code.FAILED_PRECONDITION),
    (e.OffsetOutOfRange, Code.OUT_OF_RANGE),
    # a read of versions retention deleted (ReadEntries): the retained range travels
    (e.VersionNotRetained, Code.OUT_OF_RANGE),
    (e.NotFoundError, Code.NOT_FOUND),
    (e.AlreadyExistsError, Code.ALREADY_EXISTS),
    (e.SchemaInUseError, Code.FAILED_PRECONDITION),
    (e.QueryNotAllowed, Code.INVALID_ARGUMENT),
    (e.SqlError, Code.INVALID_ARGUMENT),
    (e.ConfigError, Code.INVALID_ARGUMENT),
    (e.InvalidRequest, Code.INVALID_ARGUMENT),
    (e.TopicDropped, Code.NOT_FOUND),
    (e.NoPermission, Code.PERMISSION_DENIED),
    (e.AuthenticationFailed, Code.UNAUTHENTICATED),
    (e.ConsumerFenced, Code.ABORTED),
    (e.GroupConflict, Code.FAILED_PRECONDITION),
    (e.RebalanceInProgress, Code.UNAVAILABLE),
    (e.VgroupUnavailable, Code.UNAVAILABLE),
    (e.WalClosedError, Code.UNAVAILABLE),
    (e.WalCorruptionError, Code.DATA_LOSS),
    (e.DataFileDamaged, Code.DATA_LOSS),
    (e.QueryTimeout, Code.DEADLINE_EXCEEDED),
    (e.TooLarge, Code.RESOURCE_EXHAUSTED),
    (e.LimitExceeded, Code.RESOURCE_EXHAUSTED),
    (e.Error, Code.INTERNAL),
)

# Without (or with an unknown) class name, a status code maps back to this class.
FALLBACK: dict[Code, type[e.Error]] = {
    Code.INVALID_ARGUMENT: e.SqlError,
    Code.NOT_FOUND: e.NotFoundError,
    Code.ALREADY_EXISTS: e.AlreadyExistsError,
    Code.FAILED_PRECONDITION: e.SchemaInUseError,
    Code.OUT_OF_RANGE: e.OffsetOutOfRange,
    Code.PERMISSION_DENIED: e.NoPermission,
    Code.UNAUTHENTICATED: e.AuthenticationFailed,
    Code.ABORTED: e.ConsumerFenced,
    Code.UNAVAILABLE: e.ServerUnavailable,
    # gRPC's own: the call's deadline passed, or the transport gave it up (a server
    # stopping, an overloaded one); a retry is the answer, as for a lost connection
    Code.DEADLINE_EXCEEDED: e.ServerUnavailable,
    Code.CANCELLED: e.ServerUnavailable,
    Code.DATA_LOSS: e.WalCorruptionError,
    Code.RESOURCE_EXHAUSTED: e.TooLarge,
}

# Every error class, by name: what a client can rebuild.
CLASSES: dict[str, type[e.Error]] = {
    name: cls for name, cls in vars(e).items() if inspect.isclass(cls) and issubclass(cls, e.Error)
}


def code_of(err: e.Error) -> Code:
    for cls, code in CODES:
        if isinstance(err, cls):
            return code
    return Code.INTERNAL


def to_status(err: e.Error) -> tuple[Code, str, list[tuple[str, str]]]:
    """The status code, plain message and trailing metadata that carry `err`."""
    trailers = [(ERROR_KEY, type(err).__name__)]
    if isinstance(err, e.SqlError):
        if err.line is not None:
            trailers.append((LINE_KEY, str(err.line)))
        if err.column is not None:
            trailers.append((COLUMN_KEY, str(err.column)))
    if isinstance(err, e.OffsetOutOfRange):
        if err.begin is not None:
            trailers.append((BEGIN_KEY, str(err.begin)))
        if err.end is not None:
            trailers.append((END_KEY, str(err.end)))
    if isinstance(err, e.VersionNotRetained):
        trailers += [(BEGIN_KEY, str(err.first_version)), (END_KEY, str(err.next_version))]
    return code_of(err), _plain(err), trailers


def from_status(code: Code, message: str, trailers: Sequence[tuple[str, str | bytes]]) -> e.Error:
    """The exception a status and its trailing metadata describe."""
    meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in trailers}
    cls = CLASSES.get(meta.get(ERROR_KEY, "")) or FALLBACK.get(code, e.Error)
    if issubclass(cls, e.SqlError):
        return cls(message, line=_int(meta.get(LINE_KEY)), column=_int(meta.get(COLUMN_KEY)))
    if issubclass(cls, e.OffsetOutOfRange):
        return cls(message, begin=_int(meta.get(BEGIN_KEY)), end=_int(meta.get(END_KEY)))
    if issubclass(cls, e.VersionNotRetained):
        return _not_retained(cls, message, meta)
    if cls.__init__ is e.Error.__init__:
        return cls(message)
    # classes with richer constructors (WAL errors): the message is all that travels
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    return err


def call_status(err: e.Error) -> pb.CallStatus:
    """`err` as an answer inside a response (a beat of Mnode.Heartbeats): the status its
    own call would have ended with."""
    code, message, trailers = to_status(err)
    details = [pb.StatusDetail(key=key, value=value) for key, value in trailers]
    return pb.CallStatus(code=code.value[0], message=message, details=details)


def from_call_status(status: pb.CallStatus) -> e.Error:
    """The exception a CallStatus describes (an unknown code: the root class)."""
    code = _CODE_BY_NUMBER.get(status.code, Code.UNKNOWN)
    return from_status(code, status.message, [(d.key, d.value) for d in status.details])


_CODE_BY_NUMBER = {code.value[0]: code for code in Code}


def unimplemented(exc: grpc.RpcError) -> bool:
    """Whether a call failed for want of the method on the server (an older server)."""
    # every RpcError a call raises is also that call's grpc.Call (its status)
    code = getattr(exc, "code", None)
    return callable(code) and code() == grpc.StatusCode.UNIMPLEMENTED


def _not_retained(
    cls: type[e.VersionNotRetained], message: str, meta: dict[str, str]
) -> e.VersionNotRetained:
    """VersionNotRetained with the retained range its trailers carry (the first version
    asked is only in the message: -1)."""
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.requested = -1
    err.first_version = _int(meta.get(BEGIN_KEY)) or 0
    err.next_version = _int(meta.get(END_KEY)) or 0
    return err


def _plain(err: e.Error) -> str:
    message = getattr(err, "message", None)
    text = message if isinstance(message, str) else str(err)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None
