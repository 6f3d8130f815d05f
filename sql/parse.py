"""SQL text to typed statements: split at top-level `;`, parse each with the TDengine
dialect (INSERT with the fast values parser), refuse anything unsupported."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sqltopic.errors import (
    InvalidTopicQuery,
    SqlError,
    SqlSyntaxError,
    TopicNotStateless,
    UnsupportedStatement,
    excerpt,
)
from sqltopic.sql import dialect as d
from sqltopic.sql import statements as s
from sqltopic.sql.scan import bad_offset, token_value
from sqltopic.sql.types import ColumnType

# Quoted strings, quoted identifiers and comments, whose `;` do not end a statement.
_SKIP_OR_SEMI = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/|;", re.S
)
_LEADING = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)
# Quoted text and comments, whose parentheses do not nest, and parentheses.
_SKIP_OR_PAREN = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/|[()]", re.S
)
# Parentheses a statement may nest: far beyond what people write, and well inside what
# the parser and the analyses after it can recurse through (about 50 levels would
# exhaust Python's stack in sqlglot).
MAX_NESTING = 32
# Characters of one number literal: a double written out in full has at most 309
# integral digits; longer is a mistake (and Python refuses ints over 4,300 digits).
MAX_NUMBER_CHARS = 400
# Tokens of one statement other than INSERT: a super table of 4,096 columns takes about
# 12,300, and the analyses after parsing cost tens of microseconds a token, so this
# keeps any one statement to about a second of work.
MAX_STATEMENT_TOKENS = 20_000
# Statements of one text (one Execute or Run call): a script's worth; a client with more
# sends them in several calls (the CLI sends one statement a call).
MAX_STATEMENTS = 1_000
# A token as the bound above counts them: quoted text and comments whole, a word, or
# one other character.
_TOKEN = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/|\w+|[^\w\s]",
    re.S,
)
_INSERT = re.compile(r"insert\b", re.I)
# A hexadecimal or binary integer literal: TDengine 3's parser stops at it ("unsupported
# token", parser.c: TK_NK_HEX, TK_NK_BIN); sqlglot would read `0x10` as 0 named x10.
_RADIX_LITERAL = re.compile(r"0[xX][0-9a-fA-F]+|0[bB][01]+")

# sqlglot logs a warning before falling back to an unparsed Command; sqltopic refuses
# those statements with a clear error instead, so the warning is only noise.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


def split_statements(text: str) -> list[tuple[str, s.Pos]]:
    """The statements of `text` with where each starts; empty ones are dropped."""
    out: list[tuple[str, s.Pos]] = []
    start = 0
    for m in _SKIP_OR_SEMI.finditer(text):
        if m.group() == ";":
            _add_statement(text, start, m.start(), out)
            start = m.end()
    _add_statement(text, start, len(text), out)
    return out


def _add_statement(text: str, start: int, end: int, out: list[tuple[str, s.Pos]]) -> None:
    lead = _LEADING.match(text, start, end)
    begin = lead.end() if lead else start
    body = text[begin:end].rstrip()
    if body:
        out.append((body, position(text, begin)))


def position(text: str, offset: int) -> s.Pos:
    """1-based line and column of `offset` in `text`."""
    line = text.count("\n", 0, offset) + 1
    return s.Pos(line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


def parse(text: str) -> list[s.Statement]:
    """Every statement in `text`, in order. Raises `SqlError` at the first bad one."""
    parts = split_statements(text)
    if len(parts) > MAX_STATEMENTS:
        at = parts[MAX_STATEMENTS][1]
        line, column = at.line, at.column
        raise SqlSyntaxError(
            f"{len(parts)} statements in one call; at most {MAX_STATEMENTS}: send them in "
            "several calls", line=line, column=column,
        )  # fmt: skip
    return [parse_one(sql, pos) for sql, pos in parts]


def parse_one(sql: str, pos: s.Pos | None = None) -> s.Statement:
    """One statement (no trailing `;`). `pos` places it inside a longer text."""
    pos = pos or s.Pos(1, 1)
    try:
        if _INSERT.match(sql):
            from sqltopic.sql.insert import parse_insert  # noqa: PLC0415  (its own fast parser)

            return parse_insert(sql, pos)  # (not recursive: any nesting is fine)
        _check_size(sql, pos)
        _check_nesting(sql, pos)
        tree = _parse_tree(sql, pos)
        build = _BUILDERS.get(type(tree))
        if build is None:
            raise UnsupportedStatement(
                f"unsupported statement {_head(sql)!r}; see docs/sql.md for what sqltopic runs",
                sql=sql,
                line=pos.line,
                column=pos.column,
            )
        return build(tree, sql, pos)
    except SqlError as err:
        raise err.at(sql, pos.line, pos.column) from None
    except RecursionError:
        raise SqlSyntaxError(
            "the statement is nested too deeply to parse: use fewer nested NOTs, CASEs, "
            "signs or operators",
            sql=sql, line=pos.line, column=pos.column,
        ) from None  # fmt: skip


def _check_size(sql: str, pos: s.Pos) -> None:
    """SqlSyntaxError when the statement has more than MAX_STATEMENT_TOKENS tokens."""
    for count, m in enumerate(_TOKEN.finditer(sql), 1):
        if _RADIX_LITERAL.fullmatch(m.group()):
            at = position(sql, m.start())
            line, column = _shift(pos, at.line, at.column)
            raise SqlSyntaxError(
                f'unsupported token: "{m.group()}": TDengine 3 refuses hexadecimal and '
                f"binary literals in a statement; write the decimal number "
                f"({int(m.group(), 0)})",
                sql=sql, line=line, column=column,
            )  # fmt: skip
        if count > MAX_STATEMENT_TOKENS:
            at = position(sql, m.start())
            line, column = _shift(pos, at.line, at.column)
            raise SqlSyntaxError(
                f"the statement has more than {MAX_STATEMENT_TOKENS} tokens: split it, or "
                "for long IN lists and many rows use several statements (INSERT is not "
                "bounded this way)",
                sql=sql, line=line, column=column,
            )  # fmt: skip


def _check_nesting(sql: str, pos: s.Pos) -> None:
    """SqlSyntaxError at the parenthesis that opens level MAX_NESTING + 1."""
    depth = 0
    for m in _SKIP_OR_PAREN.finditer(sql):
        token = m.group()
        if token == "(":
            depth += 1
            if depth > MAX_NESTING:
                at = position(sql, m.start())
                line, column = _shift(pos, at.line, at.column)
                raise SqlSyntaxError(
                    f"parentheses nested deeper than {MAX_NESTING} levels: simplify the "
                    "expression or split the statement",
                    sql=sql, line=line, column=column,
                )  # fmt: skip
        elif token == ")":
            depth -= 1


def _parse_tree(sql: str, pos: s.Pos) -> exp.Expression:
    try:
        trees = sqlglot.parse(sql, read=d.TDengine)
    except ParseError as err:
        info = err.errors[0] if err.errors else {}
        # sqlglot's column is the last character of the token; ours is where it starts
        end_col = info.get("col") or 1
        col = max(end_col - len(info.get("highlight") or "x") + 1, 1)
        line, col = _shift(pos, info.get("line") or 1, col)
        message = _plain(info.get("description") or str(err))
        raise SqlSyntaxError(message, sql=sql, line=line, column=col) from None
    except TokenError as err:
        raise SqlSyntaxError(
            f"cannot tokenize: {err}", sql=sql, line=pos.line, column=pos.column
        ) from None
    tree = trees[0] if len(trees) == 1 else None
    if not isinstance(tree, exp.Expression):
        raise SqlSyntaxError("expected one statement", sql=sql, line=pos.line, column=pos.column)
    for literal in tree.find_all(exp.Literal):
        if not literal.is_string and len(literal.this) > MAX_NUMBER_CHARS:
            raise SqlSyntaxError(
                f"a number of {len(literal.this)} characters ({excerpt(literal.this)}): "
                f"number literals have at most {MAX_NUMBER_CHARS}",
                sql=sql, line=pos.line, column=pos.column,
            )  # fmt: skip
    return tree


_TOKEN_REPR = re.compile(r"<Token token_type: TokenType\.(\w+), text: ([^,]*),[^>]*>")
_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")


def _plain(message: str) -> str:
    """sqlglot's message without its internals (token reprs, expression classes)."""

    def word(m: re.Match[str]) -> str:
        return "the end of the statement" if m.group(1) == "SENTINEL" else repr(m.group(2))

    def missing(m: re.Match[str]) -> str:
        return f"incomplete {m.group(2).upper()} expression: an operand is missing"

    return _MISSING.sub(missing, _TOKEN_REPR.sub(word, message))


