"""The topic compiler: CREATE TOPIC statements to the catalog's `Topic` records.

This module owns TDengine's rules for what a topic may contain, the errors that refuse
the rest (each with the line and column in the user's text), and the translation of a
topic into what a vnode runs with DuckDB:

* A query topic's SELECT becomes `Topic.select_sql`, run over the batch relation of
  `sql/layout.py` (WAL entries of the topic's table only: every child of a super table,
  or the one child or normal table) on a connection with `TimeZone='UTC'`::

      SELECT "__version", "tbname" AS "__tbname", <expr> AS "<name>", ... FROM "__batch"
      [WHERE <condition>]

  Rows come out in batch (WAL) order. The output columns are fixed at creation:
  `Topic.output`, and their exact Arrow types from `topic_schema`.
* A stable topic's tag condition becomes `Topic.filter_sql`, a boolean over the tags
  relation; `matching_tables` evaluates it.

TDengine semantics that DuckDB lacks are translated: LOG(x) is the natural log and
LOG(x, b) the log base b; LENGTH counts bytes and CHAR_LENGTH characters; CONCAT and
CONCAT_WS give NULL when any argument is NULL; BINARY(n)/NCHAR(n) are strings; decimal
literals are DOUBLE; a timestamp compares with an integer in the database precision or a
date-time string (UTC unless it names an offset); a string compares with a number as a
number (NULL when it is not one). An expression that could fail on a row (overflow,
`% 0`, a cast out of range) yields NULL there instead, so that one bad row can never
wedge a subscription.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from sqltopic.errors import InvalidTopicQuery, NotFoundError, SqlError, TopicNotStateless
from sqltopic.sql import layout
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.model import TBNAME, Catalog, Column, Topic
from sqltopic.sql.parse import position
from sqltopic.sql.statements import CreateTopic, Pos
from sqltopic.sql.types import MAX_STRING_LENGTH, ColumnType, Precision, TypeName

__all__ = [
    "SCALAR_FUNCTIONS",
    "STATEFUL_FUNCTIONS",
    "TBNAME_LENGTH",
    "UNKNOWN_STRING_LENGTH",
    "compile_topic",
    "matching_tables",
    "topic_schema",
]

# --- TDengine's rules, as data ------------------------------------------------------------

# TDengine's longest table name: the declared length of a `tbname` output column.
TBNAME_LENGTH = 192
# A computed string's length is unknown at creation; declaring the longest VARCHAR means
# that no delivered value ever exceeds its declared type.
UNKNOWN_STRING_LENGTH = MAX_STRING_LENGTH

# TDengine's aggregate, selection and time-series functions, by name: sqlglot knows few of
# them as aggregates, and each needs state across rows, which a topic does not keep.
STATEFUL_FUNCTIONS = frozenset({
    "apercentile", "avg", "bottom", "count", "csum", "derivative", "diff", "elapsed",
    "first", "forecast", "group_key", "histogram", "hyperloglog", "interp", "irate", "last",
    "last_row", "leastsquares", "mavg", "max", "min", "mode", "percentile", "sample",
    "spread", "statecount", "stateduration", "stddev", "stddev_pop", "sum", "tail", "top",
    "twa", "unique", "var_pop", "variance", "_group_key", "_irowts", "_isfilled",
    "_wduration", "_wend", "_wstart",
})  # fmt: skip

# TDengine window clauses: sqlglot reads `FROM meters INTERVAL(10s)` as a table alias.
WINDOW_CLAUSES = frozenset({"interval", "session", "state_window", "event_window", "count_window"})

# The scalar functions a topic may call, by the name as written: TDengine functions that
# DuckDB evaluates row by row with TDengine's meaning (some translated, see `_REWRITES`).
SCALAR_FUNCTIONS = frozenset({
    "abs", "acos", "asin", "atan", "ceil", "cos", "degrees", "exp", "floor", "ln", "log",
    "mod", "pi", "pow", "power", "radians", "round", "sign", "sin", "sqrt", "tan",
    "ascii", "char_length", "concat", "concat_ws", "length", "lower", "ltrim", "repeat",
    "replace", "rtrim", "substr", "substring", "trim", "upper",
    "case", "coalesce", "if", "ifnull", "nullif", "nvl", "cast",
})  # fmt: skip

# Expression nodes (besides the functions above) a topic's SELECT list and WHERE may use.
_PLAIN_NODES: tuple[type[exp.Expr], ...] = (
    exp.Column, exp.Identifier, exp.Star, exp.Literal, exp.Null, exp.Boolean, exp.Paren,
    exp.Neg, exp.Not, exp.And, exp.Or, exp.Xor, exp.Add, exp.Sub, exp.Mul, exp.Div,
    exp.IntDiv, exp.Mod, exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot,
    exp.BitwiseLeftShift, exp.BitwiseRightShift, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT,
    exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is, exp.In, exp.Between, exp.Like,
    exp.ILike, exp.Escape, exp.DPipe, exp.DataType, exp.DataTypeParam,
)  # fmt: skip

# SELECT clauses a topic refuses: argument -> (the clause as written, why, what to do).
_CLAUSES: dict[str, tuple[str, str]] = {
    "with_": ("WITH", "a topic reads its one table directly; write the SELECT without a CTE"),
    "distinct": ("DISTINCT", "a topic delivers every matching row as it is written"),
    "joins": ("JOIN", "a topic reads exactly one table; create one topic per table, "
              "or one topic on their super table"),
    "laterals": ("LATERAL", "a topic reads exactly one table"),
    "group": ("GROUP BY", "grouping needs state across rows, and a topic evaluates each "
              "row on its own; query the groups with SELECT instead"),
    "having": ("HAVING", "it filters groups, and a topic has none; use WHERE"),
    "windows": ("WINDOW", "window functions need state across rows"),
    "qualify": ("QUALIFY", "it filters window results, and a topic has none; use WHERE"),
    "order": ("ORDER BY", "a topic delivers rows in WAL order"),
    "limit": ("LIMIT", "a topic is unbounded: it delivers every matching row as it is written"),
    "offset": ("OFFSET", "a topic delivers every matching row as it is written"),
}  # fmt: skip
_SELECT_PARTS = frozenset({"expressions", "from_", "where"})
_TABLE_PARTS = frozenset({"this", "db", "alias"})
# Tokens that may stand between a node without a position and its keyword: `CASE WHEN`.
_FILLERS = frozenset({"(", "WHEN", "DISTINCT", "ALL"})
_DEPTH = {
    TokenType.L_PAREN: 1,
    TokenType.R_PAREN: -1,
    TokenType.L_BRACKET: 1,
    TokenType.R_BRACKET: -1,
}

_TBNAME_COLUMN = Column(TBNAME, ColumnType("VARCHAR", TBNAME_LENGTH))
_ARROW_TYPES: dict[pa.DataType, TypeName] = {
    pa.bool_(): "BOOL", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
    pa.int64(): "BIGINT", pa.uint8(): "TINYINT UNSIGNED", pa.uint16(): "SMALLINT UNSIGNED",
    pa.uint32(): "INT UNSIGNED", pa.uint64(): "BIGINT UNSIGNED", pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
}  # fmt: skip
_SCALE: dict[Precision, int] = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DIGITS: dict[Precision, int] = {"ms": 3, "us": 6, "ns": 9}
# DuckDB type of a timestamp literal: TIMESTAMP holds ms and us exactly, ns needs its own.
_TS_LITERAL: dict[Precision, str] = {"ms": "TIMESTAMP", "us": "TIMESTAMP", "ns": "TIMESTAMP_NS"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DATETIME = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?",
    re.IGNORECASE,
)
_COMPARISONS: tuple[type[exp.Expr], ...] = (
    exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ,
)  # fmt: skip
# Nodes that can fail on some row (overflow, division by zero), besides functions.
_MAY_FAIL: tuple[type[exp.Expr], ...] = (
    exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg,
)  # fmt: skip
# Functions that never fail in DuckDB (out-of-domain math gives NaN or infinity); any
# other function (a cast, ABS of the smallest integer, ...) may.
_NEVER_FAIL: tuple[type[exp.Expr], ...] = (
    exp.And, exp.Or, exp.Xor, exp.Case, exp.If, exp.Coalesce, exp.Nullif, exp.Lower,
    exp.Upper, exp.Trim, exp.Concat, exp.ConcatWs, exp.Length, exp.Replace, exp.Ascii,
    exp.Substring, exp.Sin, exp.Cos, exp.Tan, exp.Asin, exp.Acos, exp.Atan, exp.Sqrt, exp.Ln,
    exp.Log, exp.Exp, exp.Pow, exp.Degrees, exp.Radians, exp.Pi, exp.Sign,
)  # fmt: skip


# --- public API -------------------------------------------------------------------------


def compile_topic(
    stmt: CreateTopic, catalog: Catalog, *, current_db: str | None, owner: str, now_us: int
) -> Topic:
    """The catalog record of a CREATE TOPIC statement; raises `SqlError` with a position."""
    text = _Text.of(stmt)
    compiled = _COMPILERS[stmt.kind](stmt, catalog, current_db, text)
    return Topic(
        name=stmt.name,
        db=compiled.db,
        kind=stmt.kind,
        sql=stmt.sql,
        meta=stmt.meta,
        target=compiled.target,
        output=compiled.output,
        output_schema=compiled.output_schema,
        select_sql=compiled.select_sql,
        filter_sql=compiled.filter_sql,
        uses=compiled.uses,
        owner=owner,
        create_us=now_us,
    )


def topic_schema(topic: Topic, catalog: Catalog) -> pa.Schema:
    """The exact Arrow schema of a query topic's output columns (without `__version` and
    `__tbname`), as DuckDB gives them from `select_sql`; cheap after the first call."""
    if topic.kind != "query" or topic.target is None:
        raise SqlError(f"topic {topic.name!r} is not a query topic; it has no fixed schema")
    target = _find_target(catalog, topic.db, topic.target)
    return _schema_of(topic.select_sql, target.batch_schema())


# Schemas asked for again and again (per poll) are remembered; a probe costs milliseconds.
_SCHEMA_CACHE_SIZE = 1024


@functools.lru_cache(maxsize=_SCHEMA_CACHE_SIZE)
def _schema_of(select_sql: str, batch: pa.Schema) -> pa.Schema:
    with closing(_Probe(layout.BATCH, batch)) as probe:
        return _user_schema(probe.run(select_sql))


def matching_tables(topic: Topic, tags: pa.Table, con: duckdb.DuckDBPyConnection) -> list[str]:
    """The child tables (`tbname`s of `tags`, a `layout.tags_schema` table) that a stable
    topic delivers, in the order of `tags`. `con` is the calling thread's cursor."""
    if topic.filter_sql is None:
        return [str(name) for name in tags.column(TBNAME).to_pylist()]
    query = f'SELECT "{TBNAME}" FROM "{layout.TAGS}" WHERE {topic.filter_sql}'
    con.register(layout.TAGS, tags)
    try:
        rows = con.sql(query).to_arrow_table()
    except duckdb.Error as err:
        raise SqlError(f"the tag condition of topic {topic.name!r} failed: {err}") from None
    finally:
        con.unregister(layout.TAGS)
    return [str(name) for name in rows.column(0).to_pylist()]


