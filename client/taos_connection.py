"""taospy's SQL API over `sqltopic.connect` (see `sqltopic.taos`): `connect()`, a
`TaosConnection` (`execute`, `query`, `select_db`, `cursor`, `close`) and its
`TaosResult` (`fields`, `field_count`, `row_count`, `affected_rows`, `fetch_all`,
iteration), as TDengine's documented Python examples use them. Rows are as taospy gives
them (taos_rows.py); a sqltopic error comes out as taospy's class (ProgrammingError for
a failed statement, ConnectionError for a failed login) that is still sqltopic's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

from sqltopic.client.config import DEFAULT_HOST, DEFAULT_PORT
from sqltopic.client.connection import Connection, Result
from sqltopic.client.connection import connect as sql_connect
from sqltopic.client.taos_cursor import TaosCursor
from sqltopic.client.taos_errors import sql_error
from sqltopic.client.taos_fields import TaosField, taos_fields
from sqltopic.client.taos_rows import Row, taos_rows
from sqltopic.errors import Error

T = TypeVar("T")


def taos_call(call: Callable[[], T]) -> T:
    """`call()`, with a sqltopic.Error raised as taospy's class (and still its own)."""
    try:
        return call()
    except Error as err:
        raise sql_error(err) from None


class TaosResult:
    """A statement's result, as taospy's TaosResult: `fields` (TaosField per column),
    `field_count`, `row_count` (rows fetched so far, as taospy), `affected_rows`,
    `fetch_all()`, `fetch_all_into_dict()`, `blocks_iter()` and iteration over the rows.
    `result` is sqltopic's Result (the Arrow table)."""

    def __init__(self, result: Result) -> None:
        self.result = result
        self._rows: list[Row] | None = None
        self._row_count = 0

    @property
    def fields(self) -> list[TaosField]:
        return taos_fields(self.result.table)

    @property
    def field_count(self) -> int:
        return int(self.result.table.num_columns)

    @property
    def row_count(self) -> int:
        return self._row_count

    @property
    def affected_rows(self) -> int:
        return self.result.affected_rows

    def fetch_all(self) -> list[Row]:
        rows = self._all()
        self._row_count = len(rows)
        return rows

    def fetch_all_into_dict(self) -> list[dict[str, Any]]:
        names = self.result.columns
        return [dict(zip(names, row, strict=True)) for row in self.fetch_all()]

    def blocks_iter(self) -> Iterator[tuple[list[Row], int]]:
        """taospy's blocks: (rows, length); all rows come as one block here."""
        rows = self.fetch_all()
        if rows:
            yield rows, len(rows)

    def close(self) -> None:
        """Nothing to free (taospy frees the C result)."""

    def __iter__(self) -> Iterator[Row]:
        for row in self._all():
            self._row_count += 1
            yield row

    def _all(self) -> list[Row]:
        if self._rows is None:
            self._rows = taos_rows(self.result.table)
        return self._rows


class TaosConnection:
    """A session, as taospy's TaosConnection: `execute` (affected rows), `query`
    (a TaosResult), `select_db`, `cursor`, `commit`/`rollback` (no-ops: no
    transactions, as TDengine), `close`. `connection` is sqltopic's Connection."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def execute(self, sql: str, req_id: int | None = None) -> int:
        return taos_call(lambda: self.connection.execute(sql)).affected_rows

    def query(self, sql: str, req_id: int | None = None) -> TaosResult:
        return TaosResult(taos_call(lambda: self.connection.execute(sql)))

    def select_db(self, database: str) -> None:
        taos_call(lambda: self.connection.execute(f"USE {database}"))

    def cursor(self) -> TaosCursor:
        return TaosCursor(self)

    def commit(self) -> None:
        """taospy's no-op: TDengine has no transactions."""

    def rollback(self) -> None:
        """taospy's no-op: TDengine has no transactions."""

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
    arguments (config, timezone) have no meaning here and are ignored. A failed login is
    a `ConnectionError` (taospy's), also `AuthenticationFailed` or `ServerUnavailable`."""
    address = f"{host or DEFAULT_HOST}:{port or DEFAULT_PORT}"
    return TaosConnection(taos_call(lambda: sql_connect(address, user, password, database)))
