"""The `sqltopic` command line, on top of every other layer.

`main` parses the command and dispatches: `server` (server/main.py), `sql` (`sql`,
`repl`, `statements`), `load` (`load`, `csv_read`, `csv_values`), `consume`, `demo`
(`demo`, `spawn`); `connect`, `format` and `progress` are shared. docs/cli.md is the
guide.
"""

from __future__ import annotations

from sqltopic.cli.main import main

__all__ = ["main"]
