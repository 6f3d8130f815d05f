"""TDengine column types and their Arrow and DuckDB forms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from sqltopic.errors import SqlError

Precision = Literal["ms", "us", "ns"]
PRECISIONS: tuple[Precision, ...] = ("ms", "us", "ns")

TypeName = Literal[
    "TIMESTAMP", "BOOL",
    "TINYINT", "SMALLINT", "INT", "BIGINT",
    "TINYINT UNSIGNED", "SMALLINT UNSIGNED", "INT UNSIGNED", "BIGINT UNSIGNED",
    "FLOAT", "DOUBLE", "VARCHAR", "NCHAR",
]  # fmt: skip

# TDengine's limits: a BINARY/VARCHAR/NCHAR column holds at most 16 KB (65,517 for
# VARCHAR in 3.x, but NCHAR counts 4-byte characters), a tag at most 16,382 bytes.
MAX_STRING_LENGTH = 65_517

_ARROW: dict[str, pa.DataType] = {
    "BOOL": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "TINYINT UNSIGNED": pa.uint8(),
    "SMALLINT UNSIGNED": pa.uint16(),
    "INT UNSIGNED": pa.uint32(),
    "BIGINT UNSIGNED": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "NCHAR": pa.string(),
}

_DUCKDB: dict[str, str] = {
    "TIMESTAMP": "TIMESTAMP",
    "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INTEGER",
    "BIGINT": "BIGINT",
    "TINYINT UNSIGNED": "UTINYINT",
    "SMALLINT UNSIGNED": "USMALLINT",
    "INT UNSIGNED": "UINTEGER",
    "BIGINT UNSIGNED": "UBIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "VARCHAR",
    "NCHAR": "VARCHAR",
}

# Spellings users write, mapped to the canonical name (TDengine accepts all of these).
ALIASES: dict[str, TypeName] = {
    "TIMESTAMP": "TIMESTAMP",
    "BOOL": "BOOL",
    "BOOLEAN": "BOOL",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "BINARY": "VARCHAR",
    "VARCHAR": "VARCHAR",
    "NCHAR": "NCHAR",
}

INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "TINYINT UNSIGNED": (0, 2**8 - 1),
    "SMALLINT UNSIGNED": (0, 2**16 - 1),
    "INT UNSIGNED": (0, 2**32 - 1),
    "BIGINT UNSIGNED": (0, 2**64 - 1),
}


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A column's type; `length` is set for VARCHAR (bytes) and NCHAR (characters)."""

    name: TypeName
    length: int | None = None

    def __post_init__(self) -> None:
        if self.name in ("VARCHAR", "NCHAR"):
            if self.length is None or not 1 <= self.length <= MAX_STRING_LENGTH:
                raise SqlError(
                    f"{self.name} needs a length in 1..{MAX_STRING_LENGTH}, "
                    f"e.g. {self.name}(64); got {self.length}"
                )
        elif self.length is not None:
            raise SqlError(f"{self.name} takes no length")

    def arrow(self, precision: Precision) -> pa.DataType:
        if self.name == "TIMESTAMP":
            return pa.timestamp(precision)
        return _ARROW[self.name]

    def duckdb(self, precision: Precision) -> str:
        if self.name == "TIMESTAMP":
            return {"ms": "TIMESTAMP_MS", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}[precision]
        return _DUCKDB[self.name]

    def sql(self) -> str:
        """The TDengine spelling, as DESCRIBE shows it."""
        return f"{self.name}({self.length})" if self.length is not None else self.name

    @property
    def is_integer(self) -> bool:
        return self.name in INTEGER_RANGES

    @property
    def is_string(self) -> bool:
        return self.name in ("VARCHAR", "NCHAR")

    @property
    def is_float(self) -> bool:
        return self.name in ("FLOAT", "DOUBLE")

    def to_json(self) -> str:
        return self.sql()

    @classmethod
    def parse(cls, text: str) -> ColumnType:
        """`INT`, `VARCHAR(64)`, `BINARY(16)`, `INT UNSIGNED`, ... (case-insensitive)."""
        spec = " ".join(text.upper().split())
        length: int | None = None
        if spec.endswith(")") and "(" in spec:
            spec, _, rest = spec.partition("(")
            spec = spec.strip()
            try:
                length = int(rest[:-1])
            except ValueError:
                raise SqlError(f"bad type length in {text!r}") from None
        unsigned = spec.endswith(" UNSIGNED")
        base = spec.removesuffix(" UNSIGNED").strip()
        name = ALIASES.get(base)
        if name is None or (unsigned and name not in ("TINYINT", "SMALLINT", "INT", "BIGINT")):
            raise SqlError(f"unknown type {text!r}; use one of {', '.join(sorted(ALIASES))}")
        full: TypeName = f"{name} UNSIGNED" if unsigned else name  # type: ignore[assignment]
        return cls(full, length)
