"""What the hostile-client tests share: a protocol-level client logged in as any user,
making every call with raw protobuf fields, and the status a refused call carries."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar, cast

import grpc

from sqltopic.proto.arrow_ipc import MESSAGE_OPTIONS
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc

# Every call answers at once on a local server.
CALL_TIMEOUT_S = 30.0
T = TypeVar("T")


class Refused(AssertionError):
    """A call that was expected to fail succeeded."""


class UserWire:
    """One login of `user` on its own channel, with every service's stub."""

    def __init__(self, address: str, user: str = "root", password: str = "taosdata") -> None:
        self.channel = grpc.insecure_channel(address, options=MESSAGE_OPTIONS)
        login = pb_grpc.SessionStub(self.channel).Login(
            pb.LoginRequest(user=user, password=password), timeout=CALL_TIMEOUT_S
        )
        self.user = user
        self.md = (("authorization", f"Bearer {login.token}"),)
        self.sql = pb_grpc.SqlStub(self.channel)
        self.mnode = pb_grpc.MnodeStub(self.channel)
        self.vnode = pb_grpc.VnodeStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> UserWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subscribe(
        self, group: str, topics: Iterable[str], **fields: object
    ) -> pb.SubscribeResponse:
        request = pb.SubscribeRequest(group_id=group, topics=list(topics), **fields)  # type: ignore[arg-type]
        return self.mnode.Subscribe(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def heartbeat(self, consumer: int, epoch: int = 0, **fields: object) -> pb.HeartbeatResponse:
        request = pb.HeartbeatRequest(consumer_id=consumer, epoch=epoch, **fields)  # type: ignore[arg-type]
        return self.mnode.Heartbeat(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def assignment(self, consumer: int, known: int = 0) -> pb.GetAssignmentResponse:
        request = pb.GetAssignmentRequest(consumer_id=consumer, known_epoch=known)
        return self.mnode.GetAssignment(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def unsubscribe(self, consumer: int) -> pb.UnsubscribeResponse:
        request = pb.UnsubscribeRequest(consumer_id=consumer)
        return self.mnode.Unsubscribe(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def close_consumer(self, consumer: int) -> pb.CloseResponse:
        request = pb.CloseRequest(consumer_id=consumer)
        return self.mnode.Close(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def poll(self, request: pb.PollRequest) -> list[pb.PollResponse]:
        return list(self.vnode.Poll(request, metadata=self.md, timeout=CALL_TIMEOUT_S))

    def fetch(self, request: pb.PollRequest) -> pb.PollResponse:
        return self.vnode.Fetch(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def acknowledge(self, request: pb.AcknowledgeRequest) -> pb.AcknowledgeResponse:
        return self.vnode.Acknowledge(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def commit(self, request: pb.CommitRequest) -> pb.CommitResponse:
        return self.vnode.Commit(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def committed(self, group: str, topic: str, vgroup: int) -> int | None:
        request = pb.CommittedRequest(
            group_id=group, vgroups=[pb.TopicVgroup(topic=topic, vgroup=vgroup)]
        )
        found = self.vnode.Committed(request, metadata=self.md, timeout=CALL_TIMEOUT_S).offsets[0]
        return found.offset if found.HasField("offset") else None

    def offset_range(self, topic: str, vgroup: int) -> tuple[int, int]:
        request = pb.OffsetRangeRequest(vgroups=[pb.TopicVgroup(topic=topic, vgroup=vgroup)])
        found = self.vnode.OffsetRange(request, metadata=self.md, timeout=CALL_TIMEOUT_S).ranges[0]
        return found.begin, found.end

    def offsets_for_times(self, topic: str, vgroup: int, *times_ms: int) -> list[int]:
        request = pb.OffsetsForTimesRequest(
            vgroups=[pb.TopicVgroupTime(topic=topic, vgroup=vgroup, time_ms=t) for t in times_ms]
        )
        found = self.vnode.OffsetsForTimes(request, metadata=self.md, timeout=CALL_TIMEOUT_S)
        return [o.offset for o in found.offsets]

    def execute(self, sql: str) -> list[pb.ExecuteResponse]:
        request = pb.ExecuteRequest(sql=sql)
        return list(self.sql.Execute(request, metadata=self.md, timeout=CALL_TIMEOUT_S))


def refusal(call: Callable[[], T]) -> tuple[grpc.StatusCode, str, str]:
    """The status code, sqltopic error class and message of a call that must fail."""
    try:
        call()
    except grpc.RpcError as exc:
        status = cast("grpc.Call", exc)
        trailers = {k: str(v) for k, v in (status.trailing_metadata() or ())}
        return status.code(), trailers.get("sqltopic-error", ""), status.details() or ""
    raise Refused("the call succeeded")
