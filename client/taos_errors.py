"""taospy's exception tree (`taos/error.py`: `Error` and its PEP 249 subclasses, with
`TmqError` a `DatabaseError`), rooted in `sqltopic.Error`, and sqltopic's errors raised
through `sqltopic.taos` as classes that are both taospy's class and the sqltopic error
they were: `except taos.Error`, `except taos.ProgrammingError` and `except SqlError`
all catch a bad query."""

from __future__ import annotations

from typing import TypeVar, cast

import sqltopic.errors as sqltopic_errors
from sqltopic.errors import (
    AuthenticationFailed,
    ConfigError,
    OffsetOutOfRange,
    ServerUnavailable,
    SqlError,
)

SqlTopicError = sqltopic_errors.Error

# taospy's errno when the C library gave none.
UNKNOWN_ERRNO = 0xFFFF
# TDengine's codes for the errors a taospy program may test (clientTmq.c; its tests read
# them from str(error) between "[" and "]", tests/system-test/7-tmq/tmqOffset.py).
ERRNOS: dict[type[SqlTopicError], int] = {
    OffsetOutOfRange: 0x4007,  # TSDB_CODE_TMQ_VERSION_OUT_OF_RANGE
}
INVALID_VGID = 0x4008  # TSDB_CODE_TMQ_INVALID_VGID: seek of a vgroup not assigned
INVALID_TOPIC = 0x4009  # TSDB_CODE_TMQ_INVALID_TOPIC: seek of a topic not subscribed


class Error(SqlTopicError):
    """taospy's `taos.Error`: `msg`, `errno`, shown as `[0xNNNN]: msg`."""

    def __init__(self, msg: str | None = None, errno: int = UNKNOWN_ERRNO) -> None:
        super().__init__(msg)
        self.msg = msg
        self.errno = errno

    def __str__(self) -> str:
        return f"[0x{self.errno & 0xFFFF:04x}]: {self.msg}"


class InterfaceError(Error):
    """An error of the interface rather than the database (a bad argument)."""


class DatabaseError(Error):
    """An error of the database."""


class ConnectionError(Error):  # taospy's name (shadows the builtin here only)
    """The connection failed (no server, a wrong password)."""


class DataError(DatabaseError):
    """A problem with the data (a value out of range)."""


class OperationalError(DatabaseError):
    """An error of the database's operation (a misuse of a result or cursor)."""


class IntegrityError(DatabaseError):
    """The relational integrity of the database is affected."""


class InternalError(DatabaseError):
    """The database met an internal error."""


class ProgrammingError(DatabaseError):
    """A statement failed (taospy raises it for every failed query)."""


class NotSupportedError(DatabaseError):
    """A method or API the database does not support."""


class ResultError(DatabaseError):
    """An error of a result's API."""


class TmqError(DatabaseError):
    """taospy's TMQ error. An error of sqltopic comes as a class that is both TmqError
    and the sqltopic.Error it was (for instance `except OffsetOutOfRange` still catches
    it)."""


E = TypeVar("E", bound=Error)
_COMBINED: dict[tuple[type[Error], type[SqlTopicError]], type[Error]] = {}
# The taospy class of a sqltopic error raised by SQL calls, by its sqltopic class; taospy
# raises ConnectionError from taos_connect and ProgrammingError from taos_query.
SQL_CLASSES: list[tuple[type[SqlTopicError], type[Error]]] = [
    (AuthenticationFailed, ConnectionError),
    (ServerUnavailable, ConnectionError),
    (SqlError, ProgrammingError),
    (ConfigError, InterfaceError),
]


def taos_error(err: SqlTopicError, base: type[E], errno: int | None = None) -> E:
    """`err` as an instance of taospy's class `base` that is still one of its own
    class; `err` itself if it already is a `base`."""
    if isinstance(err, base):
        return err
    kind = type(err)
    combined = _COMBINED.get((base, kind))
    if combined is None:
        prefix = base.__name__.removesuffix("Error")
        name = f"{prefix}{kind.__name__}"
        combined = cast("type[Error]", type(name, (base, kind), {"__module__": __name__}))
        _COMBINED[(base, kind)] = combined
    new = cast("E", Exception.__new__(combined))
    new.__dict__.update(vars(err))
    new.args = err.args
    new.msg = str(err)
    known = (code for cls, code in ERRNOS.items() if isinstance(err, cls))
    new.errno = errno if errno is not None else next(known, UNKNOWN_ERRNO)
    return new


def tmq_error(err: SqlTopicError, errno: int | None = None) -> TmqError:
    """`err` as a TmqError that is still an instance of its own class."""
    return taos_error(err, TmqError, errno)


def sql_error(err: SqlTopicError) -> Error:
    """`err` (from connect, query, execute) as the taospy class taospy would raise."""
    if isinstance(err, Error):
        return err
    base = next((b for cls, b in SQL_CLASSES if isinstance(err, cls)), OperationalError)
    return taos_error(err, base)
