"""taospy's TMQ records over sqltopic's (see `sqltopic.taos`): `Message`, `MessageBlock`,
`TaosField` and `TopicPartition` with taospy's names, constructors and return types
(`taos/tmq.py` of taosdata/taos-connector-python)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqltopic.client.message import Block
from sqltopic.client.message import Message as SqlMessage
from sqltopic.client.taos_errors import TmqError
from sqltopic.client.taos_fields import TaosField, taos_fields
from sqltopic.client.taos_rows import taos_values

log = logging.getLogger("sqltopic.taos")
__all__ = ["Message", "MessageBlock", "TaosField", "TopicPartition", "message_block"]


@dataclass
class TopicPartition:
    """taospy's TopicPartition: `partition` is the vgroup id; `begin`/`end` the vnode's
    retained version range."""

    topic: str
    partition: int
    offset: int
    begin: int = 0
    end: int = 0

    def __str__(self) -> str:
        where = f"topic={self.topic}, partition={self.partition}, offset={self.offset}"
        return f"TopicPartition({where})"


class MessageBlock:
    """The rows of one table in a message (taospy's constructor: columns, fields, rows,
    columns count, table name)."""

    def __init__(
        self,
        block: list[list[Any]] | None = None,
        fields: list[TaosField] | None = None,
        row_count: int = 0,
        col_count: int = 0,
        table: str | None = "",
    ) -> None:
        self._block = block or []
        self._fields = fields or []
        self._rows = row_count
        self._cols = col_count
        self._table = table

    def fields(self) -> list[TaosField]:
        return self._fields

    def nrows(self) -> int:
        return self._rows

    def ncols(self) -> int:
        return self._cols

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row as a tuple, columns in the topic's order."""
        return list(map(tuple, zip(*self._block, strict=True)))

    def table(self) -> str | None:
        """The table the rows come from (None when the server did not name it)."""
        return self._table

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.fetchall())


def message_block(block: Block, decode_binary: bool = True) -> MessageBlock:
    """`block` as taospy's MessageBlock: nanosecond timestamps as ints, timestamps that
    `datetime` cannot hold as None (taos_rows.py), never a conversion error."""
    data = block.data
    columns = [taos_values(data.column(i), decode_binary) for i in range(data.num_columns)]
    fields = taos_fields(data)
    return MessageBlock(columns, fields, data.num_rows, data.num_columns, block.table_name)


class Message:
    """One message of one vgroup of one topic, as taospy's: `error()`, `topic()`,
    `database()`, `vgroup()`, `offset()` (the first version it covers), `value()` (the
    blocks; None for a meta message), iteration over the blocks. `message` is
    sqltopic's Message (kind, end_offset, meta, Arrow data)."""

    def __init__(
        self,
        message: SqlMessage | None = None,
        error: TmqError | None = None,
        decode_binary: bool = True,
    ) -> None:
        self._error = error
        self.message = message
        self._decode_binary = decode_binary
        self._blocks: list[MessageBlock] | None = None

    def error(self) -> TmqError | None:
        return self._error

    def topic(self) -> str:
        return self._message().topic

    def database(self) -> str:
        return self._message().database

    def vgroup(self) -> int:
        return self._message().vgroup

    def offset(self) -> int:
        return self._message().offset

    def value(self) -> list[MessageBlock] | None:
        """The data blocks; None for a meta message (TMQ_RES_TABLE_META), [] for a
        data_lost one (retention removed versions before they were read)."""
        message = self._message()
        if message.kind == "meta":
            return None
        if self._blocks is None:
            self._blocks = [message_block(b, self._decode_binary) for b in message.blocks]
        return self._blocks

    def __iter__(self) -> Iterator[MessageBlock]:
        return iter(self.value() or [])

    def _message(self) -> SqlMessage:
        if self.message is None:
            raise TmqError("this Message carries an error, not data: see error()")
        return self.message
