"""A thin protocol-level client for tests: the generated stubs, a token, and the
consume calls with their usual arguments. Tests that check the wire itself use it
instead of `sqltopic.Consumer`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import grpc
import pyarrow as pa

from sqltopic.proto.arrow_ipc import MESSAGE_OPTIONS, from_ipc
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc

# Every unary call answers at once on a local server; long polls pass their own.
CALL_TIMEOUT_S = 30.0


class Wire:
    """One login on one channel, with the Mnode and Vnode stubs."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address, options=MESSAGE_OPTIONS)
        login = pb_grpc.SessionStub(self.channel).Login(
            pb.LoginRequest(user="root", password="taosdata"), timeout=CALL_TIMEOUT_S
        )
        self.md = (("authorization", f"Bearer {login.token}"),)
        self.mnode = pb_grpc.MnodeStub(self.channel)
        self.vnode = pb_grpc.VnodeStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def subscribe(
        self, group: str, topics: Iterable[str], **fields: object
    ) -> pb.SubscribeResponse:
        request = pb.SubscribeRequest(group_id=group, topics=list(topics), **fields)  # type: ignore[arg-type]
        return self.mnode.Subscribe(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def assignment(self, consumer: int, known: int = 0) -> pb.GetAssignmentResponse:
        request = pb.GetAssignmentRequest(consumer_id=consumer, known_epoch=known)
        return self.mnode.GetAssignment(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def poll(
        self, consumer: int, group: str, topic: str, vgroup: int, epoch: int,
        position: int | None = None, timeout: float = CALL_TIMEOUT_S, **fields: object,
    ) -> list[pb.PollResponse]:  # fmt: skip
        request = poll_request(consumer, group, topic, vgroup, epoch, position, fields)
        return list(self.vnode.Poll(request, metadata=self.md, timeout=timeout))

    def fetch(
        self, consumer: int, group: str, topic: str, vgroup: int, epoch: int,
        position: int | None = None, timeout: float = CALL_TIMEOUT_S, **fields: object,
    ) -> pb.PollResponse:  # fmt: skip
        request = poll_request(consumer, group, topic, vgroup, epoch, position, fields)
        return self.vnode.Fetch(request, metadata=self.md, timeout=timeout)

    def commit(self, consumer: int, group: str, epoch: int, *offsets: tuple[str, int, int]) -> None:
        items = [pb.TopicVgroupOffset(topic=t, vgroup=v, offset=o) for t, v, o in offsets]
        request = pb.CommitRequest(consumer_id=consumer, group_id=group, epoch=epoch, offsets=items)
        self.vnode.Commit(request, metadata=self.md, timeout=CALL_TIMEOUT_S)

    def committed(self, group: str, topic: str, vgroup: int) -> int | None:
        request = pb.CommittedRequest(
            group_id=group, vgroups=[pb.TopicVgroup(topic=topic, vgroup=vgroup)]
        )
        answer = self.vnode.Committed(request, metadata=self.md, timeout=CALL_TIMEOUT_S)
        found = answer.offsets[0]
        return found.offset if found.HasField("offset") else None

    def offset_range(self, topic: str, vgroup: int) -> tuple[int, int]:
        request = pb.OffsetRangeRequest(vgroups=[pb.TopicVgroup(topic=topic, vgroup=vgroup)])
        found = self.vnode.OffsetRange(request, metadata=self.md, timeout=CALL_TIMEOUT_S).ranges[0]
        return found.begin, found.end


def kind(frames: list[pb.PollResponse]) -> str:
    return frames[0].WhichOneof("message") or ""


def offsets(frames: list[pb.PollResponse]) -> tuple[int, int]:
    first = frames[0]
    message = getattr(first, kind(frames))
    return message.offset, message.end_offset


def blocks(frames: list[pb.PollResponse]) -> list[tuple[str | None, pa.Table]]:
    """The data message's blocks: (table_name, rows)."""
    parts: dict[int, list[bytes]] = {}
    names: dict[int, str | None] = {}
    for frame in frames:
        for part in frame.blocks:
            parts.setdefault(part.block, []).append(part.arrow_ipc)
            if part.block not in names:
                names[part.block] = part.table_name if part.HasField("table_name") else None
    return [(names[i], from_ipc(parts[i])) for i in sorted(parts)]


def rows(frames: list[pb.PollResponse]) -> list[dict[str, object]]:
    return [row for _, table in blocks(frames) for row in table.to_pylist()]


def status(exc: grpc.RpcError) -> tuple[grpc.StatusCode, dict[str, str]]:
    """A failed call's code and trailing metadata."""
    call = cast("grpc.Call", exc)
    trailers = {k: str(v) for k, v in (call.trailing_metadata() or ())}
    return call.code(), trailers


def poll_request(
    consumer: int, group: str, topic: str, vgroup: int, epoch: int, position: int | None,
    fields: dict[str, object],
) -> pb.PollRequest:  # fmt: skip
    request = pb.PollRequest(
        consumer_id=consumer, group_id=group, topic=topic, vgroup=vgroup, epoch=epoch,
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip
    if position is not None:
        request.position = position
    return request
