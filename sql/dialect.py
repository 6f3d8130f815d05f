"""The TDengine dialect: DuckDB's SQL plus TDengine's DDL, topic, user and SHOW statements.

Each statement DuckDB lacks gets an expression class here, a parse method matched on
its leading words, and a generator entry (sqlglot only generates custom classes through
`Generator.TRANSFORMS`). Statements parse to these expressions; `sql/parse.py` turns
them into the typed statements of `sql/statements.py`. Anything that would fall back to
an unparsed `exp.Command` is refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.generators.duckdb import DuckDBGenerator
from sqlglot.parsers.duckdb import DuckDBParser
from sqlglot.tokenizer_core import Token, TokenType

from sqltopic.errors import SqlError
from sqltopic.sql.functions.ticks import Duration, duration_sql
from sqltopic.sql.types import ColumnType
from sqltopic.sql.values import UNIT_NS

# Database options: the ones sqltopic uses, and TDengine storage options it accepts and
# ignores, so that TDengine scripts (e.g. `PRECISION 'ms' KEEP 3650 BUFFER 16`) run.
DB_OPTIONS = (
    "VGROUPS", "PRECISION", "WAL_LEVEL", "WAL_FSYNC_PERIOD", "WAL_RETENTION_PERIOD",
    "WAL_RETENTION_SIZE", "WAL_SEGMENT_SIZE", "WAL_ROLL_PERIOD",
)  # fmt: skip
IGNORED_DB_OPTIONS = (
    "BUFFER", "CACHEMODEL", "CACHESIZE", "COMP", "DURATION", "KEEP", "MAXROWS", "MINROWS",
    "PAGES", "PAGESIZE", "REPLICA", "SINGLE_STABLE", "STT_TRIGGER", "TABLE_PREFIX",
    "TABLE_SUFFIX", "TSDB_PAGESIZE", "KEEP_TIME_OFFSET", "STRICT", "DNODES",
)  # fmt: skip
# Clauses TDengine has after a SELECT that DuckDB's grammar lacks.
_TOPIC_REFUSED_TAILS = (
    "PARTITION", "SLIMIT", "SOFFSET", "INTERVAL", "SESSION", "STATE_WINDOW", "EVENT_WINDOW",
    "COUNT_WINDOW",
)  # fmt: skip
SHOW_KINDS = (
    "DATABASES", "STABLES", "TABLES", "TOPICS", "CONSUMERS", "SUBSCRIPTIONS", "USERS",
    "USER PRIVILEGES", "DNODES", "VGROUPS",
)  # fmt: skip
# The SHOW kinds a database may qualify (`SHOW db.TABLES`).
SHOW_IN_DATABASE = ("STABLES", "TABLES", "VGROUPS")
# Database privileges GRANT and REVOKE name (TDengine's priv_type, and ALL).
RIGHTS = ("READ", "WRITE", "ALL")
# TDengine's table_options: storage and rollup settings sqltopic accepts and ignores, so
# that TDengine scripts (`CREATE TABLE ... TTL 10 COMMENT 'x'`) run.
IGNORED_TABLE_OPTIONS = (
    "COMMENT", "TTL", "SMA", "WATERMARK", "MAX_DELAY", "ROLLUP", "DELETE_MARK", "KEEP",
)  # fmt: skip
# ALTER STABLE / ALTER TABLE actions, as written.
ALTER_ACTIONS = (
    "ADD COLUMN", "DROP COLUMN", "MODIFY COLUMN", "RENAME COLUMN", "ADD TAG", "DROP TAG",
    "MODIFY TAG", "RENAME TAG",
)  # fmt: skip


# --- expressions -----------------------------------------------------------------------


class TdCreateDatabase(exp.Expression):
    arg_types = {"this": True, "exists": False, "options": False}


class TdAlterDatabase(exp.Expression):
    arg_types = {"this": True, "options": True}


class TdOption(exp.Expression):
    """`NAME value`; `expression` is the value as written (a Literal or a Var)."""

    arg_types = {"this": True, "expression": True}


class TdColumnDef(exp.Expression):
    """`name type`; `kind` is the type as written, e.g. `VARCHAR(64)`, `INT UNSIGNED`."""

    arg_types = {"this": True, "kind": True}


class TdValue(exp.Expression):
    """A constant as written (a TAGS or SET TAG value): `12`, `'a'`, `NOW + 1s`, NULL.

    Kept as raw text and classified by the INSERT value rules (`sql/scan.py`), so a tag
    accepts exactly what a VALUES list does. `meta["start"]` is its offset in the statement.
    """

    arg_types = {"this": True}


class TdCreateStable(exp.Expression):
    arg_types = {"this": True, "exists": False, "columns": True, "tags": True}


class TdCreateTable(exp.Expression):
    arg_types = {
        "this": True, "exists": False, "columns": False, "using": False,
        "tag_names": False, "tag_values": False,
    }  # fmt: skip


class TdCreateTables(exp.Expression):
    """Several child tables in one CREATE TABLE (`expressions`: `TdCreateTable`s)."""

    arg_types = {"expressions": True}


class TdAlterStable(exp.Expression):
    """`action` is one of `ALTER_ACTIONS`; `table` is set when written ALTER TABLE (a super
    or normal table, told apart when it runs)."""

    arg_types = {
        "this": True, "action": True, "name": True, "kind": False, "new_name": False,
        "table": False,
    }  # fmt: skip


class TdSetTag(exp.Expression):
    arg_types = {"this": True, "tag": True, "expression": True}


class TdDrop(exp.Expression):
    """`kind` is DATABASE, TABLE, STABLE, TOPIC or USER."""

    arg_types = {"this": True, "kind": True, "exists": False, "force": False}


class TdCreateDnode(exp.Expression):
    """`this`: the endpoint as written (`'host:port'`, or `host PORT port` joined)."""

    arg_types = {"this": True}


class TdDropDnode(exp.Expression):
    """`this`: the dnode's id (a number) or its endpoint (a string)."""

    arg_types = {"this": True}


