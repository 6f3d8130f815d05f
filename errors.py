"""The exception tree of sqltopic: one root, `Error`, and a precise class per failure.

This module is the leaf of the package: it imports nothing of ours, so every layer
(`wal`, `sql`, `server`, the client) can raise and catch the same classes, and the
client can rebuild a server error as the very class the server raised.
"""

from __future__ import annotations

# Characters of a client's input an error message quotes at most: enough to recognise
# the value, never the whole of a large input echoed back (docs/security.md).
EXCERPT_CHARS = 60


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` quoted for an error message: at most `limit` characters, cut ones marked
    with an ellipsis, control characters escaped, so a message stays short and one line."""
    cut = len(text) > limit
    shown = repr(text[:limit])
    return f"{shown[:-1]}…{shown[-1]}" if cut else shown


def shorten(name: str, limit: int = EXCERPT_CHARS) -> str:
    """A name as an error message shows it: unquoted, as `excerpt` cuts and escapes it."""
    shown = excerpt(name, limit)
    return shown[1:-1] if shown[-1] in "'\"" else shown


class Error(Exception):
    """Root of every error sqltopic raises on purpose."""


# --- configuration -------------------------------------------------------------------


class ConfigError(Error, ValueError):
    """A configuration key or value is unknown or out of range; the message names it."""


class MissingExtra(ConfigError):
    """A command needs a part of sqltopic that is installed only with an extra
    (`pip install 'sqltopic[server]'`); the message names the extra."""


# The modules each extra of pyproject.toml brings, as a command checks for them: the
# core (the client) needs none of these.
EXTRA_MODULES = {
    "server": ("duckdb", "sqlglot", "grpc_health.v1", "grpc_reflection.v1alpha",
               "prometheus_client"),
    "spark": ("duckdb", "sqlglot", "pyspark"),
}  # fmt: skip


def require_extra(extra: str, what: str) -> None:
    """MissingExtra naming `extra` when a module it brings does not import: `what`
    (a command) cannot run, and says so at once rather than with a traceback later."""
    import importlib  # noqa: PLC0415 (only the commands that need an extra pay for it)

    for module in EXTRA_MODULES[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            raise MissingExtra(
                f"{what} needs sqltopic's {extra} extra (module {module.split('.')[0]} is "
                f"not installed): pip install 'sqltopic[{extra}]'"
            ) from None


# --- SQL -------------------------------------------------------------------------------


class SqlError(Error):
    """A statement is malformed, unsupported, or names something it cannot use.

    `sql` is the statement, `line` and `column` (1-based) where the problem starts,
    when known. The message says what is wrong and how to put it right.
    """

    def __init__(
        self,
        message: str,
        *,
        sql: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(message + where)
        self.message = message
        self.sql = sql
        self.line = line
        self.column = column

    def at(self, sql: str, line: int | None, column: int | None) -> SqlError:
        """This error with a position filled in (when it had none)."""
        if self.line is not None:
            return self
        return type(self)(self.message, sql=sql, line=line, column=column)


class SqlSyntaxError(SqlError):
    """The text does not parse."""


class UnsupportedStatement(SqlError):
    """The statement parses as SQL but sqltopic does not implement it."""


class InvalidTopicQuery(SqlError):
    """A topic's SELECT uses DISTINCT, GROUP BY, ORDER BY, LIMIT, joins, subqueries..."""


class TopicNotStateless(SqlError):
    """A topic's SELECT uses an aggregate or window function: it would need state."""


class NotFoundError(SqlError):
    """A database, table, column, tag or topic that does not exist."""


class TopicNotFound(NotFoundError):
    """The topic does not exist."""


class AlreadyExistsError(SqlError):
    """Creating something that exists, without IF NOT EXISTS."""


class InvalidValueError(SqlError):
    """A value does not fit its column: wrong type, too long, out of range, NULL key."""


class SchemaInUseError(SqlError):
    """Dropping or altering a column, tag or object that something else depends on."""


class QueryNotAllowed(SqlError):
    """An ad hoc SELECT names something outside the database's tables and DuckDB's
    ordinary functions: a table function, a file, a system view, a settings or metadata
    function. The message names it; nothing ran."""


# --- consuming ---------------------------------------------------------------------------


class OffsetOutOfRange(Error):
    """A position, seek or commit outside the vgroup's [begin, end] range of versions."""

    def __init__(self, message: str, *, begin: int | None = None, end: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.begin = begin
        self.end = end


class NoCommittedOffset(OffsetOutOfRange):
    """`auto.offset.reset` is `none` and the group has no committed offset there."""


class TopicDropped(Error):
    """The topic was dropped (DROP TOPIC ... FORCE) while it was subscribed."""


class NoPermission(Error):
    """The user may not consume the topic (or run the statement)."""


class AuthenticationFailed(Error):
    """Wrong user or password, or a missing, unknown or expired session token."""


class LoginThrottled(AuthenticationFailed):
    """Too many failed logins for the user or from the address: the login is refused
    without a check until `retry_after_s` seconds have passed."""

    retry_after_s: float = 0.0

    def __init__(self, message: str, *, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class ConsumerFenced(Error):
    """A poll or commit by a consumer the current assignment does not name: refresh the
    assignment (or rejoin the group)."""


class GroupConflict(Error):
    """A consumer its group refuses at subscribe: the group's consumers use another
    `group.type`, an `exclusive` group has its consumer, or a `broadcast` consumer's
    `client.id` is in use. Nothing changed: use the group's settings, or another
    group.id (or client.id)."""


class RebalanceInProgress(Error):
    """A vnode has not yet learnt the newest assignment: retry shortly."""


class TooLarge(Error):
    """A request or answer over a size limit (a unary Run result over 4 MiB, a request
    over the server's message limit): send less, or use the streaming call."""


class InvalidRequest(Error, ValueError):
    """A request that is not a valid message of the protocol: bytes that do not parse as
    its protobuf message, or a string field that is not UTF-8. Fix the client."""


class LimitExceeded(Error):
    """A named server limit was reached (concurrent streams of a session or user, a
    query's time, open files): the message names the limit, its setting and what to do."""


class QueryTimeout(LimitExceeded):
    """An ad hoc query ran longer than the server's query time limit and was stopped:
    the message names the limit and its setting."""


class ConversionError(Error, ValueError):
    """A value the client cannot turn into a Python object (a timestamp outside
    `datetime`'s years 1..9999): the message names the column; the Arrow table
    (`to_arrow()`, `Block.data`) still holds it."""


class ServerUnavailable(Error):
    """The server cannot be reached (not running, wrong address, network down) or is
    shutting down: check the address, start the server, or retry."""


class VgroupUnavailable(ServerUnavailable):
    """A cluster's vgroup cannot be served now: its dnode is offline, or the vgroup is
    not placed on one yet. The other vgroups keep serving; retry."""


# --- write-ahead log -----------------------------------------------------------------


class WalError(Error):
    """Base of the write-ahead log's errors."""


class WalLockedError(WalError):
    """Another writer holds the WAL directory's lock file."""


class WalClosedError(WalError):
    """The WAL was closed; no further appends or reads are possible."""


class WalCorruptionError(WalError):
    """A record failed its checks somewhere other than a torn tail.

    `path` is the file and `offset` the byte position of the bad record. Such damage is
    never skipped: the data behind it would be silently lost.
    """

    def __init__(self, message: str, *, path: str, offset: int) -> None:
        super().__init__(f"{message} (file {path}, byte offset {offset})")
        self.path = path
        self.offset = offset


class WalSegmentMissing(WalCorruptionError):
    """A segment that the WAL's metadata lists as holding records is gone from disk."""


class DataFileDamaged(Error):
    """A file of the data directory other than the WAL (catalog.sqlite, a vnode's
    offsets.sqlite, mnode.sqlite) cannot be read: `path` names it; the message says what
    to do."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class VersionNotRetained(WalError):
    """A read asked for versions that retention has already deleted.

    Versions `requested` .. `first_version - 1` are gone; the WAL now holds
    `first_version` .. `next_version - 1`. The server turns this into a `data_lost`
    message and continues from `first_version`.
    """

    def __init__(self, requested: int, first_version: int, next_version: int) -> None:
        super().__init__(
            f"versions {requested}..{first_version - 1} were deleted by retention; "
            f"the WAL retains {first_version}..{next_version - 1}"
        )
        self.requested = requested
        self.first_version = first_version
        self.next_version = next_version


class VersionOrderError(WalError, ValueError):
    """An explicit version was not greater than the last one appended."""


# --- Spark backfill -------------------------------------------------------------------


class BackfillError(Error):
    """A Spark backfill cannot start, or did not finish; the message says why and what
    to do. Nothing it wrote counts as a result (the manifest is written last)."""


class BackfillUnsupported(BackfillError):
    """The topic cannot be backfilled by Spark: it is not a query topic, or a part of its
    SQL has no exact Spark SQL translation (the message names that part)."""


class JavaNotFound(BackfillError):
    """Spark needs Java (17), and neither JAVA_HOME nor PATH leads to a `java`."""


class OutputExists(BackfillError):
    """The backfill's output directory exists and is not empty."""
