"""INSERT statements: their types and their parser, every TDengine form.

    INSERT INTO [db.]tb [USING [db.]stb [(tag, ...)] TAGS (value, ...)] [(col, ...)]
        VALUES (value, ...) [[,] (value, ...)] ...
        [[db.]tb2 [USING ...] [(col, ...)] VALUES (...) ...] ...

The statement head (table names, USING ... TAGS, column lists, VALUES) is read here by
a small cursor over the text; each VALUES list is handed to `sql/scan.py`, whose
whole-tuple regex does the bulk of the work. Identifiers are lower-cased (also inside
backticks, as everywhere in sqltopic). Syntax errors are `SqlSyntaxError`s with the line
and column in the whole text and a message saying what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqltopic.errors import SqlSyntaxError, UnsupportedStatement
from sqltopic.sql.scan import (
    ValueRows,
    found,
    line_col,
    scan_rows,
    scan_tuple,
    skip_space,
    syntax_error,
    token_value,
)
from sqltopic.sql.statements import Pos, Statement, TableRef, Value

# An identifier as TDengine takes it unquoted, or anything between backticks.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|`([^`]*)`")
# The words of the INSERT head; unquoted, they cannot be table or column names.
_KEYWORDS = frozenset({"INSERT", "INTO", "USING", "TAGS", "VALUES"})
# Other INSERT forms TDengine has, refused with a pointer to VALUES.
_UNSUPPORTED = {"SELECT": "INSERT ... SELECT", "FILE": "INSERT ... FILE"}


@dataclass(frozen=True, slots=True)
class InsertPart:
    """The rows for one table: `INSERT INTO table [USING ...] [(columns)] VALUES rows`.

    `pos` is where the table name starts. `using`, `tag_names` and `tag_values` come
    from `USING stable [(tag, ...)] TAGS (value, ...)` (auto-creating the table);
    `columns` is the column list, None when the tuples fill every column in order.
    """

    table: TableRef
    pos: Pos
    using: TableRef | None
    tag_names: tuple[str, ...] | None
    tag_values: tuple[Value, ...]
    columns: tuple[str, ...] | None
    rows: ValueRows


@dataclass(frozen=True, slots=True, kw_only=True)
class Insert(Statement):
    """One INSERT: one part per table written, in the order written."""

    parts: tuple[InsertPart, ...]


def parse_insert(sql: str, pos: Pos) -> Insert:
    """Parse one INSERT statement; `pos` is where `sql` starts in the whole text."""
    cursor = _Cursor(sql, pos)
    cursor.expect("INSERT", "at the start of the statement")
    cursor.expect("INTO", "after INSERT")
    parts = [cursor.part("a table name after INSERT INTO", None)]
    while not cursor.at_end():
        after = f"a table name or the end of the statement after the rows of {parts[-1].table}"
        parts.append(cursor.part(after, parts[-1].rows.width))
    return Insert(sql=sql, pos=pos, parts=tuple(parts))


class _Cursor:
    """A position in the statement and the head grammar read from there."""

    def __init__(self, sql: str, pos: Pos) -> None:
        self.sql = sql
        self.pos = pos
        self.i = 0
        # Newlines counted up to `_seen`, and where the line holding `_seen` starts.
        self._seen = self._lines = self._line_start = 0

    def position(self, offset: int) -> Pos:
        """`offset` as a line and column of the whole text. Counts newlines only since the
        offset asked before (offsets grow), so the positions of a long INSERT stay linear."""
        if offset < self._seen:
            self._seen = self._lines = self._line_start = 0
        newline = self.sql.rfind("\n", self._seen, offset)
        if newline >= 0:
            self._lines += self.sql.count("\n", self._seen, offset)
            self._line_start = newline + 1
        self._seen = offset
        if self._lines == 0:
            return Pos(self.pos.line, self.pos.column + offset)
        return Pos(self.pos.line + self._lines, offset - self._line_start + 1)

    # tokens -------------------------------------------------------------------------

    def error(self, message: str, offset: int | None = None) -> SqlSyntaxError:
        return syntax_error(message, self.sql, self.i if offset is None else offset, self.pos)

    def got(self) -> str:
        return found(self.sql, self.i)

    def skip(self) -> int:
        """Move past whitespace and comments; the new offset."""
        self.i = skip_space(self.sql, self.i)
        return self.i

    def at_end(self) -> bool:
        """Nothing but whitespace, comments and one `;` left."""
        if self.skip() < len(self.sql) and self.sql[self.i] == ";":
            return skip_space(self.sql, self.i + 1) == len(self.sql)
        return self.i == len(self.sql)

    def peek(self, char: str) -> bool:
        return self.sql.startswith(char, self.skip())

    def word(self) -> str | None:
        """The unquoted word at the cursor, upper-cased, without moving."""
        m = _NAME_RE.match(self.sql, self.skip())
        return m.group().upper() if m and m.group(1) is None else None

    def keyword(self, word: str) -> bool:
        """Move past `word` if it is next."""
        if self.word() != word:
            return False
        self.i += len(word)
        return True

    def expect(self, word: str, where: str) -> None:
        if not self.keyword(word):
            raise self.error(f"expected {word} {where}, got {self.got()}")

    # grammar ----------------------------------------------------------------------------

    def name(self, what: str) -> str:
        m = _NAME_RE.match(self.sql, self.skip())
        if m is None or (m.group(1) is None and m.group().upper() in _KEYWORDS):
            raise self.error(f"expected {what}, got {self.got()}")
        if m.group(1) == "":
            raise self.error(f"expected {what}, got an empty quoted name")
        self.i = m.end()
        return (m.group(1) if m.group(1) is not None else m.group()).lower()

    def table(self, what: str) -> TableRef:
        first = self.name(what)
        if not self.sql.startswith(".", self.i):  # no space around the dot
            return TableRef(None, first)
        self.i += 1
        return TableRef(first, self.name(f"{what} after {first}."))

    def names(self, what: str) -> tuple[str, ...]:
        """`(name, ...)` at the cursor; a name may appear once."""
        self.i += 1  # the "(" seen by peek
        names: list[str] = []
        while True:
            start = self.skip()
            name = self.name(f"a {what} name")
            if name in names:
                raise self.error(f"{what} {name} appears twice in the {what} list", start)
            names.append(name)
            if not self.peek(","):
                break
            self.i += 1
        if not self.peek(")"):
            raise self.error(f"expected , or ) in the {what} list, got {self.got()}")
        self.i += 1
        return tuple(names)

    def using(self) -> tuple[TableRef, tuple[str, ...] | None, tuple[Value, ...]]:
        """`stable [(tag, ...)] TAGS (value, ...)` after USING."""
        stable = self.table("a super table name after USING")
        names = self.names("tag") if self.peek("(") else None
        self.expect("TAGS", f"after USING {stable}")
        start = self.skip()
        scanned = scan_tuple(self.sql, start, self.pos, "the TAGS list")
        self.i = scanned.end
        if names is not None and len(names) != len(scanned.tokens):
            raise self.error(
                f"TAGS has {_count(len(scanned.tokens), 'value')} but "
                f"{_count(len(names), 'tag')} are named",
                start,
            )
        values = tuple(
            token_value(token, self.position(offset))
            for token, offset in zip(scanned.tokens, scanned.offsets, strict=True)
        )
        return stable, names, values

    def part(self, what: str, width: int | None) -> InsertPart:
        """One table's part. `what` describes the table name expected, for messages;
        `width` is the previous part's tuple width, a hint for the scan."""
        where = self.position(self.skip())
        table = self.table(what)
        using, tag_names, tag_values = self.using() if self.keyword("USING") else (None, None, ())
        columns = self.names("column") if self.peek("(") else None
        self.values(table)
        rows = scan_rows(self.sql, self.i, self.pos, len(columns) if columns else width)
        if columns is not None and rows.width != len(columns):
            raise self.error(
                f"row 1 has {_count(rows.width, 'value')} but the column list names "
                f"{_count(len(columns), 'column')}",
                rows.start,
            )
        self.i = rows.end
        return InsertPart(table, where, using, tag_names, tag_values, columns, rows)

    def values(self, table: TableRef) -> None:
        """Move past VALUES, or say what was expected instead."""
        word = self.word()
        if word in _UNSUPPORTED:
            line, column = line_col(self.sql, self.i, self.pos)
            raise UnsupportedStatement(
                f"{_UNSUPPORTED[word]} is not supported; write the rows with VALUES",
                sql=self.sql,
                line=line,
                column=column,
            )
        if not self.keyword("VALUES"):
            raise self.error(
                f"expected VALUES (or USING, or a column list) after table {table}, "
                f"got {self.got()}"
            )


def _count(n: int, noun: str) -> str:
    return f"1 {noun}" if n == 1 else f"{n} {noun}s"