# --- positions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Text:
    """A statement's text and tokens: turns AST nodes into positions in the user's text."""

    sql: str
    pos: Pos
    tokens: tuple[Token, ...]

    @classmethod
    def of(cls, stmt: CreateTopic) -> _Text:
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


def _func_name(node: exp.Func, text: _Text) -> str:
    """A function's name as the user wrote it, lower-case (`char_length`, not LENGTH)."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    start, end = node.meta.get("start"), node.meta.get("end")
    if isinstance(start, int) and isinstance(end, int):
        return text.sql[start : end + 1].lower()
    return node.sql_name().lower()


# --- the table a topic reads --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    """The table a topic reads, with the columns and tags it offers."""

    db: str
    name: str
    kind: Literal["super", "child", "normal"]
    columns: tuple[Column, ...]
    tags: tuple[Column, ...]  # the super table's tags, for super and child tables
    precision: Precision

    def __str__(self) -> str:
        return f"{self.db}.{self.name}"

    def find(self, name: str) -> Column | None:
        if name == TBNAME:
            return _TBNAME_COLUMN
        return next((c for c in (*self.columns, *self.tags) if c.name == name), None)

    def is_tag(self, name: str) -> bool:
        return any(c.name == name for c in self.tags)

    def star(self) -> tuple[Column, ...]:
        """What `SELECT *` means: data columns, then a super table's tags (as TDengine)."""
        return self.columns + self.tags if self.kind == "super" else self.columns

    def in_order(self, names: set[str]) -> tuple[str, ...]:
        return tuple(c.name for c in (*self.columns, *self.tags) if c.name in names)

    def batch_schema(self) -> pa.Schema:
        return layout.batch_schema(self.columns, self.tags, self.precision)


