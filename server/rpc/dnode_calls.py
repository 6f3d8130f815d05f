"""An mnode's calls to its dnodes: the rows of an INSERT it ran for vgroups they host
(`Dnode.Append`, one call per vgroup: atomic there), proven with the cluster secret,
made from the worker thread that runs the statement."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

import grpc

from sqltopic.errors import ServerUnavailable, VgroupUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.common.cluster_secret import NONCE_BYTES, prove
from sqltopic.server.core.state import Forwarded
from sqltopic.server.rpc.dnode_service import (
    MAX_READ_ENTRIES,
    append_fields,
    entries_fields,
    lags_fields,
    offsets_fields,
)
from sqltopic.server.rpc.rpc import peer_error
from sqltopic.server.vnode.vnode import Lag

# A dnode waits up to engine.DNODE_APPLY_WAIT_S (5 s) for the change the rows need,
# then appends (an fsync at most): room for both, and a dead dnode still fails the call.
APPEND_TIMEOUT_S = 30.0
# A read of a few MB from a dnode: a dead one still fails the statement soon.
READ_TIMEOUT_S = 30.0
# What an unreachable dnode's error says of an INSERT's rows for it.
WRITE_LOST = "its rows of this INSERT were not written"


class DnodeCalls:
    def __init__(
        self, secret: str,
        channel: Callable[[str], grpc.Channel],
    ) -> None:  # fmt: skip
        self._secret = secret
        self._channel = channel
        self._stubs: dict[str, tuple[grpc.Channel, pb_grpc.DnodeStub]] = {}
        self._lock = threading.Lock()

    def forward(self, rows: dict[int, Forwarded], after: int) -> int:
        """Send each vgroup's rows to its dnode once it applied catalog change `after`;
        the entries appended. The first failure is raised (the vgroups sent before it
        keep their rows: a write is atomic per vgroup, as on one server)."""
        done = 0
        for vgroup, sent in sorted(rows.items()):
            request = pb.AppendRequest(
                sent_ms=int(time.time() * 1000), vgroup=vgroup, catalog_change=after,
                entries=[bytes(e.body) for e in sent.entries],
                nonce=secrets.token_bytes(NONCE_BYTES),
            )  # fmt: skip
            request.proof = prove(self._secret, request.sent_ms, *append_fields(request))
            try:
                self._stub(sent.endpoint).Append(request, timeout=APPEND_TIMEOUT_S)
            except grpc.RpcError as exc:
                raise self._failed(exc, sent.endpoint, vgroup, WRITE_LOST) from None
            done += len(sent.entries)
        return done

    def entries(
        self, endpoint: str, vgroup: int, from_version: int, max_entries: int
    ) -> tuple[int, int, list[tuple[int, int, int, bytes]]]:
        """The vgroup's retained range and entries from `from_version` (remote_vnode)."""
        request = pb.EntriesRequest(
            sent_ms=int(time.time() * 1000), vgroup=vgroup, from_version=from_version,
            max_entries=min(max_entries, MAX_READ_ENTRIES),
        )  # fmt: skip
        request.proof = prove(self._secret, request.sent_ms, *entries_fields(request))
        try:
            answer = self._stub(endpoint).Entries(request, timeout=READ_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise self._failed(exc, endpoint, vgroup, "cannot be read") from None
        raw = [(e.version, e.entry_type, e.ingest_us, e.body) for e in answer.entries]
        return answer.first_version, answer.next_version, raw

    def offsets(self, endpoint: str, vgroup: int, topic: str) -> list[tuple[str, str, int]]:
        """(subscription, group, offset) committed on the vgroup for `topic`."""
        request = pb.OffsetsRequest(sent_ms=int(time.time() * 1000), vgroup=vgroup, topic=topic)
        request.proof = prove(self._secret, request.sent_ms, *offsets_fields(request))
        try:
            answer = self._stub(endpoint).Offsets(request, timeout=READ_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise self._failed(exc, endpoint, vgroup, "cannot be read") from None
        return [(o.topic, o.group, o.offset) for o in answer.offsets]

    def lags(
        self, endpoint: str, vgroup: int, subscriptions: list[tuple[str, str, int | None]]
    ) -> list[Lag]:
        """(lag_rows, lag_ms, last_poll_us, last_commit_us) of each (subscription, group,
        position) on the vgroup (None where not known)."""
        request = pb.LagsRequest(sent_ms=int(time.time() * 1000), vgroup=vgroup)
        for topic, group, position in subscriptions:
            request.subscriptions.add(topic=topic, group=group, position=position)
        request.proof = prove(self._secret, request.sent_ms, *lags_fields(request))
        try:
            answer = self._stub(endpoint).Lags(request, timeout=READ_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise self._failed(exc, endpoint, vgroup, "cannot be read") from None
        if len(answer.lags) != len(subscriptions):
            raise VgroupUnavailable(
                f"vgroup {vgroup}: dnode {endpoint} answered {len(answer.lags)} lags of "
                f"{len(subscriptions)}"
            )
        return [_lag(lag) for lag in answer.lags]

    def _stub(self, endpoint: str) -> pb_grpc.DnodeStub:
        with self._lock:
            found = self._stubs.get(endpoint)
            if found is None:
                channel = self._channel(endpoint)
                found = self._stubs[endpoint] = (channel, pb_grpc.DnodeStub(channel))
            return found[1]

    def _failed(self, exc: grpc.RpcError, endpoint: str, vgroup: int, what: str) -> Exception:
        """The error of a failed call; a dnode that did not answer loses its channel, so
        that the next call dials it afresh (not after gRPC's reconnect backoff)."""
        error = _error(exc, endpoint, vgroup, what)
        if isinstance(error, VgroupUnavailable):
            with self._lock:
                found = self._stubs.pop(endpoint, None)
            if found is not None:
                found[0].close()
        return error

    def close(self) -> None:
        with self._lock:
            for channel, _stub in self._stubs.values():
                channel.close()
            self._stubs.clear()


def _error(exc: grpc.RpcError, endpoint: str, vgroup: int, what: str) -> Exception:
    error = peer_error(exc)
    if type(error) is ServerUnavailable:
        return VgroupUnavailable(
            f"vgroup {vgroup}: its dnode at {endpoint} does not answer ({error}); "
            f"{what}: retry once it is back (SHOW DNODES)"
        )
    return error


def _lag(lag: pb.SubscriptionLag) -> Lag:
    """A dnode's answer for one subscription, None for the fields it left out."""
    return (
        lag.lag_rows if lag.HasField("lag_rows") else None,
        lag.lag_ms if lag.HasField("lag_ms") else None,
        lag.last_poll_us if lag.HasField("last_poll_us") else None,
        lag.last_commit_us if lag.HasField("last_commit_us") else None,
    )
