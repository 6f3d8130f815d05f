"""`sqltopic backfill TOPIC --output DIR`: a topic's history through Spark, as Parquet,
and (with `--group`) the hand-off of the group to live consumption where Spark stopped.

Order, so that a refused run writes nothing and changes no offsets: `prepare()` (unknown
topic, a topic the backfill cannot write; with `--engine spark-sql`, SQL Spark SQL cannot
run exactly), then, with a server, the group's live consumers (refused
unless `--force`) and the snapshot: each vgroup's end from `Vnode.OffsetRange`, capped by
`--upto`; then the job checks the output directory and Java before Spark starts.

Without `--data`, the job reads through the server (spark_jobs/remote.py): the catalog
objects, each vgroup's node (a cluster's dnodes) and its entries come over the
protocol, so the command runs on any machine that reaches the server with a user's
credentials. With `--data`, it reads the data directory's files itself (the fast path,
where the server's directory is visible: its machine or a shared filesystem); the
server's ends must not be past what the files hold there. `--offline` takes the ends
from the files alone (no server, no hand-off).

Only after the job succeeded, the manifest's end versions become the group's committed
offsets, in one standalone commit (the server stores all or none, and refuses while a
live consumer of the group holds a vgroup). With `--force` the commit evicts: the server
removes the group's consumers of the topic and stores the offsets before any can rejoin.
A failed job removes its partial output (`run_backfill`). Spark's JVM output goes to a
temporary file while the command's own session runs (cli/spark_log.py); the progress
line is cli/stage_bar.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from sqltopic.cli.connect import SERVER_ENV, ServerOptions, open_connection, options_parser
from sqltopic.cli.format import counted
from sqltopic.cli.spark_log import jvm_cause, jvm_output_aside
from sqltopic.cli.stage_bar import StageBar
from sqltopic.client import admin
from sqltopic.client.connection import Connection
from sqltopic.client.tls import TlsHandshakeError
from sqltopic.errors import (
    AuthenticationFailed,
    BackfillError,
    ConfigError,
    ConsumerFenced,
    Error,
    NoPermission,
    NotFoundError,
    ServerUnavailable,
    TopicNotFound,
    require_extra,
)
from sqltopic.server.main import DEFAULT_DATA

if TYPE_CHECKING:
    from sqltopic.spark_jobs.backfill import BackfillPlan, Manifest

LATEST = "latest"
# --engine's choices: the job's engines (spark_jobs/backfill.py)
ENGINES: dict[str, Literal["live", "spark_sql"]] = {"live": "live", "spark-sql": "spark_sql"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "backfill",
        parents=[options_parser()],
        help="write a topic's history as Parquet with Spark; hand a group over to live",
        description="Run the topic's SQL over the retained WAL of its database with Spark and "
        "write Parquet (partitioned by vgroup) and _manifest.json to --output. With --group, "
        "the group's committed offsets then become the versions where the job stopped, so its "
        "consumers continue live from there. Reads through --server (on a cluster, each "
        "vgroup from its dnode) from any machine, or with --data the server's data "
        "directory's files (faster, where they are visible).",
    )
    parser.add_argument("topic", help="the topic to backfill")
    parser.add_argument(
        "--output",
        required=True,
        type=Path,
        metavar="DIR",
        help="output directory; must not exist or be empty",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--group", metavar="G", help="hand this group over to live consumption")
    mode.add_argument(
        "--offline",
        action="store_true",
        help="no server: snapshot the data directory's files (no --group)",
    )
    parser.add_argument(
        "--master",
        default="local[*]",
        help="Spark master (default: local[*]; e.g. spark://host:7077)",
    )
    parser.add_argument(
        "--upto",
        type=parse_upto,
        default=None,
        metavar="latest|VG:VERSION,...",
        help="end (exclusive) per vgroup, e.g. 1:1200,2:1350; vgroups not "
        "named end at the snapshot (default: latest)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR",
        help="read the server's data directory's files (faster, where they are visible); "
        f"without it the job reads through --server (with --offline: {DEFAULT_DATA})",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --group: evict the group's live consumers of the topic",
    )
    parser.add_argument(
        "--engine",
        choices=sorted(ENGINES),
        default="live",
        help="live (default): Spark tasks evaluate the topic as the server does and write "
        "Parquet with pyarrow; spark-sql: the topic transpiled to Spark SQL over the "
        "sqltopic_wal source (refuses SQL whose Spark meaning differs)",
    )
    parser.set_defaults(run=run)


def parse_upto(text: str) -> dict[int, int] | None:
    """An argparse type: `latest` (None) or `VG:VERSION[,VG:VERSION...]`."""
    if text == LATEST:
        return None
    ends: dict[int, int] = {}
    for item in text.split(","):
        vgroup, sep, version = item.strip().partition(":")
        try:
            vg, end = int(vgroup), int(version)
        except ValueError:
            vg = end = 0
        if not sep or vg < 1 or end < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not VGROUP:VERSION (two integers of at least 1), e.g. 1:1200,2:1350"
            )
        if vg in ends:
            raise argparse.ArgumentTypeError(f"vgroup {vg} is given twice")
        ends[vg] = end
    return ends


@dataclass(frozen=True)
class Settings:
    topic: str
    output: Path
    group: str | None
    offline: bool
    master: str
    upto: dict[int, int] | None
    data: Path | None  # None: read through the server
    force: bool
    server: ServerOptions
    engine: Literal["live", "spark_sql"] = "live"

    @classmethod
    def of(cls, args: argparse.Namespace) -> Settings:
        if args.force and args.group is None:
            raise ConfigError("--force evicts a group's consumers: give it with --group G")
        data = args.data if args.data is not None or not args.offline else Path(DEFAULT_DATA)
        return cls(args.topic, args.output, args.group, args.offline, args.master, args.upto,
                   data, args.force, ServerOptions.of(args), ENGINES[args.engine])  # fmt: skip


def run(args: argparse.Namespace, spark: Any = None) -> int:
    """The command; `spark` reuses a running session (tests)."""
    settings = Settings.of(args)
    manifest = backfill(settings, spark=spark)
    print(summary(settings, manifest), flush=True)
    return 0


def backfill(settings: Settings, *, spark: Any = None, stream: TextIO | None = None) -> Manifest:
    require_extra("spark", "sqltopic backfill")
    # imported here: the other commands must not pay for pyspark's import
    from sqltopic.spark_jobs import backfill as job  # noqa: PLC0415

    bar = StageBar(stream if stream is not None else sys.stderr)
    try:
        bar.stage("checking")
        plan = _prepare(settings)
        if settings.engine == "spark_sql":
            plan.spark_query()  # BackfillUnsupported before anything runs
        if settings.offline and settings.data is not None:
            ends = _capped(job.local_ends(settings.data, plan.database), settings.upto)
        else:
            bar.stage("snapshot")
            ends = _online_ends(settings, plan)
        manifest = _run_job(settings, plan, ends, spark, bar)
        if settings.group is not None:
            bar.stage("hand-off")
            _hand_off(settings, settings.group, manifest, plan)
    finally:
        bar.close()
    return manifest


def _run_job(
    settings: Settings, plan: BackfillPlan, ends: dict[int, int], spark: Any, bar: StageBar
) -> Manifest:
    """The job. When it starts a Spark of its own, the JVM's output goes aside (see
    `jvm_output_aside`) and a failure from inside Spark becomes one line with its cause."""
    from sqltopic.spark_jobs.backfill import run_backfill  # noqa: PLC0415

    job = partial(run_backfill, plan, settings.output, ends, spark=spark,
                  master=settings.master, progress=bar.report,
                  engine=settings.engine)  # fmt: skip
    if spark is not None:
        return job()
    with jvm_output_aside() as (log, terminal):
        shown, bar.stream = bar.stream, terminal if bar.stream is sys.stderr else bar.stream
        try:
            return job()
        except Error:
            raise
        except Exception as exc:  # Py4J and PySpark errors: their first line, and the JVM's
            raise BackfillError(
                f"the Spark job failed: {_first_line(exc)}{jvm_cause(log)}"
            ) from None
        finally:
            bar.stream = shown


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _prepare(settings: Settings) -> BackfillPlan:
    from sqltopic.spark_jobs.backfill import prepare, prepare_remote  # noqa: PLC0415
    from sqltopic.spark_jobs.remote import Remote  # noqa: PLC0415

    if settings.data is None:
        server = settings.server
        try:
            return prepare_remote(
                Remote(server.server, server.user, server.password, settings.topic, server.tls)
            )
        except (AuthenticationFailed, TlsHandshakeError, TopicNotFound, NoPermission):
            raise
        except ServerUnavailable as exc:
            raise Error(
                f"cannot reach the server at {server.server}: {exc} (the backfill reads "
                f"through it without --data; see --server or ${SERVER_ENV})"
            ) from None
    try:
        return prepare(settings.data, settings.topic)
    except TopicNotFound as exc:
        raise TopicNotFound(
            f"{exc} in data directory {settings.data} (backfill reads the server's data "
            "directory: give it with --data)"
        ) from None


def _online_ends(settings: Settings, plan: BackfillPlan) -> dict[int, int]:
    """The server's end per vgroup (after the group check), capped by --upto, and
    checked against what the data directory holds."""
    from sqltopic.spark_jobs.backfill import local_ends, remote_ends  # noqa: PLC0415

    with open_connection(settings.server) as conn:
        if settings.group is not None and not settings.force:
            _check_idle(conn, settings.topic, settings.group)
        if settings.data is None:  # read through the server: its nodes' ends
            return _capped(remote_ends(plan), settings.upto)
        try:
            ranges = admin.offset_ranges(conn, settings.topic, plan.vgroups)
        except NotFoundError as exc:
            raise Error(f"{exc} (on the server at {settings.server.server}; is --data "
                        f"{settings.data} the server's data directory?)") from None  # fmt: skip
    snapshot = {v: r.end for v, r in ranges.items()}
    files = local_ends(settings.data, plan.database)
    for vgroup, end in snapshot.items():
        if files.get(vgroup, 0) < end:
            raise Error(
                f"vgroup {vgroup} ends at version {end} on the server at "
                f"{settings.server.server} but at {files.get(vgroup, 0)} in {settings.data}: "
                "give the server's own data directory with --data (backfill reads its files)"
            )
    return _capped(snapshot, settings.upto)


def _capped(snapshot: Mapping[int, int], upto: Mapping[int, int] | None) -> dict[int, int]:
    """The snapshot's ends, with --upto's where given (each at most the snapshot's)."""
    ends = dict(snapshot)
    for vgroup, end in (upto or {}).items():
        if vgroup not in snapshot:
            raise ConfigError(f"--upto names vgroup {vgroup}; the topic's vgroups are "
                              f"{', '.join(map(str, sorted(snapshot)))}")  # fmt: skip
        if end > snapshot[vgroup]:
            raise ConfigError(
                f"--upto {vgroup}:{end} is past vgroup {vgroup}'s end: its next version to "
                f"write is {snapshot[vgroup]}; give at most {vgroup}:{snapshot[vgroup]}"
            )
        ends[vgroup] = end
    return ends


def _check_idle(conn: Connection, topic: str, group: str) -> None:
    live = admin.live_consumers(conn, topic, group)
    if live:
        names = ", ".join(map(str, live))
        raise Error(
            f"group {group} has {counted(len(live), 'live consumer')} of topic {topic} "
            f"(consumer {names}): close them first, or give --force to evict them"
        )


def _hand_off(settings: Settings, group: str, manifest: Manifest, plan: BackfillPlan) -> None:
    """The manifest's ends become the group's committed offsets: in one commit, or on a
    cluster one commit per dnode (each stores all of its vgroups' or none)."""
    offsets = {span.vgroup: span.end for span in manifest.vgroups}
    nodes = plan.remote.endpoints if plan.remote is not None else {}
    by_node: dict[str, dict[int, int]] = {}
    for vgroup, end in offsets.items():
        by_node.setdefault(nodes.get(vgroup, ""), {})[vgroup] = end
    server = settings.server
    done: list[int] = []
    for endpoint, part in sorted(by_node.items()):
        node = replace(server, server=endpoint) if endpoint else server
        with open_connection(node) as conn:
            try:
                # --force: the server removes the group's consumers and stores the offsets
                # before any can rejoin, so they resume from exactly these offsets
                admin.commit_group(conn, settings.topic, group, part, evict=settings.force)
            except ConsumerFenced as exc:
                raise Error(_not_handed_off(settings.output, group, exc, done)) from None
        done += sorted(part)


def _not_handed_off(output: Path, group: str, why: Error, done: list[int]) -> str:
    changed = (
        "were not changed" if not done
        else f"were changed on vgroups {', '.join(map(str, done))} only (the dnodes hosting "
        "them took their commit before another refused)"
    )  # fmt: skip
    return (
        f"the backfill is in {output}, but group {group}'s offsets {changed}: a consumer "
        f"joined the group during the run ({why}); close it and run the backfill again, or "
        "give --force"
    )


def summary(settings: Settings, manifest: Manifest) -> str:
    rows = sum(span.rows for span in manifest.vgroups)
    line = (f"backfilled topic {manifest.topic}: {counted(rows, 'row')} from "
            f"{counted(len(manifest.vgroups), 'vgroup')} into {settings.output}")  # fmt: skip
    if settings.group is not None:
        ends = ",".join(f"{s.vgroup}:{s.end}" for s in manifest.vgroups)
        line += f"; group {settings.group} continues from {ends}"
    return line