def _resolve_target(
    catalog: Catalog,
    db: str | None,
    name: str,
    current_db: str | None,
    text: _Text,
    *,
    at: exp.Expr | int | None,
) -> _Target:
    """`[db.]name` as a super, child or normal table; errors at `at` (node or offset)."""
    db = db or current_db
    if db is None:
        raise text.error(
            SqlError, f"no database selected for table {name!r}: write db.{name}, or USE db", at
        )
    try:
        return _find_target(catalog, db, name)
    except NotFoundError as err:
        raise text.error(NotFoundError, err.message, at) from None


def _find_target(catalog: Catalog, db: str, name: str) -> _Target:
    precision = catalog.database(db).precision
    stb = catalog.stables.get((db, name))
    if stb is not None:
        return _Target(db, name, "super", stb.columns, stb.tags, precision)
    table = catalog.tables.get((db, name))
    if table is None:
        raise NotFoundError(
            f"table {db}.{name} does not exist; check the name with SHOW TABLES or SHOW STABLES"
        )
    if table.stable is None:
        return _Target(db, name, "normal", table.columns, (), precision)
    stb = catalog.stable(db, table.stable)
    return _Target(db, name, "child", stb.columns, stb.tags, precision)


# --- compiled pieces ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Compiled:
    db: str
    target: str | None
    output: tuple[Column, ...] = ()
    output_schema: pa.Schema | None = None
    select_sql: str = ""
    filter_sql: str | None = None
    uses: tuple[str, ...] = ()


@dataclass(slots=True)
class _Output:
    """One output column of a query topic: its name, expression, and where it was written."""

    name: str
    expr: exp.Expr
    offset: int | None
    source: Column | None = None  # the column it copies unchanged, if a plain reference


@dataclass(frozen=True, slots=True)
class _Scope:
    """What column references may name, and how they may be qualified."""

    target: _Target
    qualifiers: frozenset[str]
    tags_only: bool = False


def _database_topic(
    stmt: CreateTopic, catalog: Catalog, current_db: str | None, text: _Text
) -> _Compiled:
    name = stmt.db or ""
    if name not in catalog.databases:
        raise text.error(
            NotFoundError,
            f"database {name!r} does not exist; create it first, or check SHOW DATABASES",
            text.after("DATABASE"),
        )
    return _Compiled(db=name, target=None)


# --- stable topics ------------------------------------------------------------------------


def _stable_topic(
    stmt: CreateTopic, catalog: Catalog, current_db: str | None, text: _Text
) -> _Compiled:
    ref, at = stmt.target, text.after("STABLE")
    if ref is None:
        raise text.error(SqlError, "a stable topic needs a super table: AS STABLE db.stb", at)
    target = _resolve_target(catalog, ref.db, ref.name, current_db, text, at=at)
    if target.kind != "super":
        raise text.error(
            InvalidTopicQuery,
            f"Only super tables can be subscribed with AS STABLE: {target} is a {target.kind} "
            f"table; subscribe to it with CREATE TOPIC ... AS SELECT * FROM {target}",
            at,
        )
    if stmt.where is None:
        return _Compiled(db=target.db, target=target.name)
    filter_sql, uses = _tag_filter(stmt.where.copy(), target, text)
    return _Compiled(db=target.db, target=target.name, filter_sql=filter_sql, uses=uses)


