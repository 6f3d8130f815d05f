"""The server's named resource limits: each bounds what one client can make the server
hold or do, has a documented default (docs/security.md, "Limits") and a command-line
option, and is reported by name when a request passes it."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields

from sqltopic.errors import TooLarge

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# Bytes of Arrow IPC one Write call may carry: a large batch from a gateway fits many
# times over, while the server never holds more than this for one call.
DEFAULT_MAX_WRITE_BYTES = 256 * MIB
# Bytes of SQL text one call may carry (TDengine's maxSQLLength): parsing and checking
# a statement costs microseconds a character; bulk data goes by Arrow writes.
DEFAULT_MAX_SQL_BYTES = 1 * MIB
# Bytes of Arrow one ad hoc query may answer with (streamed in frames, never held
# whole): far beyond an interactive result, short of exhausting a server's memory.
DEFAULT_MAX_RESULT_BYTES = 1 * GIB
# How long one ad hoc query may run: longer is a runaway query, or work for Spark.
DEFAULT_QUERY_TIMEOUT_MS = 60_000
# Memory DuckDB may use for one engine's ad hoc queries together; beyond it a query
# fails with TooLarge instead of the server swapping or being killed.
DEFAULT_QUERY_MEMORY_BYTES = 2 * GIB
# Calls that hold a stream or a waiting poll open at once (Poll, Fetch, Execute,
# Write), per session: a client with thousands of consumers uses thousands of sessions.
DEFAULT_MAX_STREAMS_PER_SESSION = 256
# The same per user, over all its sessions: high enough for one service account to run
# thousands of subscribers, low enough that one user cannot starve the server.
DEFAULT_MAX_STREAMS_PER_USER = 65_536
# Sessions (logins) one user holds at once; a login beyond ends the user's least
# recently used one. Each costs some memory until logout, and nothing expires them.
DEFAULT_MAX_SESSIONS_PER_USER = 1_024
# Vgroups of the databases one user other than root created, together: each keeps a
# few files open and some memory (docs/security.md, "Open files"); 1,024 is one
# database of TDengine's largest size.
DEFAULT_MAX_VGROUPS_PER_USER = 1_024

_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": KIB, "kb": KIB, "kib": KIB, "m": MIB, "mb": MIB, "mib": MIB}
_UNITS |= {"g": GIB, "gb": GIB, "gib": GIB}


@dataclass(frozen=True)
class Limits:
    """Every named limit, with its default."""

    def check_sql(self, sql: str) -> None:
        """TooLarge when `sql` is longer than max_sql_bytes."""
        size = len(sql.encode())
        if size > self.max_sql_bytes:
            raise TooLarge(
                f"the SQL text is {size} bytes, over the server's --max-sql-bytes "
                f"({self.max_sql_bytes}): send fewer statements a call, and many rows by "
                "Arrow writes (Connection.write)"
            )

    max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES
    max_sql_bytes: int = DEFAULT_MAX_SQL_BYTES
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    query_timeout_ms: int = DEFAULT_QUERY_TIMEOUT_MS
    query_memory_bytes: int = DEFAULT_QUERY_MEMORY_BYTES
    max_streams_per_session: int = DEFAULT_MAX_STREAMS_PER_SESSION
    max_streams_per_user: int = DEFAULT_MAX_STREAMS_PER_USER
    max_sessions_per_user: int = DEFAULT_MAX_SESSIONS_PER_USER
    max_vgroups_per_user: int = DEFAULT_MAX_VGROUPS_PER_USER

    @classmethod
    def of(cls, args: argparse.Namespace) -> Limits:
        """The limits `add_arguments`' options set (each option is its field's name)."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


# Each limit's option: its field (the option is the field's name with dashes), how the
# value is written, and what it bounds; the default comes from `Limits`.
_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("max_write_bytes", "SIZE", "Arrow bytes one Write call may carry"),
    ("max_sql_bytes", "SIZE", "bytes of SQL text one Execute or Run call may carry"),
    ("max_result_bytes", "SIZE", "Arrow bytes one ad hoc query may answer with"),
    ("query_timeout_ms", "MS", "longest an ad hoc query may run"),
    ("query_memory_bytes", "SIZE", "memory DuckDB may use for ad hoc queries"),
    ("max_streams_per_session", "N", "open streams and waiting polls per session"),
    ("max_streams_per_user", "N", "open streams and waiting polls per user"),
    ("max_sessions_per_user", "N", "sessions (logins) per user; more ends the oldest"),
    ("max_vgroups_per_user", "N", "vgroups of the databases a user (not root) creates"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The limits' options, for `sqltopic server`."""
    group = parser.add_argument_group("limits (docs/security.md)")
    defaults = Limits()
    for name, metavar, meaning in _OPTIONS:
        default = getattr(defaults, name)
        shown = _shown(default) if metavar == "SIZE" else str(default)
        group.add_argument(
            "--" + name.replace("_", "-"), dest=name, default=default, metavar=metavar,
            type=size if metavar == "SIZE" else positive, help=f"{meaning} (default {shown})",
        )  # fmt: skip


def _shown(value: int) -> str:
    """A byte count in the largest unit it is a whole number of."""
    for unit, factor in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def size(text: str) -> int:
    """An argparse type: a byte count, with an optional unit (KiB, MiB, GiB; K, M, G)."""
    m = _SIZE.match(text)
    if m is None or int(m.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 256MiB or 1048576")
    return int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