class TdDropConsumerGroup(exp.Expression):
    arg_types = {"this": True, "topic": True, "exists": False, "force": False}


class TdShow(exp.Expression):
    arg_types = {"this": True, "db": False}


class TdDescribe(exp.Expression):
    arg_types = {"this": True}


class TdUse(exp.Expression):
    arg_types = {"this": True}


class TdCreateTopic(exp.Expression):
    """`kind` is QUERY, STABLE or DATABASE; `meta` is WITH, ONLY or absent."""

    arg_types = {
        "this": True, "exists": False, "kind": True, "meta": False, "query": False,
        "target": False, "where": False,
    }  # fmt: skip


class TdUser(exp.Expression):
    """CREATE/ALTER USER name PASS 'secret' (`action` CREATE or ALTER)."""

    arg_types = {"this": True, "action": True, "password": True}


class TdGrant(exp.Expression):
    arg_types = {"this": True, "user": True, "revoke": False}


class TdGrantRights(exp.Expression):
    """GRANT/REVOKE READ, WRITE or ALL ON db.tb | db.* | *.* [WITH condition] TO user:
    `rights` are the words, `db` and `this` (the table) an Identifier or a Star."""

    arg_types = {
        "this": True, "rights": True, "db": True, "condition": False, "user": True,
        "revoke": False,
    }  # fmt: skip


# --- parsing ---------------------------------------------------------------------------