def _tag_filter(cond: exp.Expr, target: _Target, text: _Text) -> tuple[str, tuple[str, ...]]:
    """A stable topic's condition as DuckDB SQL over the tags relation, and the tags used."""
    _check_parts([cond], text)
    used = _bind_columns(cond, _Scope(target, frozenset({target.name}), tags_only=True), text)
    tree = exp.Select(expressions=[_quoted(TBNAME)]).from_(_relation(layout.TAGS)).where(cond)
    with closing(_Probe(layout.TAGS, layout.tags_schema(target.tags, target.precision))) as p:
        _translate(tree, p, target.precision, text)
        condition = tree.args["where"].this
        p.types([condition], text, condition)
        p.check(tree, text)
    return _duckdb_sql(condition, text), target.in_order(used)


# --- query topics -------------------------------------------------------------------------


def _query_topic(
    stmt: CreateTopic, catalog: Catalog, current_db: str | None, text: _Text
) -> _Compiled:
    if stmt.query is None:
        raise text.error(InvalidTopicQuery, "a query topic needs AS SELECT ... FROM table", None)
    select = _check_root(stmt.query.copy(), text)
    table = _check_from(select, text)
    _check_parts(_parts(select), text)
    db, name = table.text("db").lower() or None, table.name.lower()
    target = _resolve_target(catalog, db, name, current_db, text, at=table)
    alias = table.alias.lower()
    scope = _Scope(target, frozenset({name, alias} - {""}))
    outputs, used = _outputs(select, scope, text)
    where = select.args.get("where")
    tree = _batch_select(outputs, where.this if where is not None else None)
    with closing(_Probe(layout.BATCH, target.batch_schema())) as probe:
        _translate(tree, probe, target.precision, text)
        schema = _fix_output_types(tree, outputs, probe, target.precision, text)
    return _Compiled(
        db=target.db,
        target=target.name,
        output=_output_columns(outputs, schema, target.precision),
        output_schema=schema,
        select_sql=_duckdb_sql(tree, text),
        uses=target.in_order(used),
    )


def _check_root(root: exp.Expr, text: _Text) -> exp.Select:
    """The topic's one SELECT; set operations and anything else are refused."""
    if isinstance(root, exp.SetOperation):
        word = type(root).__name__.upper()
        raise text.error(
            InvalidTopicQuery,
            f"{word} is not allowed in a topic: a topic reads exactly one table; create one "
            "topic per table, or one topic on their super table",
            text.keyword(word),
        )
    if not isinstance(root, exp.Select):
        raise text.error(
            InvalidTopicQuery,
            "a query topic is one SELECT ... FROM table, without parentheses",
            root,
        )
    _check_clauses(root, text)
    return root


def _check_clauses(select: exp.Select, text: _Text) -> None:
    for key, (clause, why) in _CLAUSES.items():
        value = select.args.get(key)
        if value:
            at = text.keyword(clause.split()[0]) if key != "joins" else None
            node = value[0] if isinstance(value, list) else value
            message = f"{clause} is not allowed in a topic: {why}"
            raise text.error(InvalidTopicQuery, message, node if at is None else at)
    extra = sorted(
        k for k, v in select.args.items() if v and k not in _SELECT_PARTS | _CLAUSES.keys()
    )
    if extra:
        clause = extra[0].strip("_").upper()
        raise text.error(
            InvalidTopicQuery, f"{clause} is not supported in a topic", text.keyword("SELECT")
        )


def _check_from(select: exp.Select, text: _Text) -> exp.Table:
    """The one real table in FROM; a TDengine window after it needs state."""
    from_ = select.args.get("from_")
    source = from_.this if from_ is not None else None
    if source is None:
        raise text.error(
            InvalidTopicQuery, "a topic reads one table: add FROM <table>", text.keyword("SELECT")
        )
    if isinstance(source, (exp.Query, exp.Subquery)):
        raise text.error(InvalidTopicQuery, _SUBQUERY, source)
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        raise text.error(
            InvalidTopicQuery,
            "a topic reads one real table (a super, child or normal table), "
            f"not {source.sql(dialect=TDengine)}",
            source,
        )
    _check_table_parts(source, text)
    return source


def _check_table_parts(table: exp.Table, text: _Text) -> None:
    alias = table.args.get("alias")
    if alias is not None and alias.name.lower() in WINDOW_CLAUSES:
        raise text.error(
            TopicNotStateless,
            f"{alias.name.upper()} windows are not allowed in a topic: a window aggregates "
            "rows, which needs state, and a topic evaluates each row on its own; query the "
            "windows with SELECT instead",
            alias,
        )
    extra = sorted(k for k, v in table.args.items() if v and k not in _TABLE_PARTS)
    if extra or (alias is not None and alias.args.get("columns")):
        what = extra[0].upper() if extra else "column aliases"
        raise text.error(
            InvalidTopicQuery,
            f"{what} is not supported in a topic's FROM: name the table alone, [db.]table",
            table,
        )


_SUBQUERY = (
    "subqueries are not allowed in a topic: a topic evaluates each row of its one table on "
    "its own; write the condition without a subquery"
)


def _parts(select: exp.Select) -> list[exp.Expr]:
    """The expressions of the SELECT list (without aliases) and of the WHERE."""
    parts = [e.this if isinstance(e, exp.Alias) else e for e in select.expressions]
    where = select.args.get("where")
    return parts + ([where.this] if where is not None else [])


