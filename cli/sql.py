"""`sqltopic sql`: run SQL on a server and print each statement's result.

Statements are cut on the client (`statements`) and sent one at a time, so every
result is printed, and an error names the statement's line and column in the whole
input. With `-e` or `-f` (or statements piped to stdin) the first error stops the run
with exit code 1; the statements before it stay done. On a terminal without `-e`/`-f`
it is an interactive shell (`repl`), where an error is printed and the shell goes on.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sqltopic.cli.connect import ServerOptions, open_connection, options_parser
from sqltopic.cli.format import FORMATS, Format, RowWriter, writer
from sqltopic.cli.statements import Statement, advance, split, statements
from sqltopic.client.connection import Connection, Result
from sqltopic.errors import Error, SqlError

QUIT_WORDS = ("quit", "exit")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "sql",
        parents=[options_parser()],
        help="run SQL: -e, -f, piped statements, or an interactive shell",
        description="Run SQL statements and print their results. Without -e or -f: an "
        "interactive shell on a terminal, else the statements read from stdin.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("-e", "--execute", metavar="SQL", help="statements to run")
    source.add_argument("-f", "--file", type=Path, help="file of statements to run")
    parser.add_argument("--database", help="database to USE first")
    parser.add_argument(
        "--format", choices=FORMATS, default="table", help="how to print rows (default: table)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_connection(ServerOptions.of(args), args.database) as conn:
        shell = Shell(conn, args.format, sys.stdout)
        if args.execute is not None:
            shell.run_all(statements(args.execute), source=None)
        elif args.file is not None:
            shell.run_all(statements(_read(args.file)), source=str(args.file))
        elif sys.stdin.isatty():
            from sqltopic.cli.repl import interact  # noqa: PLC0415 (readline: terminals only)

            interact(shell)
        else:
            shell.run_stream(sys.stdin, source="stdin")
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Error(f"cannot read SQL file {path}: {exc}") from None


@dataclass
class Shell:
    """Runs statements on `conn` and prints their results on `out`."""

    conn: Connection
    fmt: Format
    out: TextIO

    def __post_init__(self) -> None:
        self.rows: RowWriter = writer(self.fmt, self.out)

    def run(self, stmt: Statement) -> None:
        """Run one statement and print its result; its error is raised as is."""
        began = time.perf_counter()
        result = self.conn.execute(stmt.text)
        self.show(result, time.perf_counter() - began)

    def show(self, result: Result, elapsed: float) -> None:
        self.rows.write(result.table)
        if self.fmt == "table":
            self.out.write(footer(result, elapsed) + "\n")
        self.out.flush()

    def run_all(self, stmts: list[Statement], source: str | None) -> None:
        """Run statements in order; the first error stops, naming where it is."""
        for stmt in stmts:
            try:
                self.run(stmt)
            except Error as exc:
                raise Error(located(exc, stmt, source)) from None

    def run_stream(self, lines: TextIO, source: str) -> None:
        """Run statements as their `;` arrives on `lines` (a pipe: each runs without
        waiting for the end of the input); at the end, the last one even without `;`."""
        pending, line, column = "", 1, 1
        for text in lines:
            if is_quit(pending, text):
                return
            pending += text
            cut = split(pending, line, column)
            self.run_all(cut.statements, source)
            line, column = advance(pending[: cut.consumed], line, column)
            pending = pending[cut.consumed :]
        self.run_all(statements(pending, line, column), source)


def is_quit(pending: str, line: str) -> bool:
    """`quit` or `exit` (`;` optional) on a line of its own, outside a statement."""
    return not pending.strip() and line.strip().rstrip(";").strip().lower() in QUIT_WORDS


def footer(result: Result, elapsed: float) -> str:
    """The taos shell's summary line."""
    if result.table.num_columns:
        return f"Query OK, {result.table.num_rows} row(s) in set ({elapsed:.3f}s)"
    return f"Query OK, {result.affected_rows} row(s) affected ({elapsed:.3f}s)"


def located(exc: Error, stmt: Statement, source: str | None) -> str:
    """The error's message with its place in the whole input: `FILE, line L, column C`."""
    prefix = f"{source}, " if source else ""
    if isinstance(exc, SqlError):
        where = stmt.where(exc)
        if where is not None:
            return f"{prefix}line {where[0]}, column {where[1]}: {exc.message}"
        return f"{prefix}line {stmt.line}: {exc.message}"
    return f"{prefix}line {stmt.line}: {exc}" if source else str(exc)
