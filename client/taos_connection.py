"""The few `taos.connect()` calls that taospy's subscription examples make around their
consumer (`execute`, `query`, `select_db`, `close`), over `sqltopic.connect`; see
`sqltopic.taos`. Errors are sqltopic's (SqlError with line and column, …)."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any

from sqltopic.client.config import DEFAULT_HOST, DEFAULT_PORT
from sqltopic.client.connection import Connection, Result
from sqltopic.client.connection import connect as sql_connect


class TaosResult:
    """A query's rows, as taospy's TaosResult: `fetch_all()`, iteration, `field_count`,
    `affected_rows`."""

    def __init__(self, result: Result) -> None:
        self._result = result

    @property
    def field_count(self) -> int:
        return len(self._result.columns)

    @property
    def affected_rows(self) -> int:
        return self._result.affected_rows

    def fetch_all(self) -> list[tuple[Any, ...]]:
        return self._result.rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._result.rows)


class TaosConnection:
    """A session, as taospy's TaosConnection: `execute` (affected rows), `query`
    (a TaosResult), `select_db`, `close`. `connection` is sqltopic's Connection."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def execute(self, sql: str, req_id: int | None = None) -> int:
        return self.connection.execute(sql).affected_rows

    def query(self, sql: str, req_id: int | None = None) -> TaosResult:
        return TaosResult(self.connection.execute(sql))

    def select_db(self, database: str) -> None:
        self.connection.execute(f"USE {database}")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> TaosConnection:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def connect(
    host: str | None = None,
    user: str = "root",
    password: str = "taosdata",
    database: str | None = None,
    port: int = 0,
    **ignored: Any,
) -> TaosConnection:
    """taospy's `taos.connect(host, user, password, database, port)`; taospy's other
    arguments (config, timezone) have no meaning here and are ignored."""
    address = f"{host or DEFAULT_HOST}:{port or DEFAULT_PORT}"
    return TaosConnection(sql_connect(address, user, password, database))