class TDengineParser(DuckDBParser):
    # TDengine's DATABASE() is a function (the current database), not only a keyword.
    FUNC_TOKENS = {*DuckDBParser.FUNC_TOKENS, TokenType.DATABASE}
    RANGE_PARSERS = {
        **DuckDBParser.RANGE_PARSERS,
        TokenType.RLIKE: lambda self, this: self.expression(
            exp.RegexpLike(this=this, expression=self._parse_bitwise())
        ),
        TokenType.SOUNDS_LIKE: lambda self, this: exp.Not(
            this=self.expression(exp.RegexpLike(this=this, expression=self._parse_bitwise()))
        ),
    }

    STATEMENT_PARSERS = {
        **DuckDBParser.STATEMENT_PARSERS,
        TokenType.CREATE: lambda self: self._td_create(),
        TokenType.ALTER: lambda self: self._td_alter(),
        TokenType.DROP: lambda self: self._td_drop(),
        TokenType.SHOW: lambda self: self._td_show(),
        TokenType.DESCRIBE: lambda self: self._td_describe(),
        TokenType.DESC: lambda self: self._td_describe(),
        TokenType.USE: lambda self: self._td_use(),
        TokenType.GRANT: lambda self: self._td_grant(revoke=False),
        TokenType.REVOKE: lambda self: self._td_grant(revoke=True),
    }

    # durations ------------------------------------------------------------------------

    PRIMARY_PARSERS = {
        **DuckDBParser.PRIMARY_PARSERS,
        TokenType.NUMBER: lambda self, token: self._td_number(token),
    }

    def _td_number(self, token: Token) -> exp.Expression:
        """A number, or a TDengine duration, `36500d`: a whole number and a unit letter
        with no space between (the tokenizer splits them), as a `Duration`."""
        unit = self._curr
        number: exp.Expression = DuckDBParser.PRIMARY_PARSERS[TokenType.NUMBER](self, token)  # type: ignore[no-untyped-call]
        if (
            unit is None
            or unit.token_type != TokenType.VAR
            or unit.start != token.end + 1
            or unit.text.lower() not in UNIT_NS
            or not token.text.isdigit()
        ):
            return number
        self._advance()
        node = Duration(this=exp.Literal.number(token.text), unit=unit.text.lower())
        node.update_positions(token)
        return node

    # words --------------------------------------------------------------------------

    def _td_exists(self, *, not_: bool) -> bool:
        words = ("IF", "NOT", "EXISTS") if not_ else ("IF", "EXISTS")
        return bool(self._match_text_seq(*words))

    def _td_name(self, what: str) -> exp.Identifier:
        ident = self._parse_id_var(any_token=True)
        if not isinstance(ident, exp.Identifier):
            self.raise_error(f"expected a {what} name")
            return exp.to_identifier("?")
        return ident

    def _td_table(self, what: str = "table") -> exp.Table:
        first = self._td_name(what)
        if self._match(TokenType.DOT):
            return exp.Table(this=self._td_name(what), db=first)
        return exp.Table(this=first)

    def _td_expect(self, *words: str) -> None:
        if not self._match_text_seq(*words):
            self.raise_error(f"expected {' '.join(words)}")

    # CREATE ---------------------------------------------------------------------------

    def _td_create(self) -> exp.Expression:
        for words, method in self._TD_CREATE:
            if self._match_text_seq(*words):
                return method(self)
        self.raise_error(
            "unsupported CREATE; use CREATE DATABASE, STABLE, TABLE, TOPIC, USER or DNODE"
        )
        return exp.Command(this="CREATE")

    def _td_create_database(self) -> exp.Expression:
        exists = self._td_exists(not_=True)
        name = self._td_name("database")
        return TdCreateDatabase(this=name, exists=exists, options=self._td_db_options())

    def _td_db_options(self) -> list[TdOption]:
        options: list[TdOption] = []
        known = DB_OPTIONS + IGNORED_DB_OPTIONS
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            word = self._curr.text.upper()
            if word not in known:
                self.raise_error(
                    f"unknown database option {self._curr.text}; use one of {', '.join(DB_OPTIONS)}"
                )
                return options
            self._advance()
            options.append(TdOption(this=exp.var(word), expression=self._td_option_value()))
        return options

    def _td_option_value(self) -> exp.Expression:
        negative = self._match(TokenType.DASH)
        if self._match(TokenType.NUMBER):
            text = ("-" if negative else "") + self._prev.text
            # TDengine durations and lists (`KEEP 3650d,3650d`) run on as words
            while self._curr and self._is_connected() and self._curr.token_type in (
                TokenType.VAR, TokenType.NUMBER, TokenType.COMMA,
            ):  # fmt: skip
                self._advance()
                text += self._prev.text
            return exp.Literal.number(text) if text.lstrip("-").isdigit() else exp.var(text)
        if self._match(TokenType.STRING):
            return exp.Literal.string(self._prev.text)
        self.raise_error("expected a number or a quoted string as the option value")
        return exp.Literal.number(0)

    def _td_create_stable(self) -> exp.Expression:
        exists = self._td_exists(not_=True)
        table = self._td_table("super table")
        columns = self._td_column_defs()
        self._td_expect("TAGS")
        tags = self._td_column_defs()
        self._td_table_options()
        return TdCreateStable(this=table, exists=exists, columns=columns, tags=tags)

    def _td_create_table(self) -> exp.Expression:
        """A normal table; a super table (TDengine's `CREATE TABLE s (...) TAGS (...)`); or
        one or more child tables (`a USING s TAGS (...) [IF NOT EXISTS] b USING s ...`)."""
        exists = self._td_exists(not_=True)
        table = self._td_table()
        if not self._match_text_seq("USING"):
            columns = self._td_column_defs()
            if self._match_text_seq("TAGS"):
                tags = self._td_column_defs()
                self._td_table_options()
                return TdCreateStable(this=table, exists=exists, columns=columns, tags=tags)
            self._td_table_options()
            return TdCreateTable(this=table, exists=exists, columns=columns)
        children = [self._td_child_table(table, exists)]
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            exists = self._td_exists(not_=True)
            table = self._td_table()
            self._td_expect("USING")
            children.append(self._td_child_table(table, exists))
        return children[0] if len(children) == 1 else TdCreateTables(expressions=children)

    def _td_child_table(self, table: exp.Table, exists: bool) -> TdCreateTable:
        """`... USING stb [(tag, ...)] TAGS (value, ...) [options]`, after USING."""
        using = self._td_table("super table")
        names = None
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            names = self._parse_wrapped_csv(lambda: self._td_name("tag"))
        self._td_expect("TAGS")
        values = self._parse_wrapped_csv(self._td_value)
        self._td_table_options()
        return TdCreateTable(
            this=table, exists=exists, using=using, tag_names=names, tag_values=values
        )

    def _td_table_options(self) -> None:
        """Skip TDengine's table options (see `IGNORED_TABLE_OPTIONS`)."""
        while self._curr and self._curr.text.upper() in IGNORED_TABLE_OPTIONS:
            self._advance()
            if self._curr and self._curr.token_type == TokenType.L_PAREN:
                self._parse_wrapped_csv(self._td_value)  # SMA(c1, c2), ROLLUP(avg)
            elif self._match(TokenType.STRING) or self._match(TokenType.VAR):
                pass  # COMMENT 'text'; an option spelled as a word
            else:
                self._td_option_value()  # TTL 10, WATERMARK 5s, MAX_DELAY 1m,2m

    def _td_value(self) -> exp.Expression | None:
        """A constant up to the next `,` or `)` (or the end): see `TdValue`."""
        first = self._curr
        depth = 0
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            kind = self._curr.token_type
            if depth == 0 and kind in (TokenType.COMMA, TokenType.R_PAREN):
                break
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(kind, 0)
            self._advance()
        if first is None or self._curr is first:
            self.raise_error("expected a value")
            return None
        node = TdValue(this=self.sql[first.start : self._prev.end + 1])
        node.meta["start"] = first.start  # meta: positions do not make trees unequal
        return node

    def _td_column_defs(self) -> list[TdColumnDef]:
        if not self._match(TokenType.L_PAREN):
            self.raise_error("expected ( and a list of columns")
            return []
        defs = [self._td_column_def()]
        while self._match(TokenType.COMMA):
            defs.append(self._td_column_def())
        if not self._match(TokenType.R_PAREN):
            self.raise_error("expected , or ) after a column definition")
        return defs

    def _td_column_def(self) -> TdColumnDef:
        name = self._td_name("column")
        start = self._curr
        words: list[str] = []
        depth = 0
        while self._curr:
            kind = self._curr.token_type
            if depth == 0 and kind in (TokenType.COMMA, TokenType.R_PAREN):
                break
            depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(kind, 0)
            words.append(self._curr.text)
            self._advance()
        if not words:
            self.raise_error(f"expected a type for column {name.name}")
        text = " ".join(words).replace(" ( ", "(").replace(" )", ")").replace("( ", "(")
        self._td_check_type(text, start)
        return TdColumnDef(this=name, kind=exp.var(text.upper()))

    def _td_check_type(self, text: str, token: Token | None) -> None:
        try:
            ColumnType.parse(text)
        except SqlError as err:
            self.raise_error(err.message, token or self._prev)

    def _td_create_topic(self) -> exp.Expression:
        exists = self._td_exists(not_=True)
        name = self._td_name("topic")
        meta = None
        if self._match_text_seq("WITH", "META"):
            meta = "WITH"
        elif self._match_text_seq("ONLY", "META"):
            meta = "ONLY"
        self._td_expect("AS")
        args: dict[str, Any] = {"this": name, "exists": exists, "meta": meta}
        if self._match_text_seq("STABLE"):
            table = self._td_table("super table")
            return TdCreateTopic(kind="STABLE", target=table, where=self._parse_where(), **args)
        if self._match(TokenType.DATABASE):
            return TdCreateTopic(kind="DATABASE", target=self._td_name("database"), **args)
        if meta:
            self.raise_error(f"{meta} META applies to STABLE and DATABASE topics only")
        event_window = self._td_find_word("EVENT_WINDOW")
        query = self._parse_statement() if event_window is None else exp.select("*")
        if query is None:
            self.raise_error("expected SELECT, STABLE or DATABASE after AS")
        node = TdCreateTopic(kind="QUERY", query=query, **args)
        word = self._curr.text.upper().split()[0] if self._curr else ""
        if event_window is not None or word in _TOPIC_REFUSED_TAILS:
            # TDengine clauses DuckDB does not parse: refused as the invalid topic queries
            # they are, with their position, rather than as syntax errors. (EVENT_WINDOW's
            # START WITH would read as a hierarchical query: it is looked for first.)
            start = event_window if event_window is not None else self._curr.start
            node.meta["refused"] = ("EVENT_WINDOW" if event_window is not None else word, start)
            while self._curr and self._curr.token_type != TokenType.SEMICOLON:
                self._advance()
        return node

    def _td_find_word(self, word: str) -> int | None:
        """The offset of `word` among the statement's remaining tokens, if any."""
        for token in self._tokens[self._index :]:
            if token.token_type == TokenType.SEMICOLON:
                return None
            if token.token_type == TokenType.VAR and token.text.upper() == word:
                return token.start
        return None

    def _td_create_user(self) -> exp.Expression:
        return self._td_user("CREATE")

    def _td_user(self, action: str) -> exp.Expression:
        name = self._td_name("user")
        self._td_expect("PASS")
        if not self._match(TokenType.STRING):
            self.raise_error("expected the password as a quoted string")
        return TdUser(this=name, action=action, password=exp.Literal.string(self._prev.text))

    def _td_create_dnode(self) -> exp.Expression:
        """TDengine's `CREATE DNODE {'host:port' | host PORT port}`."""
        if self._match(TokenType.STRING):
            return TdCreateDnode(this=exp.Literal.string(self._prev.text))
        if not self._curr:
            self.raise_error("expected the dnode's endpoint, e.g. CREATE DNODE 'host:6030'")
            return exp.Command(this="CREATE")
        parts = [self._curr.text]  # a host name: words and dots (h1.example.com)
        self._advance()
        while self._curr and self._curr.token_type == TokenType.DOT and self._next:
            self._advance()
            parts += [".", self._curr.text]
            self._advance()
        self._td_expect("PORT")
        if not self._match(TokenType.NUMBER):
            self.raise_error("expected the port as a number, e.g. CREATE DNODE h1 PORT 6030")
        port = self._prev.text
        return TdCreateDnode(this=exp.Literal.string(f"{''.join(parts)}:{port}"))

    def _td_dnode_ref(self) -> exp.Expression:
        if self._match(TokenType.NUMBER):
            return exp.Literal.number(self._prev.text)
        if self._match(TokenType.STRING):
            return exp.Literal.string(self._prev.text)
        self.raise_error("expected the dnode's id or 'endpoint' (SHOW DNODES lists them)")
        return exp.Literal.number(0)

    _TD_CREATE: tuple[tuple[tuple[str, ...], Callable[[Any], exp.Expression]], ...] = (
        (("DATABASE",), _td_create_database),
        (("DNODE",), _td_create_dnode),
        (("STABLE",), _td_create_stable),
        (("TABLE",), _td_create_table),
        (("TOPIC",), _td_create_topic),
        (("USER",), _td_create_user),
    )

    # ALTER ----------------------------------------------------------------------------

    def _td_alter(self) -> exp.Expression:
        if self._match(TokenType.DATABASE):
            name = self._td_name("database")
            options = self._td_db_options()
            if not options:
                self.raise_error("ALTER DATABASE needs an option, e.g. WAL_LEVEL 2")
            return TdAlterDatabase(this=name, options=options)
        if self._match_text_seq("STABLE"):
            return self._td_alter_stable()
        if self._match(TokenType.TABLE):
            table = self._td_table()
            altered = self._td_alter_action(table, via_table=True)
            if altered is not None:
                return altered
            self._td_expect("SET", "TAG")
            tag = self._td_name("tag")
            if not self._match(TokenType.EQ):
                self.raise_error("expected = after the tag name")
            return TdSetTag(this=table, tag=tag, expression=self._td_value())
        if self._match_text_seq("USER"):
            return self._td_user("ALTER")
        self.raise_error("unsupported ALTER; use ALTER DATABASE, STABLE, TABLE or USER")
        return exp.Command(this="ALTER")

    def _td_alter_stable(self) -> exp.Expression:
        table = self._td_table("super table")
        altered = self._td_alter_action(table, via_table=False)
        if altered is None:
            self.raise_error(f"unsupported ALTER STABLE; use {', '.join(ALTER_ACTIONS)}")
            return exp.Command(this="ALTER")
        return altered

    def _td_alter_action(self, table: exp.Table, *, via_table: bool) -> TdAlterStable | None:
        """`ADD COLUMN c type`, `RENAME TAG a b`, ... (`ALTER_ACTIONS`), or None."""
        for action in ALTER_ACTIONS:
            if self._match_text_seq(*action.split()):
                name = self._td_name(action.split()[1].lower())
                args: dict[str, Any] = {"this": table, "action": action, "name": name}
                if action.startswith(("ADD", "MODIFY")):
                    args["kind"] = self._td_column_type()
                elif action.startswith("RENAME"):
                    args["new_name"] = self._td_name(action.split()[1].lower())
                return TdAlterStable(table=via_table, **args)
        return None

    def _td_column_type(self) -> exp.Expression:
        start = self._curr
        words: list[str] = []
        while self._curr and self._curr.token_type != TokenType.SEMICOLON:
            words.append(self._curr.text)
            self._advance()
        if not words:
            self.raise_error("expected a type")
        text = " ".join(words).replace(" ( ", "(").replace(" )", ")")
        self._td_check_type(text, start)
        return exp.var(text.upper())

    # DROP, SHOW, DESCRIBE, USE, GRANT ---------------------------------------------------

    def _td_drop(self) -> exp.Expression:
        if self._match_text_seq("CONSUMER", "GROUP"):
            exists = self._td_exists(not_=False)
            force = self._match_text_seq("FORCE")
            group = self._td_name("consumer group")
            self._td_expect("ON")
            topic = self._td_name("topic")
            return TdDropConsumerGroup(this=group, topic=topic, exists=exists, force=force)
        if self._match_text_seq("DNODE"):
            ref = self._td_dnode_ref()
            if self._match_text_seq("FORCE") or self._match_text_seq("UNSAFE"):
                self.raise_error(
                    "DROP DNODE ... FORCE/UNSAFE is not supported: a dnode is dropped once it "
                    "hosts no vgroups (drop their databases first)"
                )
            return TdDropDnode(this=ref)
        for kind in ("DATABASE", "STABLE", "TABLE", "TOPIC", "USER"):
            if self._match_text_seq(kind):
                exists = self._td_exists(not_=False)
                force = kind == "TOPIC" and self._match_text_seq("FORCE")
                target = self._td_table() if kind in ("STABLE", "TABLE") else self._td_name(kind)
                return TdDrop(this=target, kind=kind, exists=exists, force=force)
        self.raise_error(
            "unsupported DROP; use DROP DATABASE, STABLE, TABLE, TOPIC, USER, DNODE or CONSUMER "
            "GROUP"
        )
        return exp.Command(this="DROP")

    def _td_show(self) -> exp.Expression:
        db = None
        if self._next and self._next.token_type == TokenType.DOT:
            db = self._td_name("database")
            self._match(TokenType.DOT)
        if not db and self._match_text_seq("USER", "PRIVILEGES"):
            return TdShow(this=exp.var("USER PRIVILEGES"))
        word = self._curr.text.upper() if self._curr else ""
        if word not in SHOW_KINDS or (db and word not in SHOW_IN_DATABASE):
            self.raise_error(f"unsupported SHOW; use SHOW {', '.join(SHOW_KINDS)}")
        self._advance()
        return TdShow(this=exp.var(word), db=db)

    def _td_describe(self) -> exp.Expression:
        return TdDescribe(this=self._td_table())

    def _td_use(self) -> exp.Expression:
        return TdUse(this=self._td_name("database"))

    def _td_grant(self, *, revoke: bool) -> exp.Expression:
        if not self._match_text_seq("SUBSCRIBE"):
            return self._td_grant_rights(revoke=revoke)
        self._td_expect("ON")
        topic = self._td_name("topic")
        self._td_expect("FROM" if revoke else "TO")
        return TdGrant(this=topic, user=self._td_name("user"), revoke=revoke)

    def _td_grant_rights(self, *, revoke: bool) -> exp.Expression:
        rights = [self._td_right()]
        while self._match(TokenType.COMMA):
            rights.append(self._td_right())
        self._td_expect("ON")
        db = self._td_level("database")
        if not self._match(TokenType.DOT):
            self.raise_error("expected db.table, db.* or *.* after ON")
        table = self._td_level("table")
        condition = None
        if self._match(TokenType.WITH):
            if self._curr is not None and self._curr.text.upper() in ("TO", "FROM"):
                self.raise_error("expected a tag condition after WITH")
            condition = self._parse_disjunction()
        self._td_expect("FROM" if revoke else "TO")
        return TdGrantRights(
            this=table, rights=rights, db=db, condition=condition,
            user=self._td_name("user"), revoke=revoke,
        )  # fmt: skip

    def _td_right(self) -> exp.Expression:
        word = self._curr.text.upper() if self._curr else ""
        if word not in RIGHTS:
            self.raise_error(
                "expected SUBSCRIBE, or database privileges READ, WRITE or ALL "
                "(e.g. GRANT READ, WRITE ON power.* TO alice)"
            )
        self._advance()
        if word == "ALL":
            self._match_text_seq("PRIVILEGES")
        return exp.var(word)

    def _td_level(self, what: str) -> exp.Expression:
        if self._match(TokenType.STAR):
            return exp.Star()
        return self._td_name(what)


