"""A dnode's calls to its mnode on behalf of a client's request (`Cluster.CreateTables`:
the child tables a write needs), made from the worker thread that runs the request,
each proven with the cluster secret. The heartbeat is the link's (mnode_link.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pyarrow as pa

from sqltopic.errors import ServerUnavailable
from sqltopic.proto.arrow_ipc import to_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import prove
from sqltopic.server.common.result import Session
from sqltopic.server.dnode.identity import load_identity
from sqltopic.server.rpc.cluster_service import create_tables_fields
from sqltopic.server.rpc.rpc import peer_error

# The mnode answers once its ready dnodes applied the change (engine.DNODE_APPLY_WAIT_S,
# 5 s at most) after taking the catalog's lock: room for both, and a dead mnode still
# fails the write.
CREATE_TABLES_TIMEOUT_S = 30.0


class MnodeCalls:
    def __init__(
        self, mnode: str, secret: str, data: Path,
        channel: Callable[[str], grpc.Channel],
    ) -> None:  # fmt: skip
        self._secret = secret
        self._data = data
        self._mnode = mnode
        self._channel = channel(mnode)
        self._stub = pb_grpc.ClusterStub(self._channel)

    def create_tables(self, session: Session, target: str, table: pa.Table) -> int:
        """Ask the mnode for the child tables `table` (tbname and tag columns of a write
        through super table `target`) names, as `session`'s user; the catalog change
        to wait for. The mnode's refusal comes back as the very error it raised."""
        identity = load_identity(self._data)
        if identity is None:
            raise ServerUnavailable("this dnode has not joined its mnode yet: retry in a moment")
        request = pb.CreateTablesRequest(
            dnode_id=identity.dnode_id, sent_ms=int(time.time() * 1000), user=session.user,
            database=session.db or "", target=target, arrow=to_ipc(table).to_pybytes(),
        )  # fmt: skip
        request.proof = prove(self._secret, request.sent_ms, *create_tables_fields(request))
        try:
            answer = self._stub.CreateTables(request, timeout=CREATE_TABLES_TIMEOUT_S)
        except grpc.RpcError as exc:
            error = peer_error(exc)
            if type(error) is ServerUnavailable:
                error = ServerUnavailable(
                    f"the cluster's mnode at {self._mnode} creates the child tables this "
                    f"write needs, and cannot be reached ({error}): retry later"
                )
            raise error from None
        return int(answer.catalog_change)

    def close(self) -> None:
        self._channel.close()
