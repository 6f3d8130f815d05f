"""`sqltopic server --http-port`: the console's JSON API against a real server process:
login with the protocol's users, the overview of a group made to fall behind by a known
number of rows (its lag, its lag history, its rebalance), rights per user, and every
refusal (no or bad token, foreign Host, oversized or malformed login, write methods)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sqltopic.client import connect
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.server.console.lag_history import NO_LAG
from sqltopic.server.mnode.passwords import is_loopback
from sqltopic.server.mnode.throttle import FREE_FAILURES
from tests.console.support import (
    BEHIND,
    HTTP_TIMEOUT_S,
    LAGGING_GROUP,
    TOPIC_NAME,
    Answer,
    call,
    console_server,
    lagging_group,
    login,
    wait_for,
)
from tests.live_server import ServerProcess

ALICE = ("alice", "alice-pw-1234")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """One server for the module, with a lagging group (its consumer alive throughout)
    and user alice, who may not consume its topic yet."""
    with (
        console_server(tmp_path_factory.mktemp("console") / "data") as (server, url),
        lagging_group(server.address),
    ):
        with connect(server.address) as conn:
            conn.execute(f"CREATE USER {ALICE[0]} PASS '{ALICE[1]}'")
        yield server, url


def _mine(overview: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in overview["subscriptions"] if s["consumer_group"] == LAGGING_GROUP]


def test_the_overview_shows_the_lagging_group(console: tuple[ServerProcess, str]) -> None:
    _, url = console
    token = login(url)
    answer = call(url + "api/overview", token=token)
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "application/json"
    data = answer.json
    assert data["user"] == {"user": "root", "superuser": True}
    assert [d["name"] for d in data["databases"]] == ["power"]
    assert data["databases"][0]["create_time"].endswith("Z")
    assert sorted(v["vgroup"] for v in data["vgroups"]) == [1, 2]
    (topic,) = data["topics"]
    assert topic["topic_name"] == TOPIC_NAME
    assert topic["sql"].startswith("CREATE TOPIC overvoltage AS SELECT")
    (consumer,) = data["consumers"]
    assert (consumer["consumer_group"], consumer["topic"]) == (LAGGING_GROUP, TOPIC_NAME)
    rows = _mine(data)
    assert sorted(r["vgroup_id"] for r in rows) == [1, 2]
    assert sum(r["lag_rows"] for r in rows) == BEHIND
    assert max(r["lag_ms"] for r in rows) >= 0
    behind = next(r for r in rows if r["lag_rows"] == BEHIND)
    assert behind["consumer_id"] == consumer["consumer_id"]
    (join,) = [r for r in data["rebalances"] if r["group"] == LAGGING_GROUP]
    assert (join["topic"], join["cause"], join["consumers"]) == (TOPIC_NAME, "join", 1)
    assert join["assigned"] == [{"consumer_id": consumer["consumer_id"], "vgroups": [1, 2]}]
    assert data["truncated"] == []


def test_the_lag_history_follows_the_group(console: tuple[ServerProcess, str]) -> None:
    """The sampler keeps each vgroup's lag_ms; the vgroup behind has a growing lag."""
    _, url = console
    token = login(url)

    def two_samples() -> dict[str, Any] | None:
        """Two samples of both vgroups with a lag known in each (a sample whose row had
        no lag yet holds NO_LAG)."""
        lag = call(url + "api/overview", token=token).json["lag"]
        series = [s for s in lag["series"] if s["group"] == LAGGING_GROUP]
        if len(series) == 2 and all(
            len(s["lag_ms"]) >= 2 and NO_LAG not in s["lag_ms"][-2:] for s in series
        ):
            return lag  # type: ignore[no-any-return]
        return None

    lag = wait_for("two known lag samples of both vgroups", two_samples)
    assert lag["interval_ms"] == 2000
    assert lag["times"] == sorted(lag["times"])
    series = {s["vgroup"]: s["lag_ms"] for s in lag["series"] if s["group"] == LAGGING_GROUP}
    assert all(len(v) <= len(lag["times"]) for v in series.values())
    behind = [v for v in series.values() if v[-1] > 0]
    assert len(behind) == 1  # d1001's vgroup; the other is caught up
    assert behind[0][-1] >= behind[0][-2]  # the oldest unread entry only gets older
    (caught_up,) = [v for v in series.values() if v[-1] == 0]
    assert caught_up[-2:] == [0, 0]