# --- expression rules ---------------------------------------------------------------------

_Rule = Callable[[exp.Expr, _Text], str | None]


def _subquery_rule(node: exp.Expr, text: _Text) -> str | None:
    return _SUBQUERY if isinstance(node, (exp.Query, exp.Subquery)) else None


def _stateful_rule(node: exp.Expr, text: _Text) -> str | None:
    why = (
        "is not allowed in a topic: it needs state across rows, and a topic evaluates each "
        "row on its own; query it with SELECT instead"
    )
    if isinstance(node, exp.Window):
        return f"window function {node.sql(dialect=TDengine)} {why}"
    if isinstance(node, exp.Func) and not isinstance(node, _PLAIN_NODES):
        name = _func_name(node, text)
        if isinstance(node, exp.AggFunc) or name in STATEFUL_FUNCTIONS:
            return f"aggregate function {name.upper()} {why}"
    return None


def _supported_rule(node: exp.Expr, text: _Text) -> str | None:
    if isinstance(node, _PLAIN_NODES):
        return None
    if isinstance(node, exp.Func):
        name = _func_name(node, text)
        if name in SCALAR_FUNCTIONS:
            return None
        return f"function {name.upper()} is not supported in a topic; use one of " + ", ".join(
            sorted(SCALAR_FUNCTIONS)
        )
    return f"{node.sql(dialect=TDengine)} is not supported in a topic"


# Checked in order: the first rule any node breaks decides the error (TDengine's order).
_RULES: tuple[tuple[_Rule, type[SqlError]], ...] = (
    (_subquery_rule, InvalidTopicQuery),
    (_stateful_rule, TopicNotStateless),
    (_supported_rule, InvalidTopicQuery),
)


def _check_parts(parts: Sequence[exp.Expr], text: _Text) -> None:
    """Refuse the first (leftmost) node of `parts` that breaks a rule."""
    nodes = [node for part in parts for node in part.walk()]
    for rule, cls in _RULES:
        broken = [(text.offset(n), n, m) for n in nodes if (m := rule(n, text)) is not None]
        if broken:
            offset, _node, message = min(broken, key=lambda b: -1 if b[0] is None else b[0])
            raise text.error(cls, message, offset)


# --- names --------------------------------------------------------------------------------


def _outputs(select: exp.Select, scope: _Scope, text: _Text) -> tuple[list[_Output], set[str]]:
    """The output columns (`*` expanded) with their column references bound, and the
    columns and tags they and the WHERE use."""
    outputs: list[_Output] = []
    spans = text.select_items()
    if len(spans) != len(select.expressions):  # not as written: name items from the AST
        spans = [(o, o) for o in (text.offset(item) or 0 for item in select.expressions)]
    for item, span in zip(select.expressions, spans, strict=True):
        outputs += (
            _expand(item, span[0], scope, text) if _is_star(item) else [_output(item, span, text)]
        )
    _check_names(outputs, text)
    used = {o.name for o in outputs if o.source is not None}
    for out in outputs:
        used |= _bind_columns(out.expr, scope, text)
        if out.source is None and isinstance(out.expr, exp.Column):
            out.source = scope.target.find(out.expr.name)
    where = select.args.get("where")
    if where is not None:
        used |= _bind_columns(where.this, scope, text)
    return outputs, used - {TBNAME}


def _is_star(item: exp.Expr) -> bool:
    return isinstance(item, exp.Star) or (
        isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
    )


def _expand(item: exp.Expr, offset: int, scope: _Scope, text: _Text) -> list[_Output]:
    """`*` or `table.*`: the target's columns (and a super table's tags) at creation."""
    star = item.this if isinstance(item, exp.Column) else item
    if any(star.args.get(k) for k in star.arg_types):
        message = "SELECT * with modifiers is not supported in a topic; list the columns instead"
        raise text.error(InvalidTopicQuery, message, item)
    if isinstance(item, exp.Column):
        _check_qualifier(item, scope, text)
    return [_Output(c.name, _quoted(c.name), offset, c) for c in scope.target.star()]


def _output(item: exp.Expr, span: tuple[int, int], text: _Text) -> _Output:
    """A SELECT list item, named as TDengine names it: by its alias, its column name, or
    else its text as written (the TDengine SQL of it when the text is unknown)."""
    expr = item.this if isinstance(item, exp.Alias) else item
    if isinstance(item, exp.Alias):
        name = item.alias.lower()
    elif isinstance(expr, exp.Column):
        name = expr.name.lower()
    elif span[1] > span[0]:
        name = text.sql[span[0] : span[1] + 1]
    else:
        name = expr.sql(dialect=TDengine)
    return _Output(name, expr, span[0])


def _check_names(outputs: list[_Output], text: _Text) -> None:
    seen: set[str] = set()
    for out in outputs:
        if out.name.startswith("__") or out.name in layout.RESERVED:
            raise text.error(
                InvalidTopicQuery,
                f"output column name {out.name!r} is reserved (names starting with __ are "
                "sqltopic's own); rename it with AS",
                out.offset,
            )
        if out.name.lower() in seen:
            raise text.error(
                InvalidTopicQuery,
                f"output column {out.name!r} appears twice; name one of them with AS",
                out.offset,
            )
        seen.add(out.name.lower())


def _bind_columns(tree: exp.Expr, scope: _Scope, text: _Text) -> set[str]:
    """Rewrite every column reference in `tree` to its quoted, unqualified, lower-case
    name (in place); return the names used."""
    return {_bind(col, scope, text).name for col in list(tree.find_all(exp.Column))}