# --- generating ----------------------------------------------------------------------


def _exists(e: exp.Expression, words: str) -> str:
    return f" {words}" if e.args.get("exists") else ""


def _options(gen: Any, e: exp.Expression) -> str:
    return "".join(
        f" {o.this.name} {gen.sql(o, 'expression')}" for o in e.args.get("options") or []
    )


def _defs(defs: list[TdColumnDef]) -> str:
    return "(" + ", ".join(f"{d.this.sql()} {d.args['kind'].name}" for d in defs) + ")"


def _create_table_sql(gen: Any, e: TdCreateTable) -> str:
    head = f"CREATE TABLE{_exists(e, 'IF NOT EXISTS')} {gen.sql(e, 'this')}"
    if not e.args.get("using"):
        return f"{head} {_defs(e.args['columns'])}"
    names = e.args.get("tag_names")
    named = f" ({', '.join(gen.sql(n) for n in names)})" if names else ""
    values = ", ".join(gen.sql(v) for v in e.args["tag_values"])
    return f"{head} USING {gen.sql(e, 'using')}{named} TAGS ({values})"


def _create_topic_sql(gen: Any, e: TdCreateTopic) -> str:
    meta = f" {e.args['meta']} META" if e.args.get("meta") else ""
    head = f"CREATE TOPIC{_exists(e, 'IF NOT EXISTS')} {gen.sql(e, 'this')}{meta} AS"
    kind = e.args["kind"]
    if kind == "QUERY":
        return f"{head} {gen.sql(e, 'query')}"
    if kind == "DATABASE":
        return f"{head} DATABASE {gen.sql(e, 'target')}"
    return f"{head} STABLE {gen.sql(e, 'target')}{gen.sql(e, 'where')}"


