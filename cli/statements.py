"""Cutting SQL text into statements on the client, so that `sqltopic sql` can print the
result of every statement (the server's Execute answers with the last one only).

A `;` ends a statement unless it is inside a string (`'...'` or `"..."`, where a
backslash escapes the next character and a doubled quote is two strings side by side,
which cuts the same way), a backtick identifier, a `--` comment (to the end of the line)
or a `/* ... */` comment. Statements keep their comments; a piece with nothing but
blanks and comments is no statement. Each statement records where it starts, so a
server error's line and column (counted in the statement) can be given in the whole text.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqltopic.errors import SqlError


@dataclass(frozen=True)
class Statement:
    """One statement, without its `;`; `line` and `column` (1-based) are where it
    starts in the text it was cut from."""

    text: str
    line: int
    column: int

    def where(self, err: SqlError) -> tuple[int, int] | None:
        """The line and column in the whole text of a position in this statement."""
        if err.line is None:
            return None
        column = err.column or 1
        if err.line == 1:
            column += self.column - 1
        return self.line + err.line - 1, column


@dataclass(frozen=True)
class Split:
    """The complete statements at the start of a text. `consumed` is the offset just
    after the last `;`; the text after it is an unfinished statement when `pending`."""

    statements: list[Statement]
    consumed: int
    pending: bool


def split(text: str, line: int = 1, column: int = 1) -> Split:
    """The statements that a `;` ends in `text` (which starts at `line`, `column` of a
    larger text), and where the unfinished rest begins."""
    pieces = _Cutter(text).run()
    found = [_statement(text, start, end, line, column) for start, end, code in pieces[:-1] if code]
    start, _, pending = pieces[-1]
    return Split(found, start, pending)


def statements(text: str, line: int = 1, column: int = 1) -> list[Statement]:
    """Every statement of `text`, the last one also when no `;` ends it."""
    pieces = _Cutter(text).run()
    return [_statement(text, start, end, line, column) for start, end, code in pieces if code]


def advance(text: str, line: int, column: int) -> tuple[int, int]:
    """The line and column just after `text`, which starts at `line`, `column`."""
    newlines = text.count("\n")
    if newlines:
        return line + newlines, len(text) - text.rfind("\n")
    return line, column + len(text)


def _statement(text: str, start: int, end: int, line: int, column: int) -> Statement:
    piece = text[start:end]
    begin = start + len(piece) - len(piece.lstrip())
    at_line, at_column = advance(text[:begin], line, column)
    return Statement(piece.strip(), at_line, at_column)


class _Cutter:
    """One pass over the text; `run` gives (start, end, has_code) per piece, the last
    piece being the text after the final `;`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def run(self) -> list[tuple[int, int, bool]]:
        text, pieces = self.text, []
        start, has_code = 0, False
        while self.i < len(text):
            ch = text[self.i]
            if ch == ";":
                pieces.append((start, self.i, has_code))
                self.i += 1
                start, has_code = self.i, False
            elif text.startswith("--", self.i):
                self._skip_to("\n", len("\n"))
            elif text.startswith("/*", self.i):
                self.i += 2
                self._skip_to("*/", len("*/"))
            elif ch in "'\"":
                self._skip_quoted(ch)
                has_code = True
            elif ch == "`":
                self.i += 1
                self._skip_to("`", 1)
                has_code = True
            else:
                has_code = has_code or not ch.isspace()
                self.i += 1
        pieces.append((start, len(text), has_code))
        return pieces

    def _skip_to(self, end: str, past: int) -> None:
        """Move past the next `end`, or to the end of the text when there is none."""
        found = self.text.find(end, self.i)
        self.i = len(self.text) if found < 0 else found + past

    def _skip_quoted(self, quote: str) -> None:
        text, i = self.text, self.i + 1
        while i < len(text) and text[i] != quote:
            i += 2 if text[i] == "\\" else 1
        self.i = min(i + 1, len(text))
