"""What an ad hoc SELECT means in TDengine before it is DuckDB's: result columns named
as TDengine names them, and TDengine's system information functions answered by the
server (DuckDB's namesakes would answer about DuckDB: `CURRENT_USER()` is 'duckdb').

TDengine names an unaliased result column by the expression as written (`log(8,2)`,
`count(*)`), not by the form DuckDB runs (`strlen(c2)` for `length(c2)`).
"""

from __future__ import annotations

from importlib import metadata

from sqlglot import exp

from sqltopic.server.common.result import Session
from sqltopic.sql.topic.text import Text

# TDengine's SERVER_STATUS(): 1 when the server that answers is up.
SERVER_UP = 1


def name_items(tree: exp.Expr, text: Text) -> None:
    """Alias each unaliased computed item of the top-level SELECT list (in place) with
    its text as written; a column keeps its own name, `*` its columns'."""
    if not isinstance(tree, exp.Select) or tree.args.get("with_") is not None:
        return
    spans = text.select_items()
    if len(spans) != len(tree.expressions):  # not the text of this list: leave DuckDB's
        return
    for item, (start, end) in zip(list(tree.expressions), spans, strict=True):
        if isinstance(item, (exp.Alias, exp.Column, exp.Star)) or end <= start:
            continue
        item.replace(exp.alias_(item.copy(), text.sql[start : end + 1], quoted=True))


def system_functions(tree: exp.Expr, session: Session) -> None:
    """CURRENT_USER(), USER(), DATABASE(), SERVER_VERSION(), CLIENT_VERSION() and
    SERVER_STATUS() as TDengine answers them, as constants (in place)."""
    for node in list(tree.find_all(exp.CurrentUser, exp.Anonymous)):
        if isinstance(node, exp.Anonymous) and node.expressions:
            continue  # called with arguments: not one of these
        name = "current_user" if isinstance(node, exp.CurrentUser) else node.name.lower()
        value = _answer(name, session)
        if value is not None:
            node.replace(value)


def _answer(name: str, session: Session) -> exp.Expr | None:
    if name in ("current_user", "user"):
        return exp.Literal.string(session.user)
    if name == "database":
        return exp.Literal.string(session.db) if session.db else exp.Null()
    if name in ("server_version", "client_version"):
        return exp.Literal.string(_version())
    if name == "server_status":
        return exp.Literal.number(SERVER_UP)
    return None


def _version() -> str:
    try:
        return metadata.version("sqltopic")
    except metadata.PackageNotFoundError:  # run from a source tree without an install
        return "0+unknown"
