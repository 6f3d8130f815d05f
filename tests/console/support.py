"""The console's tests: a server started with `--http-port 0`, its console URL (from
the line the server prints before its ready line), plain HTTP calls with urllib, and a
consumer group made to fall behind by a known number of rows."""

from __future__ import annotations

import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqltopic.client import connect
from sqltopic.client.consumer import Consumer
from tests.client.support import METERS, TOPIC, config, drain, later_rows
from tests.live_server import POWER, ServerProcess

CONSOLE_LINE = "sqltopic console on "
# One HTTP request on loopback answers within this.
HTTP_TIMEOUT_S = 30.0
# Conditions that come true within a few samples (LAG_SAMPLE_INTERVAL_S) of the server.
DEADLINE_S = 60.0
ROOT = ("root", "taosdata")
BEHIND = 7  # rows written after the lagging group caught up
LAGGING_GROUP = "lagging"
TOPIC_NAME = "overvoltage"


class Answer:
    """An HTTP answer: status, headers and the JSON body (None when not JSON)."""

    def __init__(self, status: int, headers: Any, data: bytes) -> None:
        self.status, self.headers, self.data = status, headers, data
        try:
            self.json: Any = json.loads(data)
        except ValueError:
            self.json = None

    @property
    def error(self) -> dict[str, str]:
        assert self.json is not None, self.data[:300]
        assert "error" in self.json, self.json
        return self.json["error"]  # type: ignore[no-any-return]


def call(
    url: str, method: str = "GET", body: Any = None, token: str | None = None,
    headers: dict[str, str] | None = None, raw: bytes | None = None,
    context: ssl.SSLContext | None = None,
) -> Answer:  # fmt: skip
    """One request; the answer whatever its status."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None and "Content-Type" not in (headers or {}):
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S, context=context) as answer:
            return Answer(answer.status, answer.headers, answer.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, exc.headers, exc.read())


def login(url: str, user: str = ROOT[0], password: str = ROOT[1]) -> str:
    answer = call(url + "api/session", "POST", {"user": user, "password": password})
    assert answer.status == 200, answer.data
    return str(answer.json["token"])


def console_url(server: ServerProcess) -> str:
    """The console's URL from the server's stdout (it must have printed it)."""
    lines = [line for line in server.before_ready if line.startswith(CONSOLE_LINE)]
    assert len(lines) == 1, server.before_ready
    return lines[0][len(CONSOLE_LINE) :].strip()


@contextlib.contextmanager
def console_server(data: Path, *extra: str) -> Iterator[tuple[ServerProcess, str]]:
    """A server with a console on a free port: the process and the console's URL."""
    server = ServerProcess(data, extra=("--http-port", "0", *extra))
    try:
        server.wait_ready()
        yield server, console_url(server)
    finally:
        server.kill()


@contextlib.contextmanager
def lagging_group(address: str) -> Iterator[Consumer]:
    """POWER with the `overvoltage` topic; a consumer of group `lagging` that read and
    committed everything, then BEHIND matching rows written to d1001. The consumer stays
    a live member (its heartbeats) until the block ends."""
    with connect(address) as conn:
        conn.execute(f"{POWER}{METERS}; {TOPIC}")
    consumer = Consumer(config(address, LAGGING_GROUP))
    try:
        consumer.subscribe([TOPIC_NAME])
        drain(consumer)
        consumer.commit()
        with connect(address) as conn:
            conn.execute(later_rows(1_700_000_000_000, BEHIND))
        yield consumer
    finally:
        consumer.close()


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    """`check()`'s first truthy answer, tried until DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.1)
