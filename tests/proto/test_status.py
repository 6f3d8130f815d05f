"""Errors on the wire: every class has a status code and comes back as itself."""

from __future__ import annotations

import grpc
import pytest

from sqltopic import errors as e
from sqltopic.proto.status import CLASSES, FALLBACK, code_of, from_status, to_status

Code = grpc.StatusCode


def _instance(cls: type[e.Error]) -> e.Error:
    if issubclass(cls, e.SqlError):
        return cls("bad thing near x", line=3, column=14)
    if issubclass(cls, e.OffsetOutOfRange):
        return cls("position 99 is outside 5..20", begin=5, end=20)
    if issubclass(cls, e.WalCorruptionError):
        return cls("bad record", path="/data/x.log", offset=48)
    if cls is e.VersionNotRetained:
        return cls(2, 10, 20)
    if cls is e.DataFileDamaged:
        return cls("/data/catalog.sqlite: the catalog is damaged", path="/data/catalog.sqlite")
    return cls("it went wrong")


@pytest.mark.parametrize("cls", [CLASSES[name] for name in sorted(CLASSES)], ids=sorted(CLASSES))
def test_every_class_round_trips(cls: type[e.Error]) -> None:
    err = _instance(cls)
    code, message, trailers = to_status(err)
    back = from_status(code, message, trailers)
    assert type(back) is cls
    assert isinstance(back, e.Error)
    if isinstance(err, e.SqlError):
        assert isinstance(back, e.SqlError)
        assert (back.message, back.line, back.column) == ("bad thing near x", 3, 14)
        assert str(back) == str(err)  # the same text on both sides
    elif isinstance(err, e.OffsetOutOfRange):
        assert isinstance(back, e.OffsetOutOfRange)
        assert (back.begin, back.end) == (5, 20)
    elif isinstance(err, e.VersionNotRetained):
        assert isinstance(back, e.VersionNotRetained)
        assert (back.first_version, back.next_version) == (10, 20)
        assert str(back) == str(err)
    else:
        assert str(back) == str(err)


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (e.TopicNotFound("no topic t"), Code.NOT_FOUND),
        (e.SqlSyntaxError("x"), Code.INVALID_ARGUMENT),
        (e.InvalidTopicQuery("x"), Code.INVALID_ARGUMENT),
        (e.AlreadyExistsError("x"), Code.ALREADY_EXISTS),
        (e.SchemaInUseError("x"), Code.FAILED_PRECONDITION),
        (e.NoCommittedOffset("x"), Code.FAILED_PRECONDITION),
        (e.OffsetOutOfRange("x"), Code.OUT_OF_RANGE),
        (e.ConfigError("x"), Code.INVALID_ARGUMENT),
        (e.NoPermission("x"), Code.PERMISSION_DENIED),
        (e.AuthenticationFailed("x"), Code.UNAUTHENTICATED),
        (e.ConsumerFenced("x"), Code.ABORTED),
        (e.RebalanceInProgress("x"), Code.UNAVAILABLE),
        (e.WalCorruptionError("x", path="p", offset=0), Code.DATA_LOSS),
        (e.WalLockedError("x"), Code.INTERNAL),
        (e.InvalidRequest("x"), Code.INVALID_ARGUMENT),
        (e.LimitExceeded("x"), Code.RESOURCE_EXHAUSTED),
        (e.LoginThrottled("x", retry_after_s=2.0), Code.UNAUTHENTICATED),
        (e.DataFileDamaged("x", path="p"), Code.DATA_LOSS),
        (e.VersionNotRetained(2, 10, 20), Code.OUT_OF_RANGE),
    ],
)
def test_codes_follow_the_protocol(err: e.Error, code: Code) -> None:
    assert code_of(err) == code


def test_without_a_class_name_the_code_decides() -> None:
    back = from_status(Code.NOT_FOUND, "gone", [])
    assert type(back) is e.NotFoundError
    assert str(back) == "gone"
    unknown = from_status(Code.ABORTED, "fenced", [("sqltopic-error", "SomethingNew")])
    assert type(unknown) is e.ConsumerFenced
    # gRPC's own deadline or cancel (no class name): transient, as a lost connection
    assert type(from_status(Code.DEADLINE_EXCEEDED, "slow", [])) is e.ServerUnavailable
    assert type(from_status(Code.CANCELLED, "gone", [])) is e.ServerUnavailable
    assert type(from_status(Code.INTERNAL, "bug", [])) is e.Error
    assert set(FALLBACK.values()) <= set(CLASSES.values())


def test_trailers_may_arrive_as_bytes() -> None:
    back = from_status(
        Code.INVALID_ARGUMENT, "m", [("sqltopic-error", b"SqlSyntaxError"), ("sqltopic-line", b"2")]
    )
    assert isinstance(back, e.SqlSyntaxError)
    assert back.line == 2
