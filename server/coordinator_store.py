"""The mnode's coordinator state on disk, so that a server restart keeps consumer groups:
members with their epochs and assignments, owners (with revocations in progress), plans,
and the rows counters of SHOW SUBSCRIPTIONS.

One JSON file, `mnode.json` in the data directory, replaced atomically (temporary file,
fsync, rename, directory fsync): a crash leaves the old state or the new one. The
coordinator saves it before answering any call that changed membership or assignments,
so no consumer ever holds an epoch newer than the file; progress reports (positions,
rows) are saved on the mnode's timer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from sqltopic.errors import DataFileDamaged
from sqltopic.wal.fsutil import atomic_write

STATE_FILE = "mnode.json"
FORMAT = 1


@dataclass
class Snapshot:
    """The coordinator's durable state, in JSON-ready form."""

    next_id: int = 1
    members: list[dict[str, Any]] = field(default_factory=list)
    # [topic, group, vgroup, consumer, epoch, revoking, revoked_at] (older files: no revoked_at)
    owners: list[list[Any]] = field(default_factory=list)
    # [topic, group, vgroup, planned consumer]
    plans: list[list[Any]] = field(default_factory=list)
    # [topic, group, vgroup, rows of earlier holders]
    rows_before: list[list[Any]] = field(default_factory=list)
    # [topic, group, vgroup, position or None, rows]
    progress: list[list[Any]] = field(default_factory=list)


class CoordinatorStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATE_FILE

    def load(self) -> Snapshot | None:
        """The saved state, or None when there is none (a new data directory)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
            if doc.pop("format") != FORMAT:
                raise ValueError(f"unknown format {doc.get('format')}")
            return Snapshot(**doc)
        except (ValueError, TypeError, KeyError) as exc:
            # atomic replacement never leaves a torn file: this one was damaged
            raise self.damaged(exc) from None

    def damaged(self, exc: Exception) -> DataFileDamaged:
        """The error for a state file that does not load."""
        return DataFileDamaged(
            f"{self.path}: the consumer group state is damaged ({type(exc).__name__}: "
            f"{str(exc)[:100]}); move it away to start with no groups (consumers rejoin "
            "from their committed offsets)",
            path=str(self.path),
        )

    def save(self, snapshot: Snapshot) -> None:
        # the snapshot's fields are JSON-ready lists already: asdict's deep copy of every
        # member and owner would cost most of a save with a thousand consumers
        doc = {"format": FORMAT, **{f.name: getattr(snapshot, f.name) for f in fields(snapshot)}}
        atomic_write(self.path, json.dumps(doc, separators=(",", ":")).encode())
