"""`sqltopic load FILE.csv --table db.tb`: stream a CSV file into a table.

The first line names the columns (case-insensitively, in any order; missing ones are
NULL). For a super table the file carries `tbname` (each row's child table) and may carry
tag columns, which create missing child tables; a child or normal table takes its data
columns only. `DESCRIBE` tells the types, and `csv_values` converts each batch of rows to
them, naming the line and column of a value that does not fit.

The file is read with Arrow's streaming CSV reader, one block at a time, and written
with `Connection.write` in batches of `--batch-rows` rows. Each batch is atomic: when one
fails, the batches before it stay loaded and nothing of it (or after it) is written; the
error says how many rows were loaded. Rows are one per line (no line breaks inside
quoted values), so line numbers are exact; an empty field or NULL is NULL, a quoted
empty field an empty string.
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

from sqltopic.cli.connect import ServerOptions, open_connection, options_parser, positive_int
from sqltopic.cli.csv_read import CsvFileError, CsvReader, batches, read_header, text_bytes
from sqltopic.cli.csv_values import Rows, Target, convert
from sqltopic.cli.format import counted
from sqltopic.cli.progress import Progress
from sqltopic.client.connection import Connection
from sqltopic.errors import Error, SqlError
from sqltopic.sql.types import ColumnType, Precision

# Rows per Connection.write: large enough to amortise the call, small enough that one
# batch (its Arrow form, the server's validation copy) stays a few MB.
DEFAULT_BATCH_ROWS = 10_000
TBNAME = "tbname"
# A child table's name has at most 192 bytes (TDengine's limit).
TBNAME_TYPE = ColumnType("VARCHAR", 192)
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "load",
        parents=[options_parser()],
        help="load a CSV file into a table",
        description="Load a CSV file into a table. The first line names the columns (any "
        "order, any case); for a super table give tbname and the tag columns too. Rows are "
        "written in atomic batches of --batch-rows: after an error, the batches before it "
        "stay loaded.",
    )
    parser.add_argument("file", type=Path, metavar="FILE.csv", help="CSV file, header first")
    parser.add_argument("--table", required=True, metavar="DB.TABLE", help="target table")
    parser.add_argument(
        "--batch-rows",
        type=positive_int,
        metavar="N",
        default=DEFAULT_BATCH_ROWS,
        help=f"rows per atomic write (default: {DEFAULT_BATCH_ROWS:,})",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    database, name = _table_name(args.table)
    path: Path = args.file
    header = read_header(path)
    with open_connection(ServerOptions.of(args)) as conn:
        info = describe(conn, database, name)
        targets = info.targets(header, str(path))
        began = time.perf_counter()
        loaded = load(conn, path, header, targets, info, args.batch_rows)
        elapsed = time.perf_counter() - began
    rate = f"{loaded / elapsed:,.0f}" if elapsed > 0 else "-"
    print(
        f"loaded {counted(loaded, 'row')} into {info.full_name} in {elapsed:.2f} s ({rate} rows/s)"
    )
    return 0


def _table_name(text: str) -> tuple[str, str]:
    database, _, name = text.partition(".")
    if not (_NAME_RE.fullmatch(database) and _NAME_RE.fullmatch(name)):
        raise Error(f"--table {text!r}: give the table as DATABASE.TABLE, e.g. power.meters")
    return database.lower(), name.lower()


@dataclass(frozen=True)
class TableInfo:
    """What loading needs to know of the target table."""

    database: str
    name: str
    precision: Precision
    is_stable: bool
    columns: list[Target]  # data columns, the primary timestamp first
    tags: list[Target]

    @property
    def full_name(self) -> str:
        return f"{self.database}.{self.name}"

    def targets(self, header: list[str], path: str) -> list[Target]:
        """The target of each CSV column, in file order; raises naming a bad header."""
        known = {t.name: t for t in self.columns}
        if self.is_stable:
            known |= {t.name: t for t in self.tags} | {TBNAME: Target(TBNAME, TBNAME_TYPE)}
        found: list[Target] = []
        for raw in header:
            target = known.get(raw.strip().lower())
            if target is None:
                raise CsvFileError(f"{path} line 1: {self._unknown(raw)}")
            if target in found:
                raise CsvFileError(f"{path} line 1: column {raw!r} appears twice")
            found.append(target)
        self._check_required(found, path)
        return found

    def _unknown(self, raw: str) -> str:
        if not self.is_stable and raw.strip().lower() in {t.name for t in self.tags}:
            return (
                f"{raw!r} is a tag of child table {self.full_name}; load through its super "
                "table (with a tbname column) to set tags"
            )
        names = [t.name for t in self.columns]
        if self.is_stable:
            names += [t.name for t in self.tags] + [TBNAME]
        return f"{raw!r} is not a column of {self.full_name} (it has {', '.join(names)})"

    def _check_required(self, found: list[Target], path: str) -> None:
        key = self.columns[0]
        if key not in found:
            raise CsvFileError(f"{path} line 1: the timestamp column {key.name} is missing")
        if self.is_stable and TBNAME not in {t.name for t in found}:
            raise CsvFileError(
                f"{path} line 1: loading into super table {self.full_name} needs a tbname "
                "column (each row's child table), and tag columns to create new ones"
            )


def describe(conn: Connection, database: str, name: str) -> TableInfo:
    """The table's columns, tags, kind and database precision, asked of the server."""
    try:
        fields = _records(conn, f"DESCRIBE {database}.{name}")
    except SqlError as exc:
        raise Error(f"--table {database}.{name}: {exc.message}") from None
    stables = {r["stable_name"] for r in _records(conn, f"SHOW {database}.STABLES")}
    dbs = {r["name"]: r for r in _records(conn, "SHOW DATABASES")}
    precision = cast(Precision, dbs[database]["precision"])
    columns: list[Target] = []
    tags: list[Target] = []
    for i, field in enumerate(fields):
        spelled = field["type"]
        if spelled in ("VARCHAR", "BINARY", "NCHAR"):
            spelled = f"{spelled}({field['length']})"
        target = Target(field["field"], ColumnType.parse(spelled), key=i == 0)
        (tags if field["note"] == "TAG" else columns).append(target)
    return TableInfo(database, name, precision, name in stables, columns, tags)