def _alter_stable_sql(gen: Any, e: TdAlterStable) -> str:
    tail = e.args["kind"].name if e.args.get("kind") else ""
    if e.args.get("new_name"):
        tail = gen.sql(e, "new_name")
    what = "TABLE" if e.args.get("table") else "STABLE"
    text = f"ALTER {what} {gen.sql(e, 'this')} {e.args['action']} {gen.sql(e, 'name')}"
    return f"{text} {tail}" if tail else text


def _drop_sql(gen: Any, e: TdDrop) -> str:
    force = " FORCE" if e.args.get("force") else ""
    return f"DROP {e.args['kind']}{_exists(e, 'IF EXISTS')}{force} {gen.sql(e, 'this')}"


def _drop_group_sql(gen: Any, e: TdDropConsumerGroup) -> str:
    force = " FORCE" if e.args.get("force") else ""
    exists = _exists(e, "IF EXISTS")
    return f"DROP CONSUMER GROUP{exists}{force} {gen.sql(e, 'this')} ON {gen.sql(e, 'topic')}"


def _show_sql(gen: Any, e: TdShow) -> str:
    db = f"{gen.sql(e, 'db')}." if e.args.get("db") else ""
    return f"SHOW {db}{e.this.name}"


def _grant_rights_sql(gen: Any, e: TdGrantRights) -> str:
    rights = ", ".join(r.name for r in e.args["rights"])
    level = f"{gen.sql(e, 'db')}.{gen.sql(e, 'this')}"
    condition = f" WITH {gen.sql(e, 'condition')}" if e.args.get("condition") else ""
    verb, to = ("REVOKE", "FROM") if e.args.get("revoke") else ("GRANT", "TO")
    return f"{verb} {rights} ON {level}{condition} {to} {gen.sql(e, 'user')}"


