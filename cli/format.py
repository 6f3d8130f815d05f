"""How the command line prints rows: aligned tables, JSON lines and CSV.

`sqltopic sql` and `sqltopic consume` share these writers. Each takes Arrow tables and
writes them to a text stream; the conversion of Arrow values to text lives here only:

* table: a header, a rule and the rows, numbers right-aligned, NULL as `NULL`,
  timestamps as `2018-10-03 06:38:05.000` (UTC, in the column's precision).
* jsonl: one JSON object per row; timestamps as ISO 8601 UTC strings
  (`2018-10-03T06:38:05.000Z`); NaN and infinities, which JSON cannot hold, as null.
* csv: a header whenever the columns change (once for a topic), then the rows; NULL as
  an empty field, timestamps as in jsonl.
"""

from __future__ import annotations

import csv
import json
import math
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TextIO

import pyarrow as pa

Format = Literal["table", "jsonl", "csv"]
FORMATS: tuple[Format, ...] = ("table", "jsonl", "csv")
NULL_TEXT = "NULL"
# What a table cell shows instead of characters that would break its line.
_CELL_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def counted(count: int, noun: str) -> str:
    """`1 row`, `2 rows`, `1,000 rows`."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


class RowWriter(Protocol):
    def write(self, table: pa.Table) -> None:
        """Write the rows of `table` (nothing for a table without columns)."""


def writer(fmt: Format, out: TextIO) -> RowWriter:
    """The writer of `fmt` on `out`."""
    if fmt == "jsonl":
        return JsonLinesWriter(out)
    if fmt == "csv":
        return CsvWriter(out)
    return TableWriter(out)


# --- aligned tables ------------------------------------------------------------------


class TableWriter:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, table: pa.Table) -> None:
        if table.num_columns:
            self.out.write("".join(line + "\n" for line in table_lines(table)))


def table_lines(table: pa.Table) -> list[str]:
    """`table` as aligned text lines: header, rule, one line per row."""
    names = [str(n).translate(_CELL_ESCAPES) for n in table.column_names]
    columns = [[c.translate(_CELL_ESCAPES) for c in text_cells(col)] for col in table.columns]
    right = [_is_number(col.type) for col in table.columns]
    widths = [
        max([_width(name), *(_width(cell) for cell in cells)])
        for name, cells in zip(names, columns, strict=True)
    ]
    lines = [_line(names, widths, [False] * len(names)), "-+-".join("-" * w for w in widths)]
    lines += [_line(row, widths, right) for row in zip(*columns, strict=True)]
    return [line.rstrip() for line in lines]


def _line(cells: Sequence[str], widths: Sequence[int], right: Sequence[bool]) -> str:
    padded = []
    for cell, width, align_right in zip(cells, widths, right, strict=True):
        pad = " " * (width - _width(cell))
        padded.append(pad + cell if align_right else cell + pad)
    return " | ".join(padded)


def _width(text: str) -> int:
    """Columns a terminal gives `text`: wide (CJK) characters take two."""
    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def text_cells(column: pa.ChunkedArray | pa.Array, null: str = NULL_TEXT) -> list[str]:
    """Each value as text: Arrow's own casts (shortest float forms, timestamps in their
    precision), `null` for NULL."""
    values = _as_text(column)
    return [null if v is None else v for v in values]


def _as_text(column: pa.ChunkedArray | pa.Array) -> list[str | None]:
    t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return [None if v is None else v.decode("utf-8", "replace") for v in column.to_pylist()]
    try:
        texts: list[str | None] = column.cast(pa.string()).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return [None if v is None else str(v) for v in column.to_pylist()]
    return texts


# --- JSON lines ------------------------------------------------------------------------


class JsonLinesWriter:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, table: pa.Table) -> None:
        names = table.column_names
        columns = [json_values(col) for col in table.columns]
        for row in zip(*columns, strict=True):
            record = dict(zip(names, row, strict=True))
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")


def json_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Each value as JSON can hold it."""
    t = column.type
    if pa.types.is_timestamp(t):
        return iso_timestamps(column)
    if pa.types.is_floating(t):
        # via text: a FLOAT 10.3 stays 10.3 rather than 10.300000190734863
        return [None if v is None else _finite(float(v)) for v in _as_text(column)]
    if pa.types.is_decimal(t):
        return [None if v is None else _decimal(v) for v in _as_text(column)]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _as_text(column)
    values: list[Any] = column.to_pylist()
    return [v if v is None or isinstance(v, (bool, int, str)) else str(v) for v in values]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _decimal(text: str) -> int | float:
    return int(text) if text.lstrip("-").isdigit() else float(text)


def iso_timestamps(column: pa.ChunkedArray | pa.Array) -> list[str | None]:
    """ISO 8601 UTC texts, `2018-10-03T06:38:05.000Z`, in the column's precision."""
    out: list[str | None] = []
    for text in _as_text(column):
        if text is None:
            out.append(None)
            continue
        iso = text.replace(" ", "T", 1)
        out.append(iso if iso.endswith("Z") else iso + "Z")
    return out


# --- CSV -------------------------------------------------------------------------------


class CsvWriter:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._csv = csv.writer(out, lineterminator="\n")
        self._header: list[str] | None = None

    def write(self, table: pa.Table) -> None:
        if not table.num_columns:
            return
        if table.column_names != self._header:
            self._header = list(table.column_names)
            self._csv.writerow(self._header)
        columns = [_csv_cells(col) for col in table.columns]
        self._csv.writerows(zip(*columns, strict=True))


def _csv_cells(column: pa.ChunkedArray) -> list[str]:
    if pa.types.is_timestamp(column.type):
        return ["" if v is None else v for v in iso_timestamps(column)]
    return text_cells(column, null="")
