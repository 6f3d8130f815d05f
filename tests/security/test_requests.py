"""Requests that are not valid protobuf (bad bytes, invalid UTF-8 in a string field) are
answered InvalidRequest (INVALID_ARGUMENT), never gRPC's UNKNOWN or INTERNAL, in unary,
server-streaming and client-streaming calls alike; nothing changes and the server
keeps serving."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from sqltopic.client import Connection
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from tests.live_server import ServerProcess
from tests.security.hostile import CALL_TIMEOUT_S, UserWire, refusal

BAD = (grpc.StatusCode.INVALID_ARGUMENT, "InvalidRequest")


def field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (strings and bytes)."""
    return bytes([number << 3 | 2, len(value)]) + value


def raw(wire: UserWire, method: str, kind: str) -> grpc.UnaryUnaryMultiCallable:  # type: ignore[type-arg]
    make = getattr(wire.channel, kind)
    return make(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)  # type: ignore[no-any-return]


@pytest.fixture
def wire(server: ServerProcess, live_power: Connection) -> Iterator[UserWire]:
    with UserWire(server.address) as w:
        yield w


@pytest.mark.parametrize(
    "body",
    [field(1, b"\xff\xfe") + field(2, b"taosdata"), b"\xff\xff\xff", b"\x0a\x50ab"],
    ids=["bad-utf8", "garbage", "truncated"],
)
def test_an_undecodable_login_is_invalid_request(wire: UserWire, body: bytes) -> None:
    login = raw(wire, "/sqltopic.v1.Session/Login", "unary_unary")
    code, error, message = refusal(lambda: login(body, timeout=CALL_TIMEOUT_S))
    assert (code, error) == BAD
    assert "not a valid LoginRequest message" in message


def test_an_undecodable_streaming_call_is_invalid_request(wire: UserWire) -> None:
    execute = raw(wire, "/sqltopic.v1.Sql/Execute", "unary_stream")
    code, error, message = refusal(
        lambda: list(execute(field(1, b"SELECT '\xff'"), metadata=wire.md, timeout=CALL_TIMEOUT_S))
    )
    assert (code, error) == BAD
    assert "not a valid ExecuteRequest message" in message


def test_a_bad_frame_in_a_write_stream_writes_nothing(
    wire: UserWire, live_power: Connection
) -> None:
    write = raw(wire, "/sqltopic.v1.Sql/Write", "stream_unary")
    good = pb.WriteRequest(target="power.meters").SerializeToString()
    frames = iter([good, b"\xff\xff\xff\xff"])
    code, error, message = refusal(lambda: write(frames, metadata=wire.md, timeout=CALL_TIMEOUT_S))
    assert (code, error) == BAD
    assert "not a valid WriteRequest message" in message
    assert live_power.execute("SELECT count(*) FROM power.meters").rows == [(0,)]
    assert live_power.execute("SHOW DATABASES").columns[0] == "name"  # still serving


def test_an_undecodable_message_on_a_consume_stream_ends_it_as_invalid_request(
    wire: UserWire,
) -> None:
    consume = wire.channel.stream_stream(
        "/sqltopic.v1.Vnode/Consume",
        request_serializer=lambda b: b,
        response_deserializer=pb.ConsumeResponse.FromString,
    )
    code, error, message = refusal(
        lambda: list(consume(iter([b"\xff\xff\xff"]), metadata=wire.md, timeout=CALL_TIMEOUT_S))
    )
    assert (code, error) == BAD
    assert "not a valid ConsumeRequest message" in message
