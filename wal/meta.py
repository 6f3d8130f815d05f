"""The WAL's metadata file, `meta.json`: segment facts, replaced atomically.

It is written when a segment is sealed, when retention deletes segments and at a clean
close; never per append. The segment files stay the source of truth for records; the
metadata adds what the files cannot say (close times, how far each is known durable,
which versions retention removed).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqltopic.errors import WalCorruptionError
from sqltopic.wal.fsutil import atomic_write
from sqltopic.wal.record import checksum

META_NAME = "meta.json"
META_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    first_version: int
    last_version: int
    entries: int
    size: int
    synced_size: int  # bytes known fsynced: records below it can only be corrupt, not torn
    create_us: int
    close_us: int | None  # None while active


@dataclass(frozen=True, slots=True)
class WalMeta:
    next_version: int  # the next version to assign, as known when written
    removed_below: int  # retention deleted every version below this
    segments: tuple[SegmentMeta, ...] = field(default=())

    def by_first(self) -> dict[int, SegmentMeta]:
        return {s.first_version: s for s in self.segments}


def load_meta(directory: Path) -> WalMeta | None:
    """The metadata in `directory`, None if there is none yet."""
    path = directory / META_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        if doc.get("format") != META_FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        if doc.pop("checksum", None) != _checksum(doc):
            raise ValueError("checksum mismatch")
        segments = tuple(SegmentMeta(**s) for s in doc["segments"])
        return WalMeta(int(doc["next_version"]), int(doc["removed_below"]), segments)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # It is only ever replaced atomically, so a bad one is damage, not a torn write.
        raise WalCorruptionError(
            f"WAL metadata is unreadable: {exc}", path=str(path), offset=0
        ) from None


def save_meta(directory: Path, meta: WalMeta) -> None:
    doc: dict[str, Any] = {
        "format": META_FORMAT,
        "next_version": meta.next_version,
        "removed_below": meta.removed_below,
        "segments": [asdict(s) for s in meta.segments],
    }
    doc["checksum"] = _checksum(doc)
    atomic_write(directory / META_NAME, json.dumps(doc, indent=1).encode())


def _checksum(doc: dict[str, Any]) -> int:
    """XXH3-64 of the document's canonical JSON: a flipped digit must not pass as a
    different segment size or retention bound."""
    return checksum(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
