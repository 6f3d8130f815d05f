"""`_manifest.json`: what a finished backfill wrote. Its presence means success (it is
written last, atomically); a failed job leaves none.

    {"format": 1, "topic": "overvoltage", "database": "power",
     "vgroups": [{"vgroup": 1, "start": 1, "end": 1201, "rows": 532}, ...],
     "schema": [["ts", "TIMESTAMP"], ["voltage", "INT"], ...]}

Each vgroup's rows come from versions [start, end): `start` is the first version the job
read (the first retained one: earlier versions were deleted by retention), `end` the
first it did not read, i.e. the offset at which live consumption continues. `schema` is
the topic's output columns with their TDengine types (docs/backfill.md maps them to
Parquet); the files add `_version` (BIGINT) and the `vgroup=N` directories.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqltopic.errors import BackfillError

MANIFEST_NAME = "_manifest.json"
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class VgroupSpan:
    """Versions [start, end) of one vgroup were read; `rows` rows were written."""

    vgroup: int
    start: int
    end: int
    rows: int


@dataclass(frozen=True)
class Manifest:
    topic: str
    database: str
    vgroups: tuple[VgroupSpan, ...]
    schema: tuple[tuple[str, str], ...]  # output column name, TDengine type

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "topic": self.topic,
            "database": self.database,
            "vgroups": [vars(s) for s in self.vgroups],
            "schema": [list(c) for c in self.schema],
        }
        return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            doc = json.loads(text)
            if doc.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            spans = tuple(
                VgroupSpan(int(s["vgroup"]), int(s["start"]), int(s["end"]), int(s["rows"]))
                for s in doc["vgroups"]
            )
            schema = tuple((str(n), str(t)) for n, t in doc["schema"])
            return cls(str(doc["topic"]), str(doc["database"]), spans, schema)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BackfillError(f"not a backfill manifest: {exc}") from None
