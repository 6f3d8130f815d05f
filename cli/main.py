"""The `sqltopic` command line. It sits on top of every other layer.

`sqltopic server` serves a data directory over gRPC (docs/protocol.md). The client
commands talk to a server (`--server HOST:PORT`, default 127.0.0.1:6030): `sql` runs
statements (cli/sql.py), `load` streams a CSV file into a table (cli/load.py), `consume`
prints a topic's rows as they arrive (cli/consume.py). `demo` starts a server of its own
and shows a producer and a consumer at work (cli/demo.py). docs/cli.md is the guide.

Every failure is one line on stderr, `sqltopic: <what went wrong>`, and exit code 1
(2 for bad arguments, as argparse does).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from sqltopic.cli.backfill import add_parser as add_backfill
from sqltopic.cli.consume import add_parser as add_consume
from sqltopic.cli.demo import add_parser as add_demo
from sqltopic.cli.load import add_parser as add_load
from sqltopic.cli.sql import add_parser as add_sql
from sqltopic.errors import Error
from sqltopic.server.main import add_arguments as add_server_arguments
from sqltopic.server.main import add_dnode_arguments, add_mnode_arguments

# The exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED_EXIT = 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sqltopic",
        description="sqltopic: SQL topics over time-series data. "
        "`sqltopic COMMAND --help` tells more; docs/cli.md is the guide.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_server(sub)
    _add_cluster(sub)
    for add in (add_sql, add_load, add_consume, add_backfill, add_demo):
        add(sub)
    args = parser.parse_args(argv)
    if args.command not in ("server", "mnode", "dnode"):
        # the client library's warnings (a failed heartbeat while the server is away, as
        # the consumer keeps retrying) in the same one-line form as errors
        logging.basicConfig(level=logging.WARNING, format="sqltopic: %(message)s")
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT
    except BrokenPipeError:
        _silence_stdout()  # the reader went away (`| head`): stop quietly
        return 0
    except (Error, OSError) as exc:
        print(f"sqltopic: {one_line(exc)}", file=sys.stderr)
        return 1


def one_line(exc: BaseException) -> str:
    """The error's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _add_server(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = sub.add_parser("server", help="serve a data directory over gRPC")
    server.set_defaults(run=_server)
    add_server_arguments(server)


def _server(args: argparse.Namespace) -> int:
    # imported here: the client commands start faster without the engine (DuckDB)
    from sqltopic.server.main import serve  # noqa: PLC0415

    return serve(args)


def _add_cluster(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mnode = sub.add_parser("mnode", help="serve a cluster's mnode (catalog, consumer groups)")
    mnode.set_defaults(run=_mnode)
    add_mnode_arguments(mnode)
    dnode = sub.add_parser("dnode", help="serve a cluster's dnode (vgroups) under an mnode")
    dnode.set_defaults(run=_dnode)
    add_dnode_arguments(dnode)


def _mnode(args: argparse.Namespace) -> int:
    from sqltopic.server.main import serve_mnode  # noqa: PLC0415

    return serve_mnode(args)


def _dnode(args: argparse.Namespace) -> int:
    from sqltopic.server.main import serve_dnode  # noqa: PLC0415

    return serve_dnode(args)


if __name__ == "__main__":
    sys.exit(main())