def _shift(pos: s.Pos, line: int, col: int) -> tuple[int, int]:
    """A position inside a statement, made relative to the whole text."""
    return (pos.line + line - 1, pos.column + col - 1 if line == 1 else col)


def _head(sql: str) -> str:
    return " ".join(sql.split()[:3])


# --- expressions to statements -----------------------------------------------------------


def name(e: exp.Expression | None) -> str:
    """An identifier's name, lower-cased (identifiers are case-insensitive)."""
    if e is None:
        raise SqlSyntaxError("missing name")
    return e.name.lower()


def table_ref(e: exp.Expression) -> s.TableRef:
    db = e.args.get("db")
    return s.TableRef(name(db) if db else None, name(e.this))


def value(e: exp.Expression, sql: str, pos: s.Pos) -> s.Value:
    """A TAGS or SET TAG value, classified as INSERT values are, with its position."""
    start = e.meta.get("start") or 0
    bad = bad_offset(e.name)
    if bad is not None:
        at = position(sql, start + bad)
        line, column = _shift(pos, at.line, at.column)
        raise SqlSyntaxError(
            f"expected one constant (a number, a quoted string, NULL, TRUE/FALSE or "
            f"NOW [± n unit]), got {e.name[bad : bad + 30]!r}",
            sql=sql,
            line=line,
            column=column,
        )
    at = position(sql, start)
    return token_value(e.name, s.Pos(*_shift(pos, at.line, at.column)))


