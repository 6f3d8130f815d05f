"""The VALUES tuples of an INSERT as written: their grammar and their fast scan into raw tokens.

This module owns what a single value may look like in TDengine's INSERT (numbers,
quoted strings, NULL, booleans, `NOW`/`TODAY()` and `± n unit` time arithmetic), the scan
of a list of tuples into `ValueRows` (raw tokens stored column by column), positions and
syntax errors in the text, and reading one token: its kind (`classify`), a string's text
(`unquote`) and a tag value (`token_value`). `sql/insert.py` parses the statement around
the tuples; `sql/values.py` converts the tokens to Python and Arrow.

Speed: one compiled regex matches a whole tuple of the width seen in the first tuple
(up to 64 values; wider tuples take two regexes each), so a VALUES list is consumed by
the `re` engine, in C, one match per row; anything that regex refuses (comments, a
different width, a syntax error) is handed to a token-by-token scanner that either
accepts the tuple or reports where it goes wrong.

Strings: '...' or "...", the quote doubled or backslash-escaped; `\\n`, `\\r`, `\\t` are
control characters, `\\%`, `\\_` and `\\x` keep their backslash, any other escaped
character stands for itself.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from sqltopic.errors import SqlSyntaxError
from sqltopic.sql.statements import Pos, Value, ValueKind

# --- the grammar of one value ------------------------------------------------------------

# Possessive quantifiers and atomic groups throughout: a value never needs backtracking,
# and `re` runs faster when it saves no backtracking points.
_NUMBER = (
    r"[-+]?+(?:0[xX][0-9a-fA-F]++|0[bB][01]++|(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+)"
)
# Quoted strings as TDengine's tokenizer reads them: a doubled quote or a backslash
# escape does not end the string.
_SQ_STRING = r"'[^'\\]*+(?:(?:\\.|'')[^'\\]*+)*+'"
_DQ_STRING = r'"[^"\\]*+(?:(?:\\.|"")[^"\\]*+)*+"'
_WORD = r"(?i:null|true|false)(?!\w)"
_NOW = r"(?i:now|today)(?!\w)(?:\s*+\(\s*+\))?+"
_ATOM = rf"(?>{_NUMBER}|{_SQ_STRING}|{_DQ_STRING}|{_WORD}|{_NOW})"
# `± n unit` after a timestamp: `NOW + 1s`, `'2018-10-03' - 1d`, `1538548685000+10a`.
_DURATION = r"(?:\s*+[-+]\s*+\d++[a-zA-Z](?!\w))?+"
VALUE = _ATOM + _DURATION

_VALUE_RE = re.compile(VALUE, re.S)
# A number, NOW/TODAY(), and a time expression `base [± n unit]` (public: the conversion
# in `sql/values.py` reads tokens with them too).
NUMBER_RE = re.compile(_NUMBER)
NOW_RE = re.compile(_NOW)
EXPRESSION_RE = re.compile(
    rf"(?P<base>{_ATOM})(?:\s*(?P<sign>[-+])\s*(?P<amount>\d+)(?P<unit>[a-zA-Z]))?", re.S
)
# Whitespace and comments, and the same with at most one comma: what may separate tuples.
_SPACE = r"(?:\s++|--[^\n]*+|/\*.*?\*/)*+"
_SPACE_RE = re.compile(_SPACE, re.S)
_GAP_RE = re.compile(rf"{_SPACE},?+{_SPACE}", re.S)
# One token, roughly: a word or number, a quoted string, or one other character.
_TOKEN_RE = re.compile(r"[\w$.]+|'[^'\n]*'?|\"[^\"\n]*\"?|\S")
# Characters of a token shown in a message at most.
_SHOWN_CHARS = 30
_ESCAPE_SQ = re.compile(r"\\(.)|''", re.S)
_ESCAPE_DQ = re.compile(r'\\(.)|""', re.S)
# Escapes that stand for a control character; `\%`, `\_` (LIKE) and `\x` keep the
# backslash, as in TDengine 3's `trimString`.
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "%": "\\%", "_": "\\_", "x": "\\x"}

# Compiled whole-tuple patterns kept, one per tuple width seen.
_ROW_PATTERNS_KEPT = 64
# The widest tuple given its own pattern: compiling takes ~0.4 ms per value (27 ms at 64,
# 3 s at 4,096), so wider tuples take the two-regex path of `_take_wide`.
_PATTERN_WIDTH_MAX = 64
# Any one tuple; a value inside it cannot start with a separator, so `_VALUE_RE.findall`
# over its span finds exactly its values.
_TUPLE_RE = re.compile(rf"\(\s*+{VALUE}(?:\s*+,\s*+{VALUE})*+\s*+\)", re.S)


@functools.lru_cache(maxsize=_ROW_PATTERNS_KEPT)
def _row_pattern(width: int) -> re.Pattern[str]:
    """One tuple of `width` values, after an optional comma: a group per value."""
    values = r"\s*+,\s*+".join([f"({VALUE})"] * width)
    return re.compile(rf"\s*+,?+\s*+\(\s*+{values}\s*+\)", re.S)


# --- positions and syntax errors ---------------------------------------------------------


def line_col(sql: str, offset: int, base: Pos) -> tuple[int, int]:
    """1-based line and column in the whole text of `offset` in `sql`, which starts at `base`."""
    newlines = sql.count("\n", 0, offset)
    if newlines == 0:
        return base.line, base.column + offset
    return base.line + newlines, offset - sql.rfind("\n", 0, offset)


def syntax_error(message: str, sql: str, offset: int, base: Pos) -> SqlSyntaxError:
    line, column = line_col(sql, offset, base)
    return SqlSyntaxError(message, sql=sql, line=line, column=column)


def found(sql: str, offset: int) -> str:
    """The token at `offset`, quoted, for "expected X, got Y" messages."""
    m = _TOKEN_RE.match(sql, offset)
    if m is None:
        return "the end of the statement"
    return repr(m.group()[:_SHOWN_CHARS])


def skip_space(sql: str, offset: int) -> int:
    """The offset after any whitespace and comments at `offset`."""
    return _SPACE_RE.match(sql, offset).end()  # type: ignore[union-attr]  # always matches


# --- scanning tuples ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScannedTuple:
    """One tuple as written: its raw tokens, where each starts, and where it ends."""

    tokens: tuple[str, ...]
    offsets: tuple[int, ...]
    end: int


def scan_tuple(sql: str, offset: int, base: Pos, what: str) -> ScannedTuple:
    """The tuple `( value, ... )` at `offset` (at its `(`), token by token.

    `what` names the tuple in messages ("row 3", "the TAGS list").
    """
    if not sql.startswith("(", offset):
        raise syntax_error(
            f"expected ( to open {what}, got {found(sql, offset)}", sql, offset, base
        )
    tokens: list[str] = []
    offsets: list[int] = []
    i = offset + 1
    while True:
        i = skip_space(sql, i)
        m = _VALUE_RE.match(sql, i)
        if m is None:
            raise _bad_value(sql, i, base, what, len(tokens))
        tokens.append(m.group())
        offsets.append(i)
        i = skip_space(sql, m.end())
        if sql.startswith(")", i):
            return ScannedTuple(tuple(tokens), tuple(offsets), i + 1)
        if not sql.startswith(",", i):
            raise syntax_error(
                f"expected , or ) after value {len(tokens)} of {what}, got {found(sql, i)}",
                sql,
                i,
                base,
            )
        i += 1


def _bad_value(sql: str, offset: int, base: Pos, what: str, done: int) -> SqlSyntaxError:
    if sql.startswith(("'", '"'), offset):
        return syntax_error(f"unterminated string in {what}", sql, offset, base)
    return syntax_error(
        f"expected value {done + 1} of {what} (a number, a quoted string, NULL, true, false "
        f"or NOW), got {found(sql, offset)}",
        sql,
        offset,
        base,
    )


@dataclass(frozen=True, slots=True)
class ValueRows:
    """The tuples of one VALUES list, stored column by column as the raw tokens written.

    `columns[c][r]` is value `c` of row `r` (0-based), e.g. `'2018-10-03 14:38:05.000'`
    with its quotes, `10.3`, `NULL`, `NOW + 1s`. `sql`, `start` (the offset of the first
    `(` in `sql`) and `pos` (where `sql` starts in the whole text) let `where` find a
    value's line and column again when a conversion fails: positions cost nothing until
    then. `end` is where the list ends in `sql`.
    """

    columns: tuple[tuple[str, ...], ...]
    sql: str = field(repr=False, compare=False)
    start: int = field(compare=False)
    end: int = field(compare=False)  # the offset just after the last tuple
    pos: Pos = field(compare=False)

    @property
    def width(self) -> int:
        """Values per tuple."""
        return len(self.columns)

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def row(self, index: int) -> tuple[str, ...]:
        """The raw tokens of row `index` (0-based)."""
        return tuple(column[index] for column in self.columns)

    def where(self, row: int, column: int) -> tuple[int, int]:
        """Line and column in the whole text of value `column` of row `row` (0-based).

        Re-scans the tuples up to that row: for error messages only.
        """
        scanned = scan_tuple(self.sql, self.start, self.pos, "row 1")
        for r in range(1, row + 1):
            i = _GAP_RE.match(self.sql, scanned.end).end()  # type: ignore[union-attr]
            scanned = scan_tuple(self.sql, i, self.pos, f"row {r + 1}")
        return line_col(self.sql, scanned.offsets[column], self.pos)


def scan_rows(sql: str, offset: int, base: Pos, width: int | None = None) -> ValueRows:
    """The tuples of the VALUES list whose first `(` is at `offset` (after whitespace).

    Every tuple must have as many values as the first. `width`, when given (the length of
    a column list, or the width of the previous table's tuples), lets the fast pattern
    take the first tuple too. The list ends before the first thing that is not a tuple.
    """
    start = skip_space(sql, offset)
    rows: list[tuple[str, ...]] = []
    first = None
    if width and width <= _PATTERN_WIDTH_MAX and sql.startswith("(", start):
        first = _row_pattern(width).match(sql, start)
    if first is not None:
        rows.append(first.groups())
        i = first.end()
    else:
        scanned = scan_tuple(sql, start, base, "row 1")
        rows.append(scanned.tokens)
        i = scanned.end
    end = _scan_rest(sql, i, base, rows)
    return ValueRows(tuple(zip(*rows, strict=True)), sql, start, end, base)


def _scan_rest(sql: str, i: int, base: Pos, rows: list[tuple[str, ...]]) -> int:
    """Append the tuples after the first: regex runs, token scans in between.

    Returns the offset after the last tuple.
    """
    width = len(rows[0])
    take = _take_narrow if width <= _PATTERN_WIDTH_MAX else _take_wide
    while True:
        i = take(sql, i, width, rows)
        after = _GAP_RE.match(sql, i).end()  # type: ignore[union-attr]  # always matches
        if not sql.startswith("(", after):
            return i
        what = f"row {len(rows) + 1}"
        scanned = scan_tuple(sql, after, base, what)
        if len(scanned.tokens) != width:
            raise syntax_error(
                f"{what} has {values_phrase(len(scanned.tokens))} "
                f"but row 1 has {values_phrase(width)}",
                sql,
                after,
                base,
            )
        rows.append(scanned.tokens)
        i = scanned.end


def _take_narrow(sql: str, i: int, width: int, rows: list[tuple[str, ...]]) -> int:
    """Append the tuples from `i` on that the whole-tuple pattern takes; where they end."""
    # `Pattern.scanner` (CPython's, behind `re.Scanner`; not in typeshed) matches each
    # time where the previous match ended: the tuples must be contiguous.
    scanner = _row_pattern(width).scanner(sql, i)  # type: ignore[attr-defined]
    matches: list[re.Match[str]] = list(iter(scanner.match, None))
    if not matches:
        return i
    rows.extend(map(re.Match.groups, matches))
    return matches[-1].end()


def _take_wide(sql: str, i: int, width: int, rows: list[tuple[str, ...]]) -> int:
    """`_take_narrow` for tuples too wide for one pattern: each tuple is checked by one
    regex, then its values are found by another."""
    while True:
        start = _GAP_RE.match(sql, i).end()  # type: ignore[union-attr]  # always matches
        m = _TUPLE_RE.match(sql, start)
        if m is None:
            return i
        tokens = tuple(_VALUE_RE.findall(sql, start, m.end()))
        if len(tokens) != width:
            return i  # the token scan names the row
        rows.append(tokens)
        i = m.end()


def values_phrase(count: int) -> str:
    """`count` values in words, for messages: "1 value", "3 values"."""
    return "1 value" if count == 1 else f"{count} values"


# --- tokens as values --------------------------------------------------------------------


def unquote(token: str) -> str:
    """The text of a quoted string token, its escapes resolved as TDengine does."""
    body = token[1:-1]
    if "\\" not in body and token[0] * 2 not in body:
        return body
    escape = _ESCAPE_SQ if token[0] == "'" else _ESCAPE_DQ
    return escape.sub(_resolve_escape, body)


def _resolve_escape(m: re.Match[str]) -> str:
    char = m.group(1)
    if char is None:  # a doubled quote
        return m.group()[0]
    return _ESCAPES.get(char, char)


def classify(token: str) -> tuple[ValueKind, str]:
    """The kind of a raw token and its text: a string's unquoted, others as written.

    Kind `now` is any time expression: NOW, TODAY() or anything `± n unit`; its text is
    the token.
    """
    head = token[0]
    if head in "'\"":
        return ("string", unquote(token)) if token[-1] == head else ("now", token)
    lower = token.lower()
    if lower == "null":
        return "null", "NULL"
    if lower in ("true", "false"):
        return "bool", token
    if head in "nNtT" or NUMBER_RE.fullmatch(token) is None:
        return "now", token
    return "number", token


def bad_offset(text: str) -> int | None:
    """None when `text` is exactly one value as a VALUES tuple may hold it; otherwise
    the offset of the first character that does not fit."""
    m = _VALUE_RE.match(text)
    if m is not None and m.end() == len(text):
        return None
    end = m.end() if m is not None else 0
    return _SPACE_RE.match(text, end).end()  # type: ignore[union-attr]


def token_value(token: str, pos: Pos | None = None) -> Value:
    """A raw token as a statement `Value` (tag values); time expressions lose their spaces."""
    kind, text = classify(token)
    if kind == "now":
        text = _normalize_expression(text)
    elif kind == "bool":
        text = text.lower()
    return Value(kind, text, pos)


def _normalize_expression(token: str) -> str:
    m = EXPRESSION_RE.fullmatch(token)
    if m is None:  # pragma: no cover - the grammar only produces expressions that match
        return token
    base = m.group("base")
    if NOW_RE.fullmatch(base):
        base = "TODAY()" if base[0] in "tT" else "NOW"
    if m.group("sign") is None:
        return base
    return f"{base}{m.group('sign')}{m.group('amount')}{m.group('unit').lower()}"
