"""Cutting SQL text into statements on the client (cli_statements)."""

from __future__ import annotations

import pytest

from sqltopic.cli.statements import Statement, advance, split, statements
from sqltopic.errors import SqlError

CASES = [
    ("SELECT 1", ["SELECT 1"]),
    ("SELECT 1; SELECT 2;", ["SELECT 1", "SELECT 2"]),
    ("  ;; ;\n", []),
    ("SELECT 'a;b', \"c;d\"; SELECT 2", ["SELECT 'a;b', \"c;d\"", "SELECT 2"]),
    ("SELECT 'it''s;'; SELECT 2", ["SELECT 'it''s;'", "SELECT 2"]),
    ("SELECT 'x\\';y'; SELECT 2", ["SELECT 'x\\';y'", "SELECT 2"]),
    ("SELECT `a;b` FROM t; SELECT 2", ["SELECT `a;b` FROM t", "SELECT 2"]),
    ("SELECT 1 -- no; cut\n; SELECT 2", ["SELECT 1 -- no; cut", "SELECT 2"]),
    ("SELECT /* no; cut */ 1; SELECT 2", ["SELECT /* no; cut */ 1", "SELECT 2"]),
    ("-- only a comment;\n;  /* and; this */ ;", []),
    ("SELECT 'open; string", ["SELECT 'open; string"]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_statements_cut_on_semicolons_outside_strings_and_comments(
    text: str, expected: list[str]
) -> None:
    assert [s.text for s in statements(text)] == expected


def test_split_keeps_an_unfinished_statement_pending() -> None:
    text = "SELECT 1;\nSELECT 'a;\nb"
    cut = split(text)
    assert [s.text for s in cut.statements] == ["SELECT 1"]
    assert cut.pending
    assert text[cut.consumed :] == "\nSELECT 'a;\nb"
    done = split(text + "';  -- trailing\n")
    assert [s.text for s in done.statements] == ["SELECT 1", "SELECT 'a;\nb'"]
    assert not done.pending


def test_statements_know_where_they_start() -> None:
    text = "SELECT 1;  SELECT 2;\n\n  /* c */ SELECT\n 3"
    assert statements(text) == [
        Statement("SELECT 1", 1, 1),
        Statement("SELECT 2", 1, 12),
        Statement("/* c */ SELECT\n 3", 3, 3),
    ]
    assert statements("SELECT 4", line=7, column=5) == [Statement("SELECT 4", 7, 5)]
    assert advance("ab\ncd", 2, 3) == (3, 3)
    assert advance("ab", 2, 3) == (2, 5)


def test_error_positions_map_to_the_whole_text() -> None:
    stmt = Statement("SELECT\n  nope", 3, 12)
    assert stmt.where(SqlError("bad", line=1, column=4)) == (3, 15)
    assert stmt.where(SqlError("bad", line=2, column=3)) == (4, 3)
    assert stmt.where(SqlError("bad")) is None