def _defs(defs: list[d.TdColumnDef]) -> tuple[s.ColumnDef, ...]:
    return tuple(s.ColumnDef(name(x.this), ColumnType.parse(x.args["kind"].name)) for x in defs)


def _options(e: exp.Expression) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for opt in e.args.get("options") or []:
        raw = opt.args["expression"]
        sign = ""
        if isinstance(raw, exp.Neg):  # `-1`: a number literal under a minus
            raw, sign = raw.this, "-"
        text = raw.this if isinstance(raw, exp.Literal) else raw.name
        number = isinstance(raw, exp.Literal) and not raw.is_string
        if number and len(text) > MAX_OPTION_DIGITS:
            raise SqlError(f"{opt.this.name.upper()} {sign}{excerpt(text)} is out of range")
        out[opt.this.name.upper()] = int(sign + text) if number else text
    return out


# Digits of a database option's value: every option fits a 64-bit integer.
MAX_OPTION_DIGITS = 19

Builder = Callable[[Any, str, s.Pos], s.Statement]


def _create_table(e: d.TdCreateTable, sql: str, pos: s.Pos) -> s.CreateTable:
    common: dict[str, Any] = {"sql": sql, "pos": pos, "table": table_ref(e.this)}
    common["if_not_exists"] = bool(e.args.get("exists"))
    if not e.args.get("using"):
        return s.CreateTable(columns=_defs(e.args["columns"]), **common)
    names = e.args.get("tag_names")
    return s.CreateTable(
        using=table_ref(e.args["using"]),
        tag_names=tuple(name(n) for n in names) if names else None,
        tag_values=tuple(value(v, sql, pos) for v in e.args["tag_values"]),
        **common,
    )


def _create_tables(e: d.TdCreateTables, sql: str, pos: s.Pos) -> s.Statement:
    tables = tuple(_create_table(t, sql, pos) for t in e.expressions)
    return s.CreateTables(sql=sql, pos=pos, tables=tables)


def _create_topic(e: d.TdCreateTopic, sql: str, pos: s.Pos) -> s.Statement:
    meta = {"WITH": "with", "ONLY": "only"}.get(e.args.get("meta") or "", "none")
    common: dict[str, Any] = {"sql": sql, "pos": pos, "name": name(e.this), "meta": meta}
    common["if_not_exists"] = bool(e.args.get("exists"))
    kind = e.args["kind"]
    if kind == "DATABASE":
        return s.CreateTopic(kind="database", db=name(e.args["target"]), **common)
    if kind == "STABLE":
        where = e.args.get("where")
        cond = where.this if where is not None else None
        return s.CreateTopic(
            kind="stable",
            target=table_ref(e.args["target"]),
            where=cond,
            where_sql=cond.sql(dialect=d.TDengine) if cond is not None else None,
            **common,
        )
    query = e.args["query"]
    refused = e.meta.get("refused")
    if refused is not None:
        word, offset = refused
        at = position(sql, offset)
        line, column = _shift(pos, at.line, at.column)
        error = (
            InvalidTopicQuery if word in ("PARTITION", "SLIMIT", "SOFFSET") else TopicNotStateless
        )
        raise error(
            f"{word} is not allowed in a topic: a topic delivers each row as it was "
            "written, in WAL order, and keeps no state across rows",
            sql=sql, line=line, column=column,
        )  # fmt: skip
    return s.CreateTopic(
        kind="query", query=query, query_sql=query.sql(dialect=d.TDengine), **common
    )


def _alter_stable(e: d.TdAlterStable, sql: str, pos: s.Pos) -> s.Statement:
    kind = e.args.get("kind")
    new = e.args.get("new_name")
    return s.AlterStable(
        sql=sql,
        pos=pos,
        table=table_ref(e.this),
        action=e.args["action"].lower().replace(" ", "_"),
        name=name(e.args["name"]),
        type=ColumnType.parse(kind.name) if kind is not None else None,
        new_name=name(new) if new is not None else None,
        via_table=bool(e.args.get("table")),
    )


