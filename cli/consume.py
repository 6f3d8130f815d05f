"""`sqltopic consume TOPIC`: print a topic's rows as they arrive.

A `sqltopic.client.consumer.Consumer` subscribes to the topic and its messages are printed as
they come: `table` prints an aligned table per block, under a line naming the topic,
vgroup, offsets and source table; `jsonl` one JSON object per row; `csv` a header once,
then the rows. Meta events (WITH META topics) are shown in table mode and as notes on
stderr otherwise; a `data_lost` message is a note on stderr.

Group: `--group G` joins G, starts from its committed offsets (`--from` applies only to
vgroups without one) and commits each message once printed; `--group-type` chooses how
the group shares the topic (broadcast: with `--client-id`, whose offsets it resumes from;
shared: rows leased to every consumer of the group, each row acknowledged once printed).
Without `--group` the command joins a new group of its own, `sqltopic-cli-<random>`, as
Kafka's console consumer does, and commits nothing. `--commit/--no-commit` overrides either default.
A message cut short by `--max-rows` is not committed: its rows come again next time.

The run ends after `--max-rows` rows, after `--timeout` seconds without a message, or at
Ctrl-C (or SIGTERM, both read between polls: `sqltopic.cli.stop`); the consumer is closed
either way and the exit code is 0. A second Ctrl-C quits at once (exit 130) without closing.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TextIO

from sqltopic.cli.connect import (
    ServerOptions,
    options_parser,
    positive_float,
    positive_int,
    tls_failure,
)
from sqltopic.cli.format import FORMATS, Format, counted, table_lines, writer
from sqltopic.cli.stop import StopRequest, stop_requests
from sqltopic.client.config import GROUP_TYPES, SHARING_TYPES, GroupType
from sqltopic.client.tls import TlsHandshakeError
from sqltopic.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqltopic.client.consumer import Consumer
    from sqltopic.client.message import Message, TopicPartition

Start = Literal["earliest", "latest"]
GROUP_PREFIX = "sqltopic-cli-"
# The longest one poll waits: the loop looks for a stop request (Ctrl-C, SIGTERM) this often.
POLL_WAIT_S = 0.5


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "consume",
        parents=[options_parser()],
        help="print a topic's rows as they arrive",
        description="Print a topic's rows as they arrive, until --max-rows, --timeout or "
        "Ctrl-C. With --group: start from the group's committed offsets and commit what was "
        "printed. Without: a new group of its own, committing nothing.",
    )
    parser.add_argument("topic", help="topic to consume")
    parser.add_argument(
        "--group", help=f"consumer group (default: a new group {GROUP_PREFIX}<random>)"
    )
    parser.add_argument(
        "--group-type",
        choices=GROUP_TYPES,
        default="vgroup",
        help="how the group shares the topic: vgroup (default: each vgroup to one of its "
        "consumers), exclusive (one consumer only), broadcast (every consumer gets every "
        "row, with offsets of its own under --client-id)",
    )
    parser.add_argument(
        "--group-key",
        metavar="NAME",
        help="with --group-type key_shared: key rows by this tag or column of the topic "
        "(default: by their table); the group's group.key",
    )
    parser.add_argument(
        "--client-id",
        metavar="NAME",
        help="the consumer's client.id (default: sqltopic-cli-<pid>); required by "
        "--group-type broadcast, which keeps the consumer's offsets under it",
    )
    parser.add_argument(
        "--from",
        dest="start",
        type=start_of,
        default="latest",
        metavar="earliest|latest|TIME",
        help="where to start on vgroups the group has no committed offset for: earliest, "
        "or latest (the default: only new rows); or a TIME, where every assigned vgroup "
        "starts, committed offset or not: the first row ingested at or after it "
        "('2026-11-25 09:00:00' in local time, ISO 8601 such as 2026-11-25T09:00:00Z, or "
        "milliseconds since the epoch)",
    )
    parser.add_argument("--format", choices=FORMATS, default="table", help="default: table")
    parser.add_argument("--max-rows", type=positive_int, metavar="N", help="stop after N rows")
    parser.add_argument(
        "--timeout", type=positive_float, metavar="S", help="stop after S seconds without data"
    )
    parser.add_argument(
        "--commit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="commit each message once printed (default: with --group only)",
    )
    parser.add_argument(
        "--param",
        dest="params",
        action="append",
        type=param,
        default=[],
        metavar="NAME=VALUE",
        help="a value of a parameterized topic's parameter (repeat for each): VALUE is "
        'read as JSON when it is JSON (3, 2.5, true, [1,2], "text"), else as text',
    )
    parser.set_defaults(run=run)


def start_of(text: str) -> Start | int:
    """`--from`: earliest, latest, or a time as milliseconds since the epoch."""
    if text in ("earliest", "latest"):
        return text  # type: ignore[return-value]
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not earliest, latest or a time: give '2026-11-25 09:00:00' "
            "(local time), ISO 8601 such as 2026-11-25T09:00:00+08:00, or milliseconds "
            "since the epoch"
        ) from None
    ms = int(when.timestamp() * 1000)  # a naive time is local, as TDengine's shell reads it
    if ms < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970-01-01 UTC")
    return ms


def param(text: str) -> tuple[str, Any]:
    """`NAME=VALUE` of --param: the value as JSON when it is JSON, else the text."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE, e.g. tbname=d1001")
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        return name.strip(), value


