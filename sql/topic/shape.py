"""The shape of a query topic's SELECT: one SELECT, only the clauses a topic allows, and
one real table in FROM without a TDengine window after it."""

from __future__ import annotations

from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery, TopicNotStateless
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.topic.rules import CLAUSES, SELECT_PARTS, SUBQUERY, TABLE_PARTS, WINDOW_CLAUSES
from sqltopic.sql.topic.text import Text


def check_root(root: exp.Expr, text: Text) -> exp.Select:
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


def _check_clauses(select: exp.Select, text: Text) -> None:
    for key, (clause, why) in CLAUSES.items():
        value = select.args.get(key)
        if value:
            at = text.keyword(clause.split()[0]) if key != "joins" else None
            node = value[0] if isinstance(value, list) else value
            message = f"{clause} is not allowed in a topic: {why}"
            raise text.error(InvalidTopicQuery, message, node if at is None else at)
    extra = sorted(
        k for k, v in select.args.items() if v and k not in SELECT_PARTS | CLAUSES.keys()
    )
    if extra:
        clause = extra[0].strip("_").upper()
        raise text.error(
            InvalidTopicQuery, f"{clause} is not supported in a topic", text.keyword("SELECT")
        )


def check_from(select: exp.Select, text: Text) -> exp.Table:
    """The one real table in FROM; a TDengine window after it needs state."""
    from_ = select.args.get("from_")
    source = from_.this if from_ is not None else None
    if source is None:
        raise text.error(
            InvalidTopicQuery, "a topic reads one table: add FROM <table>", text.keyword("SELECT")
        )
    if isinstance(source, (exp.Query, exp.Subquery)):
        raise text.error(InvalidTopicQuery, SUBQUERY, source)
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        raise text.error(
            InvalidTopicQuery,
            "a topic reads one real table (a super, child or normal table), "
            f"not {source.sql(dialect=TDengine)}",
            source,
        )
    _check_table_parts(source, text)
    return source


def _check_table_parts(table: exp.Table, text: Text) -> None:
    alias = table.args.get("alias")
    if alias is not None and alias.name.lower() in WINDOW_CLAUSES:
        raise text.error(
            TopicNotStateless,
            f"{alias.name.upper()} windows are not allowed in a topic: a window aggregates "
            "rows, which needs state, and a topic evaluates each row on its own; query the "
            "windows with SELECT instead",
            alias,
        )
    extra = sorted(k for k, v in table.args.items() if v and k not in TABLE_PARTS)
    if extra or (alias is not None and alias.args.get("columns")):
        what = extra[0].upper() if extra else "column aliases"
        raise text.error(
            InvalidTopicQuery,
            f"{what} is not supported in a topic's FROM: name the table alone, [db.]table",
            table,
        )


def parts(select: exp.Select) -> list[exp.Expr]:
    """The expressions of the SELECT list (without aliases) and of the WHERE."""
    found = [e.this if isinstance(e, exp.Alias) else e for e in select.expressions]
    where = select.args.get("where")
    return found + ([where.this] if where is not None else [])