def _records(conn: Connection, sql: str) -> list[dict[str, Any]]:
    result = conn.execute(sql)
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def load(
    conn: Connection,
    path: Path,
    header: list[str],
    targets: list[Target],
    info: TableInfo,
    batch_rows: int,
) -> int:
    """Convert and write the file's rows batch by batch; the rows loaded."""
    loaded = 0
    size = path.stat().st_size
    done_bytes = len(",".join(header)) + 1
    with path.open("rb") as raw:
        progress = Progress(size)
        try:
            for batch in batches(CsvReader(raw, header, str(path)), batch_rows):
                rows = Rows(str(path), first_line=2 + loaded)
                data = convert(batch, targets, info.precision, rows)
                _write(conn, info, data, rows)
                loaded += batch.num_rows
                done_bytes += text_bytes(batch)
                progress.update(min(done_bytes, size), loaded, force=done_bytes >= size)
        except Error as exc:
            done = f"{counted(loaded, 'row')} before line {2 + loaded} loaded"
            if not loaded:
                done = "nothing was loaded"
            raise Error(f"{exc}; {done}") from None
        finally:
            progress.close()
    return loaded


def _write(conn: Connection, info: TableInfo, data: pa.Table, rows: Rows) -> None:
    try:
        conn.write(info.full_name, data)
    except Error as exc:
        first, last = rows.first_line, rows.first_line + data.num_rows - 1
        where = f"line {first}" if first == last else f"lines {first}..{last}"
        raise Error(f"{rows.path} {where}: {_message(exc)}") from None


def _message(exc: Error) -> str:
    """The error without a position: positions in SQL the user never wrote mislead."""
    return exc.message if isinstance(exc, SqlError) else str(exc)