@dataclass(frozen=True)
class Settings:
    topic: str
    group: str
    start: Start | int  # an int: a time, ms since the epoch
    fmt: Format
    max_rows: int | None
    timeout: float | None
    commit: bool
    params: dict[str, Any] | None = None
    group_type: GroupType = "vgroup"
    client_id: str | None = None
    group_key: str | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> Settings:
        if args.group_type == "broadcast" and not args.client_id:
            raise ConfigError(
                "--group-type broadcast: give --client-id NAME too (the consumer's offsets "
                "are kept under it, so that the next run with it resumes there)"
            )
        if args.group_key is not None and args.group_type != "key_shared":
            raise ConfigError(
                f"--group-key: keys rows of --group-type key_shared only (this run's is "
                f"{args.group_type}); add --group-type key_shared, or drop --group-key"
            )
        group = args.group or GROUP_PREFIX + secrets.token_hex(4)
        commit = args.commit if args.commit is not None else args.group is not None
        params = dict(args.params) or None
        return cls(
            args.topic, group, args.start, args.format, args.max_rows, args.timeout, commit,
            params, args.group_type, args.client_id, args.group_key,
        )  # fmt: skip

    def config(self, server: ServerOptions) -> dict[str, str]:
        return (
            server.consumer_config()
            | {
                "group.id": self.group,
                "group.type": self.group_type,
                "client.id": self.client_id or f"sqltopic-cli-{os.getpid()}",
                "auto.offset.reset": self.start if isinstance(self.start, str) else "latest",
                "enable.auto.commit": "false",
            }
            | ({"group.key": self.group_key} if self.group_key is not None else {})
        )


def run(args: argparse.Namespace) -> int:
    # imported here, so that the other commands (`server` above all) never load it
    from sqltopic.client.consumer import Consumer  # noqa: PLC0415

    settings = Settings.of(args)
    options = ServerOptions.of(args)
    # Ctrl-C is how a follow without limits ends: the consumer closes all the same
    with stop_requests() as stop:
        try:
            with Consumer(settings.config(options)) as consumer:
                consumer.subscribe(
                    [settings.topic], params=settings.params, on_assign=_on_assign(settings)
                )
                follow(consumer, Printer(settings.fmt, sys.stdout, sys.stderr), settings, stop)
        except TlsHandshakeError as exc:  # named as the consumer's ssl.* keys: say --tls-*
            raise tls_failure(options, exc) from None
    return 0


