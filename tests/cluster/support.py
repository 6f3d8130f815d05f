"""A cluster of real processes on loopback: one `sqltopic mnode` and dnodes
(`sqltopic dnode`), each with its own data directory, sharing a cluster secret; and
waiting on what SHOW DNODES says."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqltopic.client import Connection, connect
from tests.live_server import ServerProcess
from tests.wal.waits import wait_for

SECRET = "cluster-secret-for-tests-0123"


class Cluster:
    """An mnode, then dnodes started with `add_dnode` (admitted or not)."""

    def __init__(
        self, root: Path, mnode_extra: tuple[str, ...] = (), tls_ca: Path | None = None,
        tls_client: tuple[Path, Path] | None = None,
    ) -> None:  # fmt: skip
        self.root = root
        self.tls_ca = tls_ca  # clients speak TLS to the mnode, trusting this CA
        self.tls_client = tls_client  # (certificate, key) for a mutual-TLS mnode
        self._mnode_extra = mnode_extra
        self.mnode = self._start(root / "mnode", "mnode", mnode_extra)
        self.dnodes: list[ServerProcess] = []

    def _start(
        self, data: Path, role: str, extra: tuple[str, ...], port: int | None = None,
        secret: str = SECRET,
    ) -> ServerProcess:  # fmt: skip
        env = {**os.environ, "SQLTOPIC_CLUSTER_SECRET": secret}
        proc = ServerProcess(data, port, extra, role=role, env=env)
        try:
            proc.wait_ready()
        except BaseException:
            proc.kill()
            raise
        return proc

    def add_dnode(
        self, name: str | None = None, *, admit: bool = True, secret: str = SECRET,
        port: int | None = None, data: Path | None = None, extra: tuple[str, ...] = (),
    ) -> ServerProcess:  # fmt: skip
        """Start a dnode (data directory `data`, or `root/<name>`) pointed at the mnode;
        with `admit`, CREATE DNODE its endpoint."""
        data = data or self.root / (name or f"dnode{len(self.dnodes) + 1}")
        args = ("--mnode", self.mnode.address, *extra)
        dnode = self._start(data, "dnode", args, port, secret)
        self.dnodes.append(dnode)
        if admit:
            self.sql(f"CREATE DNODE '{dnode.address}'")
        return dnode

    def restart(self, dnode: ServerProcess) -> ServerProcess:
        """The dnode started again on its directory and port (after a stop or kill)."""
        again = self._start(dnode.data, "dnode", ("--mnode", self.mnode.address), dnode.port)
        self.dnodes[self.dnodes.index(dnode)] = again
        return again

    def restart_mnode(self) -> ServerProcess:
        """The mnode started again on its directory and port (after a stop or kill)."""
        old = self.mnode
        return self._start(old.data, "mnode", self._mnode_extra, old.port)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        cert, key = self.tls_client or (None, None)
        with connect(self.mnode.address, tls_ca=self.tls_ca, tls_cert=cert, tls_key=key) as conn:
            yield conn

    def sql(self, text: str) -> list[tuple[object, ...]]:
        with self.connect() as conn:
            return list(conn.execute(text).rows)

    def dnode_rows(self) -> dict[str, tuple[object, ...]]:
        """SHOW DNODES by endpoint: (id, endpoint, status, vgroups, since)."""
        return {str(row[1]): row for row in self.sql("SHOW DNODES")}

    def status(self, dnode: ServerProcess) -> str | None:
        row = self.dnode_rows().get(dnode.address)
        return None if row is None else str(row[2])

    def wait_status(self, dnode: ServerProcess, status: str) -> None:
        wait_for(lambda: self.status(dnode) == status, f"{dnode.address} {status}")

    def wait_stderr(self, proc: ServerProcess, words: str) -> None:
        wait_for(lambda: words in proc.stderr(), f"{words!r} in the stderr of {proc.address}")

    def close(self) -> None:
        for proc in [*self.dnodes, self.mnode]:
            proc.kill()
