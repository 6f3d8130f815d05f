"""Names in a topic: its output columns (`*` expanded, each named as TDengine names it)
and the binding of every column reference to a column or tag of the target."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sqltopic.errors import InvalidTopicQuery, NotFoundError
from sqltopic.sql import layout
from sqltopic.sql.dialect import TDengine
from sqltopic.sql.model import TBNAME, Column
from sqltopic.sql.topic.probe import quoted
from sqltopic.sql.topic.target import TBNAME_COLUMN, Target
from sqltopic.sql.topic.text import Text


@dataclass(slots=True)
class Output:
    """One output column of a query topic: its name, expression, and where it was written."""

    name: str
    expr: exp.Expr
    offset: int | None
    source: Column | None = None  # the column it copies unchanged, if a plain reference


@dataclass(frozen=True, slots=True)
class Scope:
    """What column references may name, and how they may be qualified."""

    target: Target
    qualifiers: frozenset[str]
    tags_only: bool = False


def outputs(select: exp.Select, scope: Scope, text: Text) -> tuple[list[Output], set[str]]:
    """The output columns (`*` expanded) with their column references bound, and the
    columns and tags they and the WHERE use."""
    found: list[Output] = []
    spans = text.select_items()
    if len(spans) != len(select.expressions):  # not as written: name items from the AST
        spans = [(o, o) for o in (text.offset(item) or 0 for item in select.expressions)]
    for item, span in zip(select.expressions, spans, strict=True):
        found += (
            _expand(item, span[0], scope, text) if _is_star(item) else [_output(item, span, text)]
        )
    _check_names(found, text)
    used = {o.name for o in found if o.source is not None}
    for out in found:
        used |= bind_columns(out.expr, scope, text)
        if out.source is None and isinstance(out.expr, exp.Column):
            out.source = scope.target.find(out.expr.name)
    where = select.args.get("where")
    if where is not None:
        used |= bind_columns(where.this, scope, text)
    return found, used - {TBNAME}


def _is_star(item: exp.Expr) -> bool:
    return isinstance(item, exp.Star) or (
        isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
    )


def _expand(item: exp.Expr, offset: int, scope: Scope, text: Text) -> list[Output]:
    """`*` or `table.*`: the target's columns (and a super table's tags) at creation."""
    star = item.this if isinstance(item, exp.Column) else item
    if any(star.args.get(k) for k in star.arg_types):
        message = "SELECT * with modifiers is not supported in a topic; list the columns instead"
        raise text.error(InvalidTopicQuery, message, item)
    if isinstance(item, exp.Column):
        _check_qualifier(item, scope, text)
    return [Output(c.name, quoted(c.name), offset, c) for c in scope.target.star()]


def _output(item: exp.Expr, span: tuple[int, int], text: Text) -> Output:
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
    return Output(name, expr, span[0])


def _check_names(found: list[Output], text: Text) -> None:
    seen: set[str] = set()
    for out in found:
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


def bind_columns(tree: exp.Expr, scope: Scope, text: Text) -> set[str]:
    """Rewrite every column reference in `tree` to its quoted, unqualified, lower-case
    name (in place); return the names used."""
    return {_bind(col, scope, text).name for col in list(tree.find_all(exp.Column))}


def _bind(col: exp.Column, scope: Scope, text: Text) -> Column:
    _check_qualifier(col, scope, text)
    name, target = col.name.lower(), scope.target
    found = target.find(name)
    if found is None:
        raise text.error(NotFoundError, _unknown_column(name, scope), col)
    if scope.tags_only and found is not TBNAME_COLUMN and not target.is_tag(name):
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


def _unknown_column(name: str, scope: Scope) -> str:
    target = scope.target
    offered = [c.name for c in target.tags] if scope.tags_only else [c.name for c in target.star()]
    if target.kind == "child" and not scope.tags_only:
        offered += [c.name for c in target.tags]
    return f"column {name!r} does not exist in {target}; use one of {', '.join([*offered, TBNAME])}"


def _check_qualifier(col: exp.Column, scope: Scope, text: Text) -> None:
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
