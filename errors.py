"""The exception tree of sqltopic: one root, `Error`, and a precise class per failure.

This module is the leaf of the package: it imports nothing of ours, so every layer
(`wal`, `sql`, `server`, the client) can raise and catch the same classes, and the
client can rebuild a server error as the very class the server raised.
"""

from __future__ import annotations


class Error(Exception):
    """Root of every error sqltopic raises on purpose."""


# --- configuration -------------------------------------------------------------------


class ConfigError(Error, ValueError):
    """A configuration key or value is unknown or out of range; the message names it."""


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
