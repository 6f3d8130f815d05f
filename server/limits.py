"""The server's named resource limits: each bounds what one client can make the server
hold or do, has a documented default (docs/security.md, "Limits") and a command-line
option, and is reported by name when a request passes it."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# Bytes of Arrow IPC one Write call may carry: a large batch from a gateway fits many
# times over, while the server never holds more than this for one call.
DEFAULT_MAX_WRITE_BYTES = 256 * MIB
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

_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": KIB, "kb": KIB, "kib": KIB, "m": MIB, "mb": MIB, "mib": MIB}
_UNITS |= {"g": GIB, "gb": GIB, "gib": GIB}


@dataclass(frozen=True)
class Limits:
    """Every named limit, with its default."""

    max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    query_timeout_ms: int = DEFAULT_QUERY_TIMEOUT_MS
    query_memory_bytes: int = DEFAULT_QUERY_MEMORY_BYTES
    max_streams_per_session: int = DEFAULT_MAX_STREAMS_PER_SESSION
    max_streams_per_user: int = DEFAULT_MAX_STREAMS_PER_USER

    @classmethod
    def of(cls, args: argparse.Namespace) -> Limits:
        return cls(
            max_write_bytes=args.max_write_bytes,
            max_result_bytes=args.max_result_bytes,
            query_timeout_ms=args.query_timeout_ms,
            query_memory_bytes=args.query_memory_bytes,
            max_streams_per_session=args.max_streams_per_session,
            max_streams_per_user=args.max_streams_per_user,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The limits' options, for `sqltopic server`."""
    group = parser.add_argument_group("limits (docs/security.md)")
    group.add_argument(
        "--max-write-bytes", type=size, default=DEFAULT_MAX_WRITE_BYTES, metavar="SIZE",
        help="Arrow bytes one Write call may carry (default 256MiB)",
    )  # fmt: skip
    group.add_argument(
        "--max-result-bytes", type=size, default=DEFAULT_MAX_RESULT_BYTES, metavar="SIZE",
        help="Arrow bytes one ad hoc query may answer with (default 1GiB)",
    )  # fmt: skip
    group.add_argument(
        "--query-timeout-ms", type=positive, default=DEFAULT_QUERY_TIMEOUT_MS, metavar="MS",
        help="longest an ad hoc query may run (default 60000)",
    )  # fmt: skip
    group.add_argument(
        "--query-memory-bytes", type=size, default=DEFAULT_QUERY_MEMORY_BYTES, metavar="SIZE",
        help="memory DuckDB may use for ad hoc queries (default 2GiB)",
    )  # fmt: skip
    group.add_argument(
        "--max-streams-per-session", type=positive, default=DEFAULT_MAX_STREAMS_PER_SESSION,
        metavar="N", help="open streams and waiting polls per session (default 256)",
    )  # fmt: skip
    group.add_argument(
        "--max-streams-per-user", type=positive, default=DEFAULT_MAX_STREAMS_PER_USER,
        metavar="N", help="open streams and waiting polls per user (default 65536)",
    )  # fmt: skip


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
