"""sqltopic: a SQL-facing subscription service for time-series data.

The repository root is this package: `wal/`, `sql/`, `server/`, `proto/` and
`spark_jobs/` are its subpackages (see docs/architecture.md for the layers). Importing
`sqltopic` itself stays light: it loads only the error classes.
"""

from __future__ import annotations

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
]