def _bind(col: exp.Column, scope: _Scope, text: _Text) -> Column:
    _check_qualifier(col, scope, text)
    name, target = col.name.lower(), scope.target
    found = target.find(name)
    if found is None:
        raise text.error(NotFoundError, _unknown_column(name, scope), col)
    if scope.tags_only and found is not _TBNAME_COLUMN and not target.is_tag(name):
        raise text.error(
            InvalidTopicQuery,
            f"{name!r} is a data column: a stable topic's WHERE may use only tags, tbname and "
            "constants; filter data columns with a query topic (AS SELECT ... WHERE)",
            col,
        )
    col.this.set("this", name)
    col.this.set("quoted", True)
    for part in ("table", "db", "catalog"):
        col.set(part, None)
    return found


def _unknown_column(name: str, scope: _Scope) -> str:
    target = scope.target
    offered = [c.name for c in target.tags] if scope.tags_only else [c.name for c in target.star()]
    if target.kind == "child" and not scope.tags_only:
        offered += [c.name for c in target.tags]
    return f"column {name!r} does not exist in {target}; use one of {', '.join([*offered, TBNAME])}"


def _check_qualifier(col: exp.Column, scope: _Scope, text: _Text) -> None:
    table, db = col.table.lower(), col.text("db").lower()
    if not table:
        return
    if col.args.get("catalog") or table not in scope.qualifiers or db not in ("", scope.target.db):
        raise text.error(
            NotFoundError,
            f"unknown table {'.'.join(filter(None, [db, table]))!r} in "
            f"{col.sql(dialect=TDengine)}: the topic reads only {scope.target}",
            col,
        )


# --- translation to DuckDB ----------------------------------------------------------------


def _batch_select(outputs: list[_Output], where: exp.Expr | None) -> exp.Select:
    items: list[exp.Expr] = [_quoted(layout.VERSION)]
    items.append(exp.alias_(_quoted(TBNAME), layout.ROW_TABLE, quoted=True))
    items += [exp.alias_(o.expr, o.name, quoted=True, copy=False) for o in outputs]
    tree = exp.Select(expressions=items).from_(_relation(layout.BATCH))
    return tree.where(where) if where is not None else tree


def _translate(tree: exp.Select, probe: _Probe, precision: Precision, text: _Text) -> None:
    """Give `tree` TDengine's meaning in DuckDB (in place)."""
    _guard(tree)
    _map_functions(tree, text)
    for node in reversed(list(tree.find_all(*_COMPARISONS, exp.Between, exp.In))):
        _coerce(node, probe, precision, text)
    _double_literals(tree)


def _guard(tree: exp.Select) -> None:
    """Wrap what can fail on a row in TRY(...): NULL there instead of a failed poll."""
    for item in tree.expressions:
        if isinstance(item, exp.Alias) and _may_fail(item.this):
            item.set("this", _try(item.this))
    where = tree.args.get("where")
    if where is not None and _may_fail(where.this):
        where.set("this", _try(where.this))


def _may_fail(tree: exp.Expr) -> bool:
    return any(_node_may_fail(node) for node in tree.walk())


def _node_may_fail(node: exp.Expr) -> bool:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return False  # a negative constant
    if isinstance(node, exp.Func):
        return not isinstance(node, _NEVER_FAIL)
    return isinstance(node, _MAY_FAIL)


def _try(tree: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this="TRY", expressions=[tree])


def _map_functions(tree: exp.Expr, text: _Text) -> None:
    """TDengine functions whose DuckDB namesake means something else, innermost first."""
    for node in reversed(list(tree.find_all(exp.Func))):
        if isinstance(node, _PLAIN_NODES):
            continue
        rewrite = _REWRITES.get(_func_name(node, text))
        if rewrite is not None:
            new = rewrite(node)
            if new is not node:
                node.replace(new)


def _log(node: exp.Func) -> exp.Expr:
    """TDengine LOG(x) is ln(x) and LOG(x, b) the log base b; DuckDB's LOG(b, x)."""
    base = node.args.get("expression")
    return exp.Ln(this=node.this) if base is None else exp.Log(this=base, expression=node.this)


def _byte_length(node: exp.Func) -> exp.Expr:
    """TDengine LENGTH counts bytes (DuckDB's LENGTH counts characters)."""
    return exp.Anonymous(this="strlen", expressions=[node.this])


def _char_length(node: exp.Func) -> exp.Expr:
    return exp.Length(this=node.this)


def _concat(node: exp.Func) -> exp.Expr:
    """TDengine CONCAT is NULL when any argument is (DuckDB's skips NULLs); `||` is too."""
    return _pipes([_operand(a) for a in node.expressions])


def _concat_ws(node: exp.Func) -> exp.Expr:
    """CONCAT_WS(sep, a, b) as `a || sep || b`: NULL when any argument is, as TDengine."""
    sep, *args = (_operand(a) for a in node.expressions)
    joined: list[exp.Expr] = []
    for arg in args:
        joined += [sep.copy(), arg] if joined else [arg]
    return _pipes(joined)


def _pipes(args: list[exp.Expr]) -> exp.Expr:
    return functools.reduce(lambda a, b: exp.DPipe(this=a, expression=b), args)


def _operand(arg: exp.Expr) -> exp.Expr:
    atomic = isinstance(arg, (exp.Column, exp.Literal, exp.Func, exp.Paren))
    return arg if atomic else exp.Paren(this=arg)


