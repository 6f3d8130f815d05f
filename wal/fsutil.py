"""File-system primitives the WAL relies on for durability: atomic replace and locks."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqltopic.errors import WalLockedError

# writev() takes at most this many buffers per call (1024 on Linux); an append of many
# entries (three buffers each) is split into several calls.
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def fsync_dir(path: Path) -> None:
    """Make created, renamed or removed directory entries durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    Write a temporary file, fsync it, rename it over the target, fsync the directory.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_all(fd: int, buffers: list[object]) -> int:
    """Write every buffer in order with as few system calls as the kernel allows.

    Returns the bytes written. Raises OSError with part of the data possibly written:
    the caller cuts the file back.
    """
    all_views = (memoryview(b).cast("B") for b in buffers)  # type: ignore[arg-type]
    views = [v for v in all_views if v.nbytes]
    total = 0
    for start in range(0, len(views), IOV_MAX):
        chunk = views[start : start + IOV_MAX]
        want = sum(v.nbytes for v in chunk)
        done = os.writev(fd, chunk)
        while done < want:  # a short write (signal, nearly full disk) goes on where it stopped
            done += os.writev(fd, _skip(chunk, done))
        total += want
    return total


def _skip(views: list[memoryview], n: int) -> list[memoryview]:
    """The buffers left after the first `n` bytes."""
    out: list[memoryview] = []
    for v in views:
        if n >= v.nbytes:
            n -= v.nbytes
            continue
        out.append(v[n:])
        n = 0
    return out


class DirectoryLock:
    """An exclusive lock on a directory, held by one open `LOCK` file.

    `flock` locks belong to the open file description, so a second opener fails even
    inside the same process, and the kernel drops the lock when the holder dies.
    """

    def __init__(self, directory: Path, what: str = "WAL directory") -> None:
        self.path = directory / "LOCK"
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(self._fd)
            raise WalLockedError(
                f"{what} {directory} is in use by another writer (pid {holder}); "
                "stop that process or open a different directory"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
