"""The interactive shell of `sqltopic sql`, on a terminal.

`sqltopic> ` asks for a statement and `       -> ` for its continuation until a `;` ends
it; `quit` or `exit` (or Ctrl-D) leaves, Ctrl-C drops the statement being typed. An error
is printed as one line and the shell goes on. Line editing and history come from
`readline`; each statement is one history entry, kept in ~/.sqltopic_history (or the
file $SQLTOPIC_HISTORY names) across sessions.
"""

from __future__ import annotations

import os
import readline
import sys
from pathlib import Path

from sqltopic.cli.sql import Shell, is_quit
from sqltopic.cli.statements import Statement, split
from sqltopic.errors import Error

PROMPT = "sqltopic> "
CONTINUATION = "       -> "
HISTORY_ENV = "SQLTOPIC_HISTORY"
DEFAULT_HISTORY = "~/.sqltopic_history"
# Statements kept in the history file: plenty to search back through, a small file.
HISTORY_LENGTH = 1000


def history_path() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or DEFAULT_HISTORY).expanduser()


def interact(shell: Shell) -> None:
    """Read, run and print until quit, exit or end of input."""
    path = history_path()
    _load_history(path)
    print(
        f"sqltopic shell on {shell.conn.address}. End statements with ';'; "
        "quit, exit or Ctrl-D leaves."
    )
    try:
        _loop(shell)
    finally:
        _save_history(path)


def _loop(shell: Shell) -> None:
    pending = ""
    while True:
        try:
            text = input(CONTINUATION if pending.strip() else PROMPT)
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print()
            pending = ""
            continue
        if is_quit(pending, text):
            return
        pending += text + "\n"
        cut = split(pending)
        for stmt in cut.statements:
            readline.add_history(" ".join(stmt.text.split()) + ";")
            _run_one(shell, stmt)
        pending = pending[cut.consumed :] if cut.pending else ""


def _run_one(shell: Shell, stmt: Statement) -> None:
    """Run a statement; its error (positions counted in the statement) is printed."""
    try:
        shell.run(stmt)
    except Error as exc:
        print(f"sqltopic: {exc}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("sqltopic: interrupted", file=sys.stderr, flush=True)


def _load_history(path: Path) -> None:
    readline.set_auto_history(False)
    readline.set_history_length(HISTORY_LENGTH)
    if path.exists():
        try:
            readline.read_history_file(path)
        except OSError as exc:
            print(f"sqltopic: cannot read history {path}: {exc}", file=sys.stderr)


def _save_history(path: Path) -> None:
    try:
        readline.write_history_file(path)
    except OSError as exc:
        print(f"sqltopic: cannot save history to {path}: {exc}", file=sys.stderr)
