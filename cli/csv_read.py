"""Reading a CSV file for `sqltopic load`: its header, its rows as string columns in
bounded blocks, regrouped into batches of a fixed number of rows.

Arrow's streaming reader parses one block at a time, single-threaded so that it knows
the line number of a malformed row. Every column is read as text (`csv_values` converts
it); an empty field or one of `NULL_VALUES` is NULL, a quoted empty field the empty
string. Empty lines are rows (of NULLs), so the row index plus 2 is the line number.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from sqltopic.cli.format import counted
from sqltopic.errors import Error

# Bytes the CSV reader parses at a time: the memory a huge file needs stays bounded.
BLOCK_BYTES = 1 << 20
# Field texts read as NULL (an empty field is one unless quoted).
NULL_VALUES = ["", "NULL", "null", "Null"]


class CsvFileError(Error):
    """The CSV file cannot be read as the table's rows: the message names file and line."""


def read_header(path: Path) -> list[str]:
    """The column names on the first line."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            first = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CsvFileError(f"cannot read {path}: {exc}") from None
    if not first or not any(n.strip() for n in first):
        raise CsvFileError(f"{path} line 1: the first line must name the columns")
    return first


class CsvReader:
    """Arrow's streaming CSV reader over `raw`, every column as text, remembering the
    first malformed row (Arrow's own error does not always name its line)."""

    def __init__(self, raw: IO[bytes], header: list[str], path: str) -> None:
        self.raw = raw
        self.header = header
        self.path = path
        self.invalid: pa_csv.InvalidRow | None = None

    def _open(self) -> pa_csv.CSVStreamingReader:
        return pa_csv.open_csv(
            self.raw,
            read_options=pa_csv.ReadOptions(use_threads=False, block_size=BLOCK_BYTES),
            parse_options=pa_csv.ParseOptions(
                ignore_empty_lines=False, invalid_row_handler=self._invalid
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types=dict.fromkeys(self.header, pa.string()),
                strings_can_be_null=True,
                null_values=NULL_VALUES,
                quoted_strings_can_be_null=False,
            ),
        )

    def _invalid(self, row: pa_csv.InvalidRow) -> str:
        self.invalid = self.invalid or row
        return "error"

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._open()  # opening reads (and parses) the first block
        except pa.ArrowInvalid as exc:
            raise CsvFileError(self._message(exc)) from None

    def _message(self, exc: pa.ArrowInvalid) -> str:
        row = self.invalid
        if row is None:
            return f"{self.path}: {exc}"
        line = f" line {row.number}" if row.number is not None else ""
        return (
            f"{self.path}{line}: {counted(row.actual_columns, 'field')} where the header "
            f"has {row.expected_columns}: {row.text!r}"
        )


def batches(reader: CsvReader, size: int) -> Iterator[pa.Table]:
    """The rows regrouped into tables of exactly `size` rows (the last may be short)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in reader:
        rest = batch
        while rest.num_rows:
            take = min(size - count, rest.num_rows)
            pending.append(rest.slice(0, take))
            count += take
            rest = rest.slice(take)
            if count == size:
                yield pa.Table.from_batches(pending)
                pending, count = [], 0
    if count:
        yield pa.Table.from_batches(pending)


def text_bytes(batch: pa.Table) -> int:
    """About the bytes the rows took in the file (exact for unquoted fields, LF line
    ends and empty NULLs): the reader reads ahead, so its file position says less."""
    fields = sum(pc.sum(pc.binary_length(column)).as_py() or 0 for column in batch.columns)
    return int(fields) + int(batch.num_rows) * int(batch.num_columns)