def test_a_protocol_token_opens_the_console(console: tuple[ServerProcess, str]) -> None:
    """The token of the gRPC Session.Login is a console token too (one login)."""
    server, url = console
    with grpc.insecure_channel(server.address) as channel:
        login_answer = pb_grpc.SessionStub(channel).Login(
            pb.LoginRequest(user="root", password="taosdata"), timeout=HTTP_TIMEOUT_S
        )
    answer = call(url + "api/session", token=login_answer.token)
    assert answer.json == {"user": "root", "superuser": True}


def test_a_user_sees_only_what_they_may_consume(console: tuple[ServerProcess, str]) -> None:
    server, url = console
    token = login(url, *ALICE)
    assert call(url + "api/session", token=token).json == {"user": "alice", "superuser": False}
    data = call(url + "api/overview", token=token).json
    assert (data["topics"], data["subscriptions"], data["consumers"]) == ([], [], [])
    assert data["rebalances"] == []
    assert data["lag"]["series"] == []
    with connect(server.address) as conn:
        conn.execute(f"GRANT SUBSCRIBE ON {TOPIC_NAME} TO {ALICE[0]}")
    try:
        data = call(url + "api/overview", token=token).json
        assert [t["topic_name"] for t in data["topics"]] == [TOPIC_NAME]
        assert sum(r["lag_rows"] for r in _mine(data)) == BEHIND
        assert [r["group"] for r in data["rebalances"]] == [LAGGING_GROUP]
    finally:
        with connect(server.address) as conn:
            conn.execute(f"REVOKE SUBSCRIBE ON {TOPIC_NAME} FROM {ALICE[0]}")


def test_the_page_and_its_files_are_served_with_a_strict_policy(
    console: tuple[ServerProcess, str],
) -> None:
    _, url = console
    for path, kind in (("", "text/html"), ("console.js", "text/javascript"),
                       ("console.css", "text/css")):  # fmt: skip
        answer = call(url + path)
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith(kind)
        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Server"] == "sqltopic-console"
    assert b'<script src="/console.js"' in call(url).data


def _refused(answer: Answer, status: int, code: str, words: str) -> None:
    assert answer.status == status, answer.data
    assert answer.error["code"] == code
    assert words in answer.error["message"], answer.error["message"]
    assert "Content-Security-Policy" in answer.headers


def test_calls_without_a_valid_token_are_refused(console: tuple[ServerProcess, str]) -> None:
    _, url = console
    answer = call(url + "api/overview")
    _refused(answer, 401, "UNAUTHENTICATED", "no Authorization header")
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="sqltopic"'
    _refused(call(url + "api/overview", token="forged"), 401, "UNAUTHENTICATED", "")
    _refused(
        call(url + "api/overview", headers={"Authorization": "Basic cm9vdDp0YW9zZGF0YQ=="}),
        401, "UNAUTHENTICATED", "expected 'Bearer <token>'",
    )  # fmt: skip
    token = login(url)
    assert call(url + "api/session", "DELETE", token=token).status == 200
    _refused(call(url + "api/overview", token=token), 401, "UNAUTHENTICATED", "")


def test_wrong_passwords_are_refused_and_throttled(tmp_path: Path) -> None:
    """A server of its own: the throttle counts failures per peer, and every test's peer
    is 127.0.0.1."""
    with console_server(tmp_path / "data") as (_, url):
        answer = call(url + "api/session", "POST", {"user": "bob", "password": "nope"})
        _refused(answer, 401, "UNAUTHENTICATED", "wrong user or password")
        assert answer.error["type"] == "AuthenticationFailed"
        statuses = [
            call(url + "api/session", "POST", {"user": "bob", "password": "nope"}).status
            for _ in range(FREE_FAILURES - 1)
        ]
        assert statuses == [401] * (FREE_FAILURES - 1)  # a person's typing mistakes
        # each further failure doubles the wait (from 0.5 s): one of the next few comes
        # before its wait is over, however slow this machine
        for _ in range(10):
            throttled = call(url + "api/session", "POST", {"user": "bob", "password": "nope"})
            if throttled.status != 401:
                break
        # the protocol's own throttle (UNAUTHENTICATED there), HTTP's Too Many Requests
        _refused(throttled, 429, "UNAUTHENTICATED", "")
        assert throttled.error["type"] == "LoginThrottled"
        assert int(throttled.headers["Retry-After"]) >= 1