def _cast(node: exp.Func) -> exp.Expr:
    """TDengine BINARY(n), VARCHAR(n) and NCHAR(n) are strings (DuckDB's BINARY is a BLOB)."""
    to = node.args.get("to")
    if isinstance(to, exp.DataType) and to.this in _STRING_TYPES:
        node.set("to", exp.DataType.build("VARCHAR"))
    return node


_STRING_TYPES = frozenset({
    exp.DataType.Type.BINARY, exp.DataType.Type.VARBINARY, exp.DataType.Type.NCHAR,
    exp.DataType.Type.NVARCHAR, exp.DataType.Type.CHAR, exp.DataType.Type.VARCHAR,
    exp.DataType.Type.TEXT,
})  # fmt: skip
_REWRITES: dict[str, Callable[[exp.Func], exp.Expr]] = {
    "log": _log,
    "length": _byte_length,
    "char_length": _char_length,
    "concat": _concat,
    "concat_ws": _concat_ws,
    "cast": _cast,
}


def _double_literals(tree: exp.Expr) -> None:
    """Decimal literals are DOUBLE in TDengine (DuckDB reads `1.5` as a DECIMAL)."""
    for lit in list(tree.find_all(exp.Literal)):
        decimal = not lit.is_string and any(c in lit.this for c in ".eE")
        if decimal and not isinstance(lit.parent, exp.DataTypeParam):
            lit.replace(exp.Cast(this=lit.copy(), to=exp.DataType.build("DOUBLE")))


# --- comparisons --------------------------------------------------------------------------


def _coerce(node: exp.Expr, probe: _Probe, precision: Precision, text: _Text) -> None:
    """TDengine's implicit conversions in one comparison (BETWEEN, IN), by operand type."""
    operands = _operands(node)
    types = probe.types(operands, text, node)
    binary = isinstance(node, _COMPARISONS)
    if binary and _is_literal(operands[0]) and pa.types.is_timestamp(types[1]):
        operands, types = operands[::-1], types[::-1]
    subject, kind = operands[0], types[0]
    if pa.types.is_timestamp(kind):
        for other in operands[1:]:
            if _is_literal(other):
                other.replace(_timestamp(other, precision, text))
    elif _is_text(kind) and any(_is_number(t) for t in types[1:]):
        subject.replace(_to_double(subject))
    elif _is_number(kind):
        for other, other_type in zip(operands[1:], types[1:], strict=True):
            if _is_text(other_type):
                other.replace(_to_double(other))


def _operands(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Between):
        return [node.this, node.args["low"], node.args["high"]]
    if isinstance(node, exp.In):
        return [node.this, *node.expressions]
    return [node.this, node.args["expression"]]


def _is_literal(node: exp.Expr) -> bool:
    inner = node.this if isinstance(node, exp.Neg) else node
    return isinstance(inner, exp.Literal) and (inner is node or not inner.is_string)


def _is_text(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def _is_number(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)
    )


def _to_double(node: exp.Expr) -> exp.Expr:
    """A string as a number for a comparison: NULL when it is not one (TDengine: 0)."""
    return exp.TryCast(this=node.copy(), to=exp.DataType.build("DOUBLE"))


def _timestamp(node: exp.Expr, precision: Precision, text: _Text) -> exp.Expr:
    """A literal compared with a timestamp, as a DuckDB timestamp literal."""
    value = _literal_epoch(node, precision)
    if value is None:
        raise text.error(
            SqlError,
            f"{node.sql(dialect=TDengine)} is not a timestamp: write an integer in the "
            f"database precision ({precision}) or a date-time 'YYYY-MM-DD HH:MM:SS[.fff][Z]'",
            node,
        )
    try:
        iso = _iso(value, precision)
    except (OverflowError, ValueError):
        raise text.error(SqlError, f"timestamp {value} is out of range", node) from None
    to = exp.DataType.build(_TS_LITERAL[precision], dialect="duckdb")
    return exp.Cast(this=exp.Literal.string(iso), to=to)


def _literal_epoch(node: exp.Expr, precision: Precision) -> int | None:
    """An integer literal as is, or a date-time string, in the database precision."""
    negative = isinstance(node, exp.Neg)
    lit = node.this if negative else node
    if lit.is_string:
        return _parse_datetime(lit.this, precision)
    try:
        value = int(lit.this)
    except ValueError:
        return None
    return -value if negative else value


def _parse_datetime(text: str, precision: Precision) -> int | None:
    """'2018-10-03 14:38:05[.123456789][Z|+08:00]' as an epoch in `precision` (UTC
    unless an offset is given); None if it is not a date-time."""
    match = _DATETIME.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                          int(second or 0), tzinfo=UTC)  # fmt: skip
    except ValueError:
        return None
    seconds = (moment - _EPOCH) // timedelta(seconds=1) - _zone_seconds(zone)
    digits = _DIGITS[precision]
    return seconds * _SCALE[precision] + int((fraction or "").ljust(digits, "0")[:digits])


def _zone_seconds(zone: str | None) -> int:
    if zone is None or zone.upper() == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    seconds = int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60
    return -seconds if zone[0] == "-" else seconds


def _iso(value: int, precision: Precision) -> str:
    seconds, fraction = divmod(value, _SCALE[precision])
    t = _EPOCH + timedelta(seconds=seconds)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"
        f".{fraction:0{_DIGITS[precision]}d}"
    )