def _grant_sql(gen: Any, e: TdGrant) -> str:
    if e.args.get("revoke"):
        return f"REVOKE SUBSCRIBE ON {gen.sql(e, 'this')} FROM {gen.sql(e, 'user')}"
    return f"GRANT SUBSCRIBE ON {gen.sql(e, 'this')} TO {gen.sql(e, 'user')}"


class TDengineGenerator(DuckDBGenerator):
    TRANSFORMS = {
        **DuckDBGenerator.TRANSFORMS,
        TdCreateDatabase: lambda g, e: (
            f"CREATE DATABASE{_exists(e, 'IF NOT EXISTS')} {g.sql(e, 'this')}{_options(g, e)}"
        ),
        TdAlterDatabase: lambda g, e: f"ALTER DATABASE {g.sql(e, 'this')}{_options(g, e)}",
        TdCreateStable: lambda g, e: (
            f"CREATE STABLE{_exists(e, 'IF NOT EXISTS')} {g.sql(e, 'this')} "
            f"{_defs(e.args['columns'])} TAGS {_defs(e.args['tags'])}"
        ),
        TdCreateTable: _create_table_sql,
        TdCreateTables: lambda g, e: (
            "CREATE TABLE "
            + " ".join(_create_table_sql(g, t).removeprefix("CREATE TABLE ") for t in e.expressions)
        ),
        TdAlterStable: _alter_stable_sql,
        TdSetTag: lambda g, e: (
            f"ALTER TABLE {g.sql(e, 'this')} SET TAG {g.sql(e, 'tag')} = {g.sql(e, 'expression')}"
        ),
        TdDrop: _drop_sql,
        TdDropConsumerGroup: _drop_group_sql,
        TdCreateDnode: lambda g, e: f"CREATE DNODE {g.sql(e, 'this')}",
        TdDropDnode: lambda g, e: f"DROP DNODE {g.sql(e, 'this')}",
        TdShow: _show_sql,
        TdDescribe: lambda g, e: f"DESCRIBE {g.sql(e, 'this')}",
        TdUse: lambda g, e: f"USE {g.sql(e, 'this')}",
        TdCreateTopic: _create_topic_sql,
        TdUser: lambda g, e: (
            f"{e.args['action']} USER {g.sql(e, 'this')} PASS {g.sql(e, 'password')}"
        ),
        TdGrant: _grant_sql,
        TdGrantRights: _grant_rights_sql,
        TdValue: lambda g, e: e.name,
        Duration: duration_sql,
    }


