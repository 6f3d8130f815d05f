"""The `sqltopic` command line, on top of every other layer.

`main` parses the command and dispatches: `server` (server/main.py), `sql` (`sql`,
`repl`, `statements`), `load` (`load`, `csv_read`, `csv_values`), `consume`, `demo`
(`demo`, `spawn`); `connect`, `format` and `progress` are shared. docs/cli.md is the
guide.
"""

from __future__ import annotations

import os
import sys

# gRPC's C core writes log lines of its own to stderr (a failed TLS handshake's, at
# INFO), which a client command already reports as its one error line. The core reads
# this once, when grpc is imported below. A server keeps them (its operator wants to see
# refused clients), and GRPC_VERBOSITY set by the user wins either way.
if sys.argv[1:2] != ["server"]:
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from sqltopic.cli.main import main

__all__ = ["main"]
