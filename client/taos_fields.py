"""taospy's `TaosField` (`taos/field.py`): a column's name, TDengine type code and
size, built from an Arrow schema for `sqltopic.taos`'s message blocks and results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# TDengine's field type codes (taos.constants.FieldType), by Arrow type.
FIELD_TYPES: list[tuple[pa.DataType, int, int]] = [  # (Arrow type, TDengine type, bytes)
    (pa.bool_(), 1, 1),
    (pa.int8(), 2, 1),
    (pa.int16(), 3, 2),
    (pa.int32(), 4, 4),
    (pa.int64(), 5, 8),
    (pa.float32(), 6, 4),
    (pa.float64(), 7, 8),
    (pa.uint8(), 11, 1),
    (pa.uint16(), 12, 2),
    (pa.uint32(), 13, 4),
    (pa.uint64(), 14, 8),
]
VARCHAR, TIMESTAMP, VARBINARY = 8, 9, 16


@dataclass(frozen=True)
class TaosField:
    """A column as taospy's TaosField: `name`, `type` (TDengine's type code), `bytes`
    (for strings: the longest value; sqltopic does not carry the declared length); also
    readable as `field["name"]`, and shown as taospy shows it."""

    name: str
    type: int
    bytes: int

    @property
    def length(self) -> int:
        return self.bytes

    def __getitem__(self, item: str) -> Any:
        return getattr(self, item)

    def __str__(self) -> str:
        return f"{{name: {self.name}, type: {self.type}, bytes: {self.bytes}}}"


def taos_fields(table: pa.Table) -> list[TaosField]:
    """The columns of `table` as TaosFields."""
    return [_field(table.schema.field(i), table.column(i)) for i in range(table.num_columns)]


def _field(field: pa.Field, column: pa.ChunkedArray) -> TaosField:
    for arrow, code, size in FIELD_TYPES:
        if field.type == arrow:
            return TaosField(field.name, code, size)
    if pa.types.is_timestamp(field.type):
        return TaosField(field.name, TIMESTAMP, 8)
    code = VARBINARY if pa.types.is_binary(field.type) else VARCHAR
    longest = pc.max(pc.binary_length(column)).as_py() if len(column) else 0
    return TaosField(field.name, code, int(longest or 0))
