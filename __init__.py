"""sqltopic: a SQL-facing subscription service for time-series data.

The repository root is this package: `wal/`, `sql/`, `server/`, `proto/` and
`spark_jobs/` are its subpackages (see docs/architecture.md for the layers). Importing
`sqltopic` itself stays light: it loads only the error classes; `sqltopic.connect`,
`sqltopic.Consumer` and the message classes (the client, with grpc and pyarrow),
`sqltopic.aio` and `sqltopic.taos` (taospy's TMQ API) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqltopic.errors import (
    AlreadyExistsError,
    AuthenticationFailed,
    ConfigError,
    ConsumerFenced,
    Error,
    GroupConflict,
    InvalidTopicQuery,
    InvalidValueError,
    NoCommittedOffset,
    NoPermission,
    NotFoundError,
    OffsetOutOfRange,
    RebalanceInProgress,
    SchemaInUseError,
    ServerUnavailable,
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
    from sqltopic import aio, taos
    from sqltopic.client import connect
    from sqltopic.client.consumer import Consumer
    from sqltopic.client.message import Block, Message, TopicPartition, VgroupLag

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "AuthenticationFailed",
    "Block",
    "ConfigError",
    "Consumer",
    "ConsumerFenced",
    "GroupConflict",
    "Error",
    "InvalidTopicQuery",
    "InvalidValueError",
    "Message",
    "NoCommittedOffset",
    "NoPermission",
    "NotFoundError",
    "OffsetOutOfRange",
    "RebalanceInProgress",
    "SchemaInUseError",
    "ServerUnavailable",
    "SqlError",
    "SqlSyntaxError",
    "TopicDropped",
    "TopicNotFound",
    "TopicNotStateless",
    "TopicPartition",
    "UnsupportedStatement",
    "VersionNotRetained",
    "VersionOrderError",
    "VgroupLag",
    "WalClosedError",
    "WalCorruptionError",
    "WalError",
    "WalLockedError",
    "__version__",
    "aio",
    "connect",
    "taos",
]

# Public names whose modules import grpc or pyarrow: loaded by __getattr__ on first use.
_LAZY = {
    "connect": "sqltopic.client",
    "Consumer": "sqltopic.client.consumer",
    "Message": "sqltopic.client.message",
    "Block": "sqltopic.client.message",
    "TopicPartition": "sqltopic.client.message",
    "VgroupLag": "sqltopic.client.message",
}


def __getattr__(name: str) -> object:
    """PEP 562: the client (grpc, pyarrow) is imported only when first used."""
    import importlib  # noqa: PLC0415

    if name in ("aio", "taos"):
        return importlib.import_module(f"sqltopic.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sqltopic' has no attribute {name!r}")