class TDengineTokenizer(DuckDB.Tokenizer):
    # As in TDengine (and MySQL): "..." is a string like '...', `...` an identifier, and
    # inside a string a backslash escapes, as does a doubled quote.
    QUOTES = ["'", '"']
    IDENTIFIERS = ["`"]
    STRING_ESCAPES = ["'", '"', "\\"]
    # no `\xHH` / `\0NN` codes: TDengine keeps `\x` as written (see TDengine.UNESCAPED_SEQUENCES)
    NUMERIC_ESCAPES: ClassVar[dict[str, tuple[int, int, int, int]]] = {}
    # TDengine's regular expression operators (16-operators.md): MATCH as DuckDB's
    # REGEXP (RLIKE), NMATCH its negation (a token DuckDB's SQL does not use otherwise).
    KEYWORDS: ClassVar[dict[str, TokenType]] = {
        **DuckDB.Tokenizer.KEYWORDS,
        "MATCH": TokenType.RLIKE,
        "NMATCH": TokenType.SOUNDS_LIKE,
    }


class TDengine(DuckDB):
    """sqltopic's dialect: `sqlglot.parse(sql, read=TDengine)`."""

    # TDengine's string escapes (its `trimString`), the same as INSERT values read them
    # (`sql/scan.py`): `\%`, `\_` (LIKE) and `\x` keep their backslash.
    UNESCAPED_SEQUENCES = {
        "\\n": "\n", "\\r": "\r", "\\t": "\t", "\\%": "\\%", "\\_": "\\_", "\\x": "\\x",
    }  # fmt: skip

    Tokenizer = TDengineTokenizer
    Parser = TDengineParser
    Generator = TDengineGenerator