@pytest.mark.parametrize(
    ("raw", "headers", "status", "code", "words"),
    [
        (b"x" * 5000, {}, 413, "TOO_LARGE", "at most 4096 bytes"),
        (b"{not json", {}, 400, "INVALID_ARGUMENT", "not JSON"),
        (b"\xff\xfe", {}, 400, "INVALID_ARGUMENT", "not JSON"),
        (b'["root", "taosdata"]', {}, 400, "INVALID_ARGUMENT", "and no more"),
        (b'{"user": "root", "password": "taosdata", "x": 1}', {}, 400, "INVALID_ARGUMENT",
         "and no more"),
        (b'{"user": "root", "password": 1}', {}, 400, "INVALID_ARGUMENT", "JSON strings"),
        (b'{"user": "", "password": "x"}', {}, 400, "INVALID_ARGUMENT", "not empty"),
    ],
)  # fmt: skip
def test_malformed_logins_are_refused(
    console: tuple[ServerProcess, str], raw: bytes, headers: dict[str, str], status: int,
    code: str, words: str,
) -> None:  # fmt: skip
    _, url = console
    _refused(call(url + "api/session", "POST", raw=raw, headers=headers), status, code, words)


def _raw(url: str, request: bytes) -> bytes:
    """A hand-written request's whole answer."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_login_without_a_length_is_refused(console: tuple[ServerProcess, str]) -> None:
    _, url = console
    answer = _raw(url, b"POST /api/session HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 411 ")
    assert b"needs a Content-Length header" in answer


def test_a_foreign_host_is_refused(console: tuple[ServerProcess, str]) -> None:
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 names its own host."""
    _, url = console
    for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example"):
        answer = call(url + "api/session", "POST", {"user": "root", "password": "taosdata"},
                      headers={"Host": host})  # fmt: skip
        _refused(answer, 403, "PERMISSION_DENIED", "is not this machine")
    hostless = _raw(url, b"GET / HTTP/1.0\r\n\r\n")  # no Host at all
    assert hostless.startswith(b"HTTP/1.0 403 ")
    for host in ("localhost", "127.0.0.1", "[::1]:8080", "127.0.0.2:1", "LocalHost:80"):
        assert call(url, headers={"Host": host}).status == 200
    for host in ("[::1", "::1", "[fe80::1]:80", "", "0.0.0.0"):
        assert call(url, headers={"Host": host}).status == 403, host


def test_a_name_that_resolves_to_loopback_is_not_enough(console: tuple[ServerProcess, str]) -> None:
    """The Host check never resolves: a rebinding attacker's name resolves to 127.0.0.1."""
    _, url = console
    name = socket.gethostname()
    if name.lower() == "localhost" or not is_loopback(name):
        pytest.skip(f"this machine's name {name!r} does not resolve to loopback alone")
    _refused(call(url, headers={"Host": name}), 403, "PERMISSION_DENIED", "is not this machine")


@pytest.mark.parametrize("method", ["PUT", "PATCH", "OPTIONS", "HEAD"])
def test_write_methods_are_refused(console: tuple[ServerProcess, str], method: str) -> None:
    _, url = console
    answer = call(url + "api/overview", method, raw=b"{}" if method != "HEAD" else None)
    assert answer.status == 405
    if method != "HEAD":
        assert "the console is read-only" in answer.error["message"]


def test_other_paths_are_not_found(console: tuple[ServerProcess, str]) -> None:
    _, url = console
    _refused(call(url + "api/nosuch"), 404, "NOT_FOUND", "the console is at /")
    _refused(call(url + "../../etc/passwd"), 404, "NOT_FOUND", "")
    _refused(call(url + "api/overview", "POST", raw=b"{}"), 405, "METHOD_NOT_ALLOWED", "")
    _refused(call(url + "api/overview", "DELETE"), 405, "METHOD_NOT_ALLOWED", "")


def test_the_server_refuses_a_console_off_loopback_in_plain_text(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=("--http-port", "0", "--http-host", "0.0.0.0"))
    assert server.proc.wait(timeout=60) == 1
    assert "refusing to listen on 0.0.0.0 without TLS" in server.stderr()
    assert not (tmp_path / "data").exists()


def test_the_server_names_a_taken_console_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ServerProcess(tmp_path / "data", extra=("--http-port", str(port)))
        assert server.proc.wait(timeout=60) == 1
        assert f"--http-port: cannot listen on 127.0.0.1:{port}" in server.stderr()
