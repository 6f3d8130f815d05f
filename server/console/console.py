"""The console as the server starts it: the lag sampler and the HTTP server together."""

from __future__ import annotations

import ssl
from typing import Any

from sqltopic.server.console.api import ConsoleApi
from sqltopic.server.console.lag_history import LagHistory, LagSampler
from sqltopic.server.console.web import ConsoleServer, start_console
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import Sessions


class Console:
    """A started console; `stop` ends its thread and sampler."""

    def __init__(self, http: ConsoleServer, sampler: LagSampler, url: str) -> None:
        self._http, self._sampler, self.url = http, sampler, url

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._sampler.stop()


def open_console(
    where: tuple[str, int] | None, engine: Engine, sessions: Sessions,
    tls: ssl.SSLContext | None,
) -> Console | None:  # fmt: skip
    """The console of `--http-host/--http-port` (None: not asked for), started, its
    address printed on stdout (`sqltopic console on URL`) before the ready line."""
    if where is None:
        return None

    def subscriptions() -> list[dict[str, Any]]:  # every group's, as the server
        return engine.execute("SHOW SUBSCRIPTIONS").table.to_pylist()  # type: ignore[no-any-return]

    history = LagHistory()
    sampler = LagSampler(history, subscriptions, lambda: engine.now_us() // 1000)
    api = ConsoleApi(engine, history, lambda: engine.now_us() // 1000)
    http, url = start_console(where[0], where[1], api, sessions, tls)
    sampler.start()
    print(f"sqltopic console on {url}", flush=True)
    return Console(http, sampler, url)
