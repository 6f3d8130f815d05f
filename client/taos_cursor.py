"""taospy's `TaosCursor` (`taos/cursor.py`, PEP 249's cursor) over a `TaosConnection`
of `sqltopic.taos`: `execute`, `fetchone`, `fetchmany`, `fetchall`, iteration,
`description`, `rowcount`, `affected_rows`, `close`."""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sqltopic.client.taos_errors import OperationalError, ProgrammingError
from sqltopic.client.taos_rows import Row

if TYPE_CHECKING:
    from sqltopic.client.taos_connection import TaosConnection, TaosResult

# PEP 249: fetchmany() without a size fetches `arraysize` rows, 1 by default.
DEFAULT_ARRAYSIZE = 1
# PEP 249's description: (name, type_code, display_size, internal_size, precision,
# scale, null_ok); taospy fills the first two and null_ok False.
Description = tuple[str, int, None, None, None, None, bool]


class TaosCursor:
    """A cursor on `connection`. `rowcount` is the affected rows of a statement, or the
    rows of a query (known at once: the whole result has arrived); -1 before execute."""

    def __init__(self, connection: TaosConnection | None = None) -> None:
        self._connection = connection
        self._result: TaosResult | None = None
        self._rows: list[Row] = []
        self._next = 0
        self._rowcount = -1
        self._affected_rows = 0
        self.arraysize = DEFAULT_ARRAYSIZE

    @property
    def description(self) -> list[Description]:
        if self._result is None:
            return []
        return [(f.name, f.type, None, None, None, None, False) for f in self._result.fields]

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def affected_rows(self) -> int:
        return self._affected_rows

    def execute(self, operation: str, params: Any = None) -> int:
        """Run `operation`; its affected rows (a statement) or its rows (a query).
        `params` are not supported (taospy ignores them): format the SQL yourself."""
        if self._connection is None:
            raise ProgrammingError("Cursor is not connected: execute on a closed cursor")
        if params is not None:
            raise ProgrammingError(
                "execute: params are not supported (taospy ignores them); put the values "
                "into the SQL text"
            )
        result = self._connection.query(operation)
        self._result, self._next = result, 0
        self._affected_rows = result.affected_rows
        self._rows = result.fetch_all() if result.field_count else []
        self._rowcount = len(self._rows) if result.field_count else result.affected_rows
        return self._rowcount

    def fetchone(self) -> Row | None:
        """The next row, or None after the last one."""
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[Row]:
        self._check("fetchmany")
        count = self.arraysize if size is None else size
        rows = self._rows[self._next : self._next + count]
        self._next += len(rows)
        return rows

    def fetchall(self) -> list[Row]:
        """The rows not fetched yet."""
        self._check("fetchall")
        rows = self._rows[self._next :]
        self._next = len(self._rows)
        return rows

    def close(self) -> bool:
        """Close the cursor (not the connection); False if it was closed already."""
        if self._connection is None:
            return False
        self._connection, self._result, self._rows = None, None, []
        return True

    def __iter__(self) -> Iterator[Row]:
        while (row := self.fetchone()) is not None:
            yield row

    def __enter__(self) -> TaosCursor:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _check(self, what: str) -> None:
        if self._result is None:
            raise OperationalError(f"Invalid use of {what}: call execute(sql) first")