# --- output types -------------------------------------------------------------------------


def _fix_output_types(
    tree: exp.Select, outputs: list[_Output], probe: _Probe, precision: Precision, text: _Text
) -> pa.Schema:
    """Give every output column a TDengine type (casting decimals to DOUBLE and other
    timestamps to the database precision); the exact Arrow schema of the outputs."""
    schema = _validate(tree, outputs, probe, text)
    cast = False
    for item, field, out in zip(tree.expressions[2:], schema, outputs, strict=True):
        if _column_type(field.type, precision, None) is not None:
            continue
        to = _cast_target(field.type, precision)
        if to is None:
            raise text.error(
                InvalidTopicQuery,
                f"output column {out.name!r} has type {field.type}, which no TDengine column "
                "type holds; CAST it, e.g. CAST(... AS BIGINT) or CAST(... AS VARCHAR(64))",
                out.offset,
            )
        item.set("this", exp.Cast(this=item.this, to=exp.DataType.build(to, dialect="duckdb")))
        cast = True
    return _user_schema(probe.check(tree, text)) if cast else schema


def _validate(tree: exp.Select, outputs: list[_Output], probe: _Probe, text: _Text) -> pa.Schema:
    """Bind each output and the WHERE alone (so an error points at the culprit), then
    the whole SELECT; the exact Arrow schema of the outputs."""
    for item, out in zip(tree.expressions[2:], outputs, strict=True):
        probe.types([item.this], text, out.offset)
    where = tree.args.get("where")
    if where is not None:
        probe.types([where.this], text, where.this)
    return _user_schema(probe.check(tree, text))


def _cast_target(dtype: pa.DataType, precision: Precision) -> str | None:
    if pa.types.is_decimal(dtype):
        return "DOUBLE"
    if pa.types.is_timestamp(dtype):
        return ColumnType("TIMESTAMP").duckdb(precision)
    return None


def _column_type(
    dtype: pa.DataType, precision: Precision, source: Column | None
) -> ColumnType | None:
    """The TDengine type of an Arrow output type (a plain column keeps its own)."""
    if source is not None and source.type.arrow(precision) == dtype:
        return source.type
    if _is_text(dtype):
        return ColumnType("VARCHAR", UNKNOWN_STRING_LENGTH)
    if pa.types.is_timestamp(dtype):
        exact = dtype.unit == precision and dtype.tz is None
        return ColumnType("TIMESTAMP") if exact else None
    name = _ARROW_TYPES.get(dtype)
    return ColumnType(name) if name is not None else None


def _output_columns(
    outputs: list[_Output], schema: pa.Schema, precision: Precision
) -> tuple[Column, ...]:
    columns = []
    for out, field in zip(outputs, schema, strict=True):
        kind = _column_type(field.type, precision, out.source)
        if kind is None:  # _fix_output_types made every type one of ours
            raise SqlError(f"output column {out.name!r} has no TDengine type ({field.type})")
        columns.append(Column(out.name, kind))
    return tuple(columns)


def _user_schema(schema: pa.Schema) -> pa.Schema:
    """A `select_sql` result schema without its leading `__version` and `__tbname`."""
    return pa.schema(list(schema)[2:])


# --- DuckDB -------------------------------------------------------------------------------


class _Probe:
    """An empty relation in a private DuckDB connection: binds expressions over it to
    learn their types and to validate them, without any data."""

    def __init__(self, relation: str, schema: pa.Schema) -> None:
        self._relation = relation
        self._con = duckdb.connect()
        self._con.execute("SET TimeZone='UTC'")
        self._con.execute("SET python_enable_replacements=false")
        self._con.register(relation, schema.empty_table())

    def close(self) -> None:
        self._con.close()

    def run(self, sql: str) -> pa.Schema:
        """The result schema of a query (raises duckdb.Error)."""
        return self._con.sql(sql).to_arrow_table().schema

    def check(self, tree: exp.Select, text: _Text) -> pa.Schema:
        """The result schema of `tree`, or a SqlError naming DuckDB's complaint."""
        try:
            return self.run(_duckdb_sql(tree, text))
        except duckdb.Error as err:
            raise _evaluation_error(err, text, None) from None

    def types(
        self, exprs: Sequence[exp.Expr], text: _Text, at: exp.Expr | int | None
    ) -> list[pa.DataType]:
        """The DuckDB types of expressions over the relation."""
        items = [exp.alias_(e.copy(), f"_{i}", quoted=True) for i, e in enumerate(exprs)]
        sql = _duckdb_sql(exp.Select(expressions=items).from_(_relation(self._relation)), text)
        try:
            return list(self.run(sql).types)
        except duckdb.Error as err:
            raise _evaluation_error(err, text, at) from None


def _evaluation_error(err: duckdb.Error, text: _Text, at: exp.Expr | int | None) -> SqlError:
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.error(
        SqlError,
        f"the topic cannot be evaluated: {detail}; check the types of the operands, or CAST them",
        at,
    )


def _duckdb_sql(tree: exp.Expr, text: _Text) -> str:
    try:
        return tree.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as err:
        raise text.error(SqlError, f"cannot translate the topic to DuckDB: {err}", tree) from None


def _quoted(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def _relation(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name, quoted=True))


_COMPILERS: dict[str, Callable[[CreateTopic, Catalog, str | None, _Text], _Compiled]] = {
    "query": _query_topic,
    "stable": _stable_topic,
    "database": _database_topic,
}
