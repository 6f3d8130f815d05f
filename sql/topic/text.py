"""Positions in the user's text: the statement's tokens, where an AST node was written,
and errors that carry the line and column of their culprit."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from sqltopic.errors import SqlError
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.parse import position
from sqltopic.sql.statements import Pos, Statement

# Tokens that may stand between a node without a position and its keyword: `CASE WHEN`.
_FILLERS = frozenset({"(", "WHEN", "DISTINCT", "ALL"})
_DEPTH = {
    TokenType.L_PAREN: 1,
    TokenType.R_PAREN: -1,
    TokenType.L_BRACKET: 1,
    TokenType.R_BRACKET: -1,
}


@dataclass(frozen=True, slots=True)
class Text:
    """A statement's text and tokens: turns AST nodes into positions in the user's text."""

    sql: str
    pos: Pos
    tokens: tuple[Token, ...]

    @classmethod
    def of(cls, stmt: Statement) -> Text:
        try:
            tokens = tuple(TDengine().tokenize(stmt.sql))
        except SqlglotError:
            tokens = ()
        return cls(stmt.sql, stmt.pos, tokens)

    def error(self, cls: type[SqlError], message: str, at: exp.Expr | int | None) -> SqlError:
        """`cls(message)` at a node or character offset (the statement start if unknown)."""
        offset = self.offset(at) if isinstance(at, exp.Expr) else at
        line, column = (self.pos.line, self.pos.column) if offset is None else self.where(offset)
        return cls(message, sql=self.sql, line=line, column=column)

    def where(self, offset: int) -> tuple[int, int]:
        """Line and column of a statement offset in the whole text."""
        inner = position(self.sql, offset)
        if inner.line == 1:
            return self.pos.line, self.pos.column + inner.column - 1
        return self.pos.line + inner.line - 1, inner.column

    def offset(self, node: exp.Expr) -> int | None:
        """Where a node starts: its token, else its keyword before its first positioned part."""
        start = node.meta.get("start")
        if isinstance(start, int):
            return start
        inner = [n.meta["start"] for n in node.walk() if isinstance(n.meta.get("start"), int)]
        if not inner:
            return None
        word = _lead_word(node)
        found = self._word_before(word, min(inner)) if word else None
        return min(inner) if found is None else found

    def _word_before(self, word: str, offset: int) -> int | None:
        index = next((i for i, t in enumerate(self.tokens) if t.start >= offset), len(self.tokens))
        for token in reversed(self.tokens[max(0, index - 3) : index]):
            if _word(token) == word.upper():
                return token.start
            if _word(token) not in _FILLERS:
                return None
        return None

    def keyword(self, word: str) -> int | None:
        """The first `word` token outside parentheses (else anywhere)."""
        depth, fallback = 0, None
        for token in self.tokens:
            if _word(token) == word and depth == 0:
                return token.start
            if _word(token) == word and fallback is None:
                fallback = token.start
            depth += _DEPTH.get(token.token_type, 0)
        return fallback

    def select_items(self) -> list[tuple[int, int]]:
        """The character spans of the top-level SELECT list's items, as written."""
        spans: list[tuple[int, int]] = []
        item: list[Token] = []
        depth, inside = 0, False
        for token in self.tokens:
            word = _word(token)
            if not inside:
                inside = word == "SELECT"
            elif depth == 0 and word in ("FROM", ","):
                spans += [(item[0].start, item[-1].end)] if item else []
                item = []
                if word == "FROM":
                    return spans
            else:
                item.append(token)
                depth += _DEPTH.get(token.token_type, 0)
        return spans + ([(item[0].start, item[-1].end)] if item else [])

    def after(self, word: str) -> int | None:
        """The offset of the token that follows keyword `word`."""
        start = self.keyword(word)
        later = [t.start for t in self.tokens if start is not None and t.start > start]
        return later[0] if later else start


def _word(token: Token) -> str:
    """A keyword or name token's first word, upper-case ("" for strings and `quoted`)."""
    if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
        return ""
    words = token.text.upper().split()
    return words[0] if words else ""


def _lead_word(node: exp.Expr) -> str | None:
    """The keyword that starts a node written without a token of its own."""
    if isinstance(node, (exp.Query, exp.Subquery)):
        return "select"
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


# Calls sqlglot parses by a grammar of their own, leaving no position: their TDengine name.
_UNPLACED: dict[type[exp.Expr], str] = {exp.Chr: "char", exp.StrPosition: "position"}


def func_name(node: exp.Func, text: Text) -> str:
    """A function's name as the user wrote it, lower-case (`char_length`, not LENGTH)."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    unplaced = _UNPLACED.get(type(node))  # parsed apart, without a position of its own
    if unplaced is not None and not isinstance(node.meta.get("start"), int):
        return unplaced
    start, end = node.meta.get("start"), node.meta.get("end")
    if isinstance(start, int) and isinstance(end, int):
        return text.sql[start : end + 1].lower()
    return node.sql_name().lower()
