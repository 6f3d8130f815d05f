"""The process's open-files limit (RLIMIT_NOFILE): raising it at start, and telling
descriptor exhaustion apart so that it becomes a `LimitExceeded` naming the limit.

Every vnode keeps a few files open for as long as it is open (`FILES_PER_VNODE`), so a
database of 1,024 vgroups needs thousands of descriptors, beyond the usual soft limit of
1,024. `raise_open_files_limit` lifts the soft limit to the hard one (what an
unprivileged process may do; the server calls it at start), and `out_of_files` names
the limit in the error when it still runs out.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import sqlite3
from dataclasses import dataclass

from sqltopic.errors import LimitExceeded

log = logging.getLogger(__name__)

# Descriptors one open vnode keeps: the WAL directory's LOCK, offsets.sqlite and its
# -wal file; two more (the active segment's .log and .idx) once it holds data.
FILES_PER_VNODE = 3
FILES_PER_VNODE_WITH_DATA = 5
# When the soft limit is raised to an unlimited hard one, this much: the kernel refuses
# more than fs.nr_open (1,048,576 by default on Linux) in any case.
UNLIMITED_TARGET = 1 << 20
# SQLite reports a file it could not open as SQLITE_CANTOPEN; it does not say why.
_SQLITE_CANTOPEN = 14
# A failed SQLite open has closed what it had opened (up to three files) by the time
# its error arrives: this close to the limit, the limit is taken to be the cause.
_SQLITE_SLACK = 8
_NO_FILES = (errno.EMFILE, errno.ENFILE)
# Where the process's open descriptors are listed (Linux; macOS and the BSDs).
_FD_DIRS = ("/proc/self/fd", "/dev/fd")
# Descriptors held back while a database's vnodes are created, and given back before
# undoing a failed creation: deleting a vnode's directories opens one per level
# (vnode<id>, wal), and that must work even when the creation ran out.
RESERVE_FILES = 4


@dataclass(frozen=True, slots=True)
class OpenFilesLimit:
    """RLIMIT_NOFILE: the soft limit is what applies, the hard one how far it may rise."""

    soft: int
    hard: int

    def describe(self) -> str:
        return f"{_number(self.soft)} (hard limit {_number(self.hard)})"


def open_files_limit() -> OpenFilesLimit:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return OpenFilesLimit(soft, hard)


def raise_open_files_limit() -> tuple[OpenFilesLimit, OpenFilesLimit]:
    """Raise the soft open-files limit to the hard limit; returns the limits before and
    after. Call it once at the start of a server process, before any vnode opens. A
    system that refuses (a hard limit beyond fs.nr_open) keeps the old limit, logged."""
    before = open_files_limit()
    target = before.hard if before.hard != resource.RLIM_INFINITY else UNLIMITED_TARGET
    if before.soft != resource.RLIM_INFINITY and before.soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, before.hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit to %s: %s", _number(target), exc)
    after = open_files_limit()
    log.info("open-files limit (RLIMIT_NOFILE, `ulimit -n`): %s", after.describe())
    return before, after


def out_of_files(exc: BaseException) -> bool:
    """Whether `exc` comes from running out of file descriptors: an OSError EMFILE or
    ENFILE, or SQLite failing to open a file while the process is at its limit."""
    if isinstance(exc, OSError):
        return exc.errno in _NO_FILES
    if isinstance(exc, sqlite3.OperationalError):
        code = getattr(exc, "sqlite_errorcode", None)
        cant_open = code is not None and code & 0xFF == _SQLITE_CANTOPEN
        return (cant_open or code is None) and _at_limit()
    return False


def files_exceeded(what: str, exc: BaseException, vgroups: int = 1) -> LimitExceeded:
    """The error for `what` (e.g. "CREATE DATABASE power VGROUPS 1024") having run out
    of descriptors with `exc`: the limit by name, its value, and what to do."""
    if isinstance(exc, OSError) and exc.errno == errno.ENFILE:
        return LimitExceeded(
            f"{what} failed: the system's table of open files is full (ENFILE, "
            "fs.file-max): close other programs' files or raise fs.file-max, or use "
            "fewer vgroups"
        )
    need = f"; {vgroups} vgroups need at least {vgroups * FILES_PER_VNODE}" if vgroups > 1 else ""
    return LimitExceeded(
        f"{what} failed: the server ran out of file descriptors: its open-files limit "
        f"(RLIMIT_NOFILE, `ulimit -n`) is {open_files_limit().describe()}, and each vgroup "
        f"keeps {FILES_PER_VNODE} files open ({FILES_PER_VNODE_WITH_DATA} once it holds "
        f"data{need}). Raise the limit (`ulimit -n`, LimitNOFILE= in a systemd unit) and "
        "restart the server, or use fewer vgroups"
    )


class FileReserve:
    """A few descriptors held back (on /dev/null) for the cleanup after running out."""

    def __init__(self, count: int = RESERVE_FILES) -> None:
        self._fds: list[int] = []
        try:
            for _ in range(count):
                self._fds.append(os.open(os.devnull, os.O_RDONLY))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give the descriptors back (again: nothing)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def __enter__(self) -> FileReserve:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _at_limit() -> bool:
    """Whether the process holds (nearly) all the descriptors its soft limit allows."""
    soft = open_files_limit().soft
    for directory in _FD_DIRS:
        try:
            count = len(os.listdir(directory))
        except FileNotFoundError:
            continue
        except OSError as exc:
            return exc.errno in _NO_FILES  # listing needs a descriptor too
        return soft != resource.RLIM_INFINITY and count + _SQLITE_SLACK >= soft
    return False


def _number(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
