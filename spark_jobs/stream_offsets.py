"""The `sqltopic` streaming source's offsets (spark_jobs/stream.py), on the driver: where a
query starts (`startingOffsets`), how far a micro-batch reads (`maxRowsPerTrigger`), and
what retention deleted before it was read.

An offset is, per vgroup of the topic's database, the next version to read: `{"1": 1200,
"2": 37}` in Spark's checkpoint. Everything here asks the node hosting each vgroup
(`Vnode.OffsetRange`, through spark_jobs/remote.py); no pyspark.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sqltopic.errors import ConfigError, OffsetOutOfRange
from sqltopic.spark_jobs import remote
from sqltopic.spark_jobs.manifest import MANIFEST_NAME, Manifest
from sqltopic.spark_jobs.pieces import Extent
from sqltopic.spark_jobs.remote import Remote

log = logging.getLogger("sqltopic.spark_jobs.stream")

Offsets = dict[int, int]  # vgroup -> the next version to read
# Kafka's markers in a startingOffsets JSON object: a vgroup's first retained version,
# and its end when the query starts.
EARLIEST = -2
LATEST = -1
# The version a vnode gives its first WAL entry: a position below it loses nothing.
FIRST_VERSION = 1
# Positions asked per vgroup in one round of the search for a micro-batch's end under
# maxRowsPerTrigger: one OffsetRange call per node and round.
PROBES = 32
# Rounds of that search: after three, a range is cut within 1/32,768 of its versions
# (and never past the row budget: the cut is the last probe within it).
PROBE_ROUNDS = 3


@dataclass(frozen=True)
class Lost:
    """Versions [start, first) of `vgroup` that retention deleted before they were read."""

    vgroup: int
    start: int
    first: int

    def describe(self, topic: str) -> str:
        return (
            f"topic {topic} vgroup {self.vgroup}: versions {self.start}..{self.first - 1} "
            f"were deleted by retention before the stream read them (data lost); the vgroup "
            f"retains versions from {self.first}"
        )

    def message(self, topic: str) -> str:
        """The failure's text: the gap, and how to go on past it."""
        return (
            f"{self.describe(topic)}. Set the source's option failOnDataLoss to false to "
            "log such gaps and continue from the first retained version"
        )


def to_spark(offsets: Mapping[int, int]) -> dict[str, int]:
    """Offsets as Spark keeps them (JSON object keys are strings)."""
    return {str(v): int(n) for v, n in sorted(offsets.items())}


def from_spark(doc: Mapping[str, object], vgroups: tuple[int, ...]) -> Offsets:
    """Offsets from Spark's checkpoint (or a JSON option): every vgroup of `vgroups`."""
    try:
        found = {int(str(v)): int(str(n)) for v, n in doc.items()}
    except ValueError as exc:
        raise ConfigError(f"offsets must map vgroup ids to versions, got {doc!r} ({exc})") from None
    if set(found) != set(vgroups):
        raise ConfigError(
            f"offsets {to_spark(found)} do not name exactly the database's vgroups "
            f"{list(vgroups)}: give a version (or {EARLIEST} for earliest, {LATEST} for "
            "latest) for each"
        )
    return found


def starting(option: str, source: Remote, database: str, vgroups: tuple[int, ...]) -> Offsets:
    """The offsets `startingOffsets` names: `earliest`, `latest` (the default), a
    backfill's `_manifest.json` (or its output directory), or a JSON object of vgroup ->
    version (EARLIEST, LATEST allowed)."""
    text = option.strip()
    if text.lower() in ("earliest", "latest"):
        wanted = EARLIEST if text.lower() == "earliest" else LATEST
        return _resolved(dict.fromkeys(vgroups, wanted), source, vgroups)
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"startingOffsets is not a JSON object: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"startingOffsets must be a JSON object, got {text!r}")
        return _resolved(from_spark(doc, vgroups), source, vgroups)
    return from_manifest(Path(text), source.topic, database, vgroups)