def _on_assign(settings: Settings) -> Callable[[Consumer, list[TopicPartition]], None] | None:
    """With `--from TIME`: each vgroup assigned starts at the time (vgroups assigned by
    a later rebalance too; those kept keep their positions)."""
    when = settings.start
    if isinstance(when, str):
        return None
    from sqltopic.client.message import TopicPartition  # noqa: PLC0415 (as Consumer)

    def assigned(consumer: Consumer, parts: list[TopicPartition]) -> None:
        asked = [TopicPartition(p.topic, p.vgroup, when) for p in parts]
        for found in consumer.offsets_for_times(asked):
            consumer.seek(found)

    return assigned


def follow(consumer: Consumer, printer: Printer, settings: Settings, stop: StopRequest) -> int:
    """Poll and print until the row limit, the idle timeout or a stop request; the rows
    printed."""
    printed = 0
    idle_since = time.monotonic()
    while settings.max_rows is None or printed < settings.max_rows:
        if stop.requested:
            break
        wait = POLL_WAIT_S
        if settings.timeout is not None:
            wait = min(wait, settings.timeout - (time.monotonic() - idle_since))
            if wait <= 0:
                break
        msg = consumer.poll(wait)
        if msg is None:
            continue
        idle_since = time.monotonic()
        limit = None if settings.max_rows is None else settings.max_rows - printed
        shown = printer.show(msg, limit)
        printed += shown
        if settings.commit:
            _settle(consumer, msg, shown, settings.group_type)
    return printed


def _settle(consumer: Consumer, msg: Message, shown: int, group_type: GroupType) -> None:
    """What was printed is done: a vgroup group commits a message printed whole (a cut
    one comes again next time); a shared group acknowledges the rows printed and releases
    the others, which another consumer of the group may take at once."""
    if group_type not in SHARING_TYPES:
        if shown == msg.row_count:
            consumer.commit(msg)
        return
    if msg.kind != "data" or not msg.row_ids:
        return
    if shown:
        consumer.ack(msg, rows=range(shown))
    if shown < msg.row_count:
        consumer.nack(msg, rows=range(shown, msg.row_count))


class Printer:
    """Writes messages in one format: rows on `out`, notes on `notes`."""

    def __init__(self, fmt: Format, out: TextIO, notes: TextIO) -> None:
        self.fmt = fmt
        self.out = out
        self.notes = notes
        self.rows = writer(fmt, out)

    def show(self, msg: Message, limit: int | None) -> int:
        """Print `msg` (at most `limit` rows); the rows printed."""
        where = f"topic {msg.topic} vgroup {msg.vgroup}"
        if msg.kind == "data_lost":
            self._note(
                f"{where}: versions {msg.offset}..{msg.end_offset - 1} were deleted by "
                "retention before they were read"
            )
            return 0
        if msg.kind == "meta":
            event = json.dumps(msg.meta, ensure_ascii=False, sort_keys=True)
            if self.fmt == "table":
                self.out.write(f"-- {where} offset {msg.offset}: meta {event}\n")
            else:
                self._note(f"{where} offset {msg.offset}: meta {event}")
            return 0
        return self._data(msg, where, limit)

    def _data(self, msg: Message, where: str, limit: int | None) -> int:
        shown = 0
        for block in msg.blocks:
            take = len(block) if limit is None else min(limit - shown, len(block))
            if take <= 0:
                break
            data = block.data.slice(0, take)
            if self.fmt == "table":
                source = f" table {block.table_name}" if block.table_name else ""
                versions = f"versions {msg.offset}..{msg.end_offset - 1}"
                self.out.write(f"-- {where} {versions}{source}: {counted(take, 'row')}\n")
                self.out.write("".join(line + "\n" for line in table_lines(data)))
            else:
                self.rows.write(data)
            shown += take
        self.out.flush()
        return shown

    def _note(self, text: str) -> None:
        self.out.flush()
        print(f"sqltopic: {text}", file=self.notes, flush=True)