def _drop(e: d.TdDrop, sql: str, pos: s.Pos) -> s.Statement:
    kind, exists = e.args["kind"], bool(e.args.get("exists"))
    if kind == "DATABASE":
        return s.DropDatabase(sql=sql, pos=pos, name=name(e.this), if_exists=exists)
    if kind == "TOPIC":
        force = bool(e.args.get("force"))
        return s.DropTopic(sql=sql, pos=pos, name=name(e.this), if_exists=exists, force=force)
    if kind == "USER":
        return s.DropUser(sql=sql, pos=pos, name=name(e.this))
    return s.DropTable(
        sql=sql, pos=pos, table=table_ref(e.this), stable=kind == "STABLE", if_exists=exists
    )


def _select(e: exp.Expression, sql: str, pos: s.Pos) -> s.Statement:
    return s.Select(sql=sql, pos=pos, tree=e)


def _user(e: d.TdUser, sql: str, pos: s.Pos) -> s.Statement:
    cls = s.CreateUser if e.args["action"] == "CREATE" else s.AlterUser
    return cls(sql=sql, pos=pos, name=name(e.this), password=e.args["password"].this)


def _grant_rights(e: d.TdGrantRights, sql: str, pos: s.Pos) -> s.Statement:
    words = {r.name for r in e.args["rights"]}
    rights: tuple[s.Right, ...] = (
        ("read", "write")
        if "ALL" in words
        else tuple(r for r in ("read", "write") if r.upper() in words)
    )
    db, table = e.args["db"], e.this
    cond = e.args.get("condition")
    return s.GrantRights(
        sql=sql, pos=pos, rights=rights,
        db=None if isinstance(db, exp.Star) else name(db),
        table=None if isinstance(table, exp.Star) else name(table),
        user=name(e.args["user"]), condition=cond,
        condition_sql=cond.sql(dialect=d.TDengine) if cond is not None else None,
        revoke=bool(e.args.get("revoke")),
    )  # fmt: skip


_BUILDERS: dict[type[exp.Expression], Builder] = {
    d.TdCreateDatabase: lambda e, sql, pos: s.CreateDatabase(
        sql=sql, pos=pos, name=name(e.this), if_not_exists=bool(e.args.get("exists")),
        options=_options(e),
    ),
    d.TdAlterDatabase: lambda e, sql, pos: s.AlterDatabase(
        sql=sql, pos=pos, name=name(e.this), options=_options(e)
    ),
    d.TdUse: lambda e, sql, pos: s.Use(sql=sql, pos=pos, name=name(e.this)),
    d.TdShow: lambda e, sql, pos: s.Show(
        sql=sql, pos=pos, what=e.this.name.lower(),
        db=name(e.args["db"]) if e.args.get("db") else None,
    ),
    d.TdDescribe: lambda e, sql, pos: s.Describe(sql=sql, pos=pos, table=table_ref(e.this)),
    d.TdCreateStable: lambda e, sql, pos: s.CreateStable(
        sql=sql, pos=pos, table=table_ref(e.this), columns=_defs(e.args["columns"]),
        tags=_defs(e.args["tags"]), if_not_exists=bool(e.args.get("exists")),
    ),
    d.TdCreateTable: _create_table,
    d.TdCreateTables: _create_tables,
    d.TdAlterStable: _alter_stable,
    d.TdSetTag: lambda e, sql, pos: s.SetTag(
        sql=sql, pos=pos, table=table_ref(e.this), tag=name(e.args["tag"]),
        value=value(e.args["expression"], sql, pos),
    ),
    d.TdDrop: _drop,
    d.TdCreateDnode: lambda e, sql, pos: s.CreateDnode(sql=sql, pos=pos, endpoint=e.this.this),
    d.TdDropDnode: lambda e, sql, pos: s.DropDnode(
        sql=sql, pos=pos, dnode=int(e.this.this) if e.this.is_number else e.this.this,
    ),
    d.TdDropConsumerGroup: lambda e, sql, pos: s.DropConsumerGroup(
        sql=sql, pos=pos, group=name(e.this), topic=name(e.args["topic"]),
        if_exists=bool(e.args.get("exists")), force=bool(e.args.get("force")),
    ),
    d.TdCreateTopic: _create_topic,
    d.TdUser: _user,
    d.TdGrantRights: _grant_rights,
    d.TdGrant: lambda e, sql, pos: s.Grant(
        sql=sql, pos=pos, topic=name(e.this), user=name(e.args["user"]),
        revoke=bool(e.args.get("revoke")),
    ),
    exp.Select: _select,
    exp.Union: _select,
    exp.Subquery: _select,
}  # fmt: skip
