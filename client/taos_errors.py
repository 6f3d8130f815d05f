"""taospy's `TmqError` (see `sqltopic.taos`), and sqltopic's errors raised as TmqError
while staying instances of their own classes."""

from __future__ import annotations

from typing import cast

from sqltopic.errors import Error, OffsetOutOfRange

# taospy's errno when the C library gave none.
UNKNOWN_ERRNO = 0xFFFF
# TDengine's codes for the errors a taospy program may test (clientTmq.c; its tests read
# them from str(error) between "[" and "]", tests/system-test/7-tmq/tmqOffset.py).
ERRNOS: dict[type[Error], int] = {
    OffsetOutOfRange: 0x4007,  # TSDB_CODE_TMQ_VERSION_OUT_OF_RANGE
}
INVALID_VGID = 0x4008  # TSDB_CODE_TMQ_INVALID_VGID: seek of a vgroup not assigned
INVALID_TOPIC = 0x4009  # TSDB_CODE_TMQ_INVALID_TOPIC: seek of a topic not subscribed


class TmqError(Error):
    """taospy's TMQ error: `msg`, `errno`, shown as `[0xNNNN]: msg`. An error of sqltopic
    comes as a class that is both TmqError and the sqltopic.Error it was (for instance
    `except OffsetOutOfRange` still catches it)."""

    def __init__(self, msg: str | None = None, errno: int = UNKNOWN_ERRNO) -> None:
        super().__init__(msg)
        self.msg = msg
        self.errno = errno

    def __str__(self) -> str:
        return f"[0x{self.errno & 0xFFFF:04x}]: {self.msg}"


_COMBINED: dict[type[Error], type[TmqError]] = {}


def tmq_error(err: Error, errno: int | None = None) -> TmqError:
    """`err` as a TmqError that is still an instance of its own class."""
    if isinstance(err, TmqError):
        return err
    kind = type(err)
    combined = _COMBINED.get(kind)
    if combined is None:
        name = f"Tmq{kind.__name__}"
        combined = cast("type[TmqError]", type(name, (TmqError, kind), {"__module__": __name__}))
        _COMBINED[kind] = combined
    new = Exception.__new__(combined)
    new.__dict__.update(vars(err))
    new.args = err.args
    new.msg = str(err)
    known = (code for cls, code in ERRNOS.items() if isinstance(err, cls))
    new.errno = errno if errno is not None else next(known, UNKNOWN_ERRNO)
    return new