def from_manifest(path: Path, topic: str, database: str, vgroups: tuple[int, ...]) -> Offsets:
    """The offsets where a backfill's rows end (each vgroup's `end`): its history then
    live, with no gap or duplicate. ConfigError for a manifest of another topic."""
    file = path / MANIFEST_NAME if path.is_dir() else path
    try:
        manifest = Manifest.from_json(file.read_text())
    except OSError as exc:
        raise ConfigError(
            f"startingOffsets {str(path)!r} is neither earliest, latest, a JSON object nor a "
            f"readable backfill manifest ({exc.strerror})"
        ) from None
    if (manifest.topic, manifest.database) != (topic, database):
        raise ConfigError(
            f"the manifest {file} is a backfill of topic {manifest.topic} (database "
            f"{manifest.database}), not of topic {topic} (database {database})"
        )
    ends = {span.vgroup: span.end for span in manifest.vgroups}
    if set(ends) != set(vgroups):
        raise ConfigError(
            f"the manifest {file} covers vgroups {sorted(ends)}; database {database} has "
            f"{list(vgroups)}"
        )
    return ends


def _resolved(wanted: Offsets, source: Remote, vgroups: tuple[int, ...]) -> Offsets:
    markers = {v for v, n in wanted.items() if n in (EARLIEST, LATEST)}
    bad = {v: n for v, n in wanted.items() if n < EARLIEST}
    if bad:
        raise ConfigError(f"startingOffsets: versions {to_spark(bad)} are below {EARLIEST}")
    if not markers:
        return wanted
    found = remote.extents(source, vgroups)
    for v in markers:
        wanted[v] = found[v].first if wanted[v] == EARLIEST else found[v].next_version
    return wanted


def lost_ranges(start: Offsets, end: Offsets, found: Mapping[int, Extent]) -> list[Lost]:
    """The vgroups whose planned range starts below their first retained version (versions
    below FIRST_VERSION never existed: nothing lost there)."""
    return [
        Lost(v, start[v], found[v].first)
        for v in sorted(start)
        if start[v] < end[v] and max(start[v], FIRST_VERSION) < found[v].first
    ]


def check_lost(lost: list[Lost], topic: str, fail: bool) -> None:
    """OffsetOutOfRange for the first gap when `fail`; else each gap logged."""
    for gap in lost:
        if fail:
            raise OffsetOutOfRange(gap.message(topic), begin=gap.first)
        log.warning("%s; skipped (failOnDataLoss false)", gap.describe(topic))


def limited(
    source: Remote, start: Offsets, end: Offsets, max_rows: int
) -> Offsets:  # fmt: skip
    """`end` lowered so that the batch [start, end) holds at most `max_rows` data rows of
    the WAL in all (each vgroup's share in proportion to its backlog, Kafka's way), except
    that a vgroup with entries to read always moves by at least one entry."""
    moving = [v for v in sorted(start) if start[v] < end[v]]
    rows = remote.rows_between(source, {v: start[v] for v in moving}, {v: end[v] for v in moving})
    total = sum(rows.values())
    if total <= max_rows:
        return dict(end)
    out = dict(end)
    budgets = {v: max_rows * rows[v] // total for v in moving if rows[v]}
    if budgets:
        cuts = _cuts(source, {v: start[v] for v in budgets}, {v: end[v] for v in budgets}, budgets)
        out |= {v: max(cut, start[v] + 1) for v, cut in cuts.items()}
    return out


def _cuts(source: Remote, start: Offsets, end: Offsets, budgets: dict[int, int]) -> Offsets:
    """Per vgroup, the highest version c found with rows in [start, c) within its budget
    (start itself when even one entry is over it): a search by rounds of PROBES
    positions, every vgroup of a node asked in one call per round."""
    low = dict(start)  # rows [start, low) within the budget
    high = dict(end)  # rows [start, high) over it
    for _ in range(PROBE_ROUNDS):
        open_ = {v for v in low if high[v] - low[v] > 1}
        if not open_:
            break
        probes = {v: _probes(low[v], high[v]) for v in open_}
        found = remote.backlogs_at(source, {v: [*probes[v], start[v]] for v in open_})
        for v in open_:
            *at, base = found[v]
            for position, lag in zip(probes[v], at, strict=True):
                if base - lag <= budgets[v]:
                    low[v] = max(low[v], position)
                else:
                    high[v] = min(high[v], position)
    return low


def _probes(low: int, high: int) -> list[int]:
    """Up to PROBES positions spread strictly between `low` and `high`."""
    step = (high - low) / (PROBES + 1)
    spread = (low + round(step * i) for i in range(1, PROBES + 1))
    return sorted({min(high - 1, max(low + 1, p)) for p in spread})
