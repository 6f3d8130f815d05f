"""sqltopic: a SQL-facing subscription service for time-series data.

The repository root is this package: `wal/`, `sql/`, `server/`, `proto/` and
`spark_jobs/` are its subpackages (see docs/architecture.md for the layers). Importing
`sqltopic` itself stays light: it loads only the error classes; `sqltopic.connect`
(the client, with grpc and pyarrow) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqltopic.errors import (
    AlreadyExistsError,
    AuthenticationFailed,
    ConfigError,
    ConsumerFenced,
    Error,
    InvalidTopicQuery,
    InvalidValueError,
    NoCommittedOffset,
    NoPermission,
    NotFoundError,
    OffsetOutOfRange,
    RebalanceInProgress,
    SchemaInUseError,
    SqlError,
    SqlSyntaxError,
    TopicDropped,
    TopicNotFound,
    TopicNotStateless,
    UnsupportedStatement,
    VersionNotRetained,
    VersionOrderError,
    WalClosedError,
    WalCorruptionError,
    WalError,
    WalLockedError,
)

if TYPE_CHECKING:
    from sqltopic.client import connect

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "AuthenticationFailed",
    "ConfigError",
    "ConsumerFenced",
    "Error",
    "InvalidTopicQuery",
    "InvalidValueError",
    "NoCommittedOffset",
    "NoPermission",
    "NotFoundError",
    "OffsetOutOfRange",
    "RebalanceInProgress",
    "SchemaInUseError",
    "SqlError",
    "SqlSyntaxError",
    "TopicDropped",
    "TopicNotFound",
    "TopicNotStateless",
    "UnsupportedStatement",
    "VersionNotRetained",
    "VersionOrderError",
    "WalClosedError",
    "WalCorruptionError",
    "WalError",
    "WalLockedError",
    "__version__",
    "connect",
]


def __getattr__(name: str) -> object:
    """PEP 562: `connect` imports the client (grpc, pyarrow) only when first used."""
    if name == "connect":
        from sqltopic.client import connect  # noqa: PLC0415

        return connect
    raise AttributeError(f"module 'sqltopic' has no attribute {name!r}")
