"""The server's log output: `--log-format text` (the default: one readable line) or
`json` (one JSON object per line, for log shippers).

Membership and rebalance events carry their facts as fields (`event`, `consumer_id`,
`group`, `topic`, `vgroup`/`vgroups`, `epoch`, ...: `event_fields`), so a JSON line
names them under the same keys everywhere; the text line says them in its message.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
# The facts an event may carry, in the order a JSON line lists them.
FIELDS = (
    "event", "consumer_id", "group", "client_id", "user", "mode", "topic", "vgroup",
    "vgroups", "epoch", "dnode",
)  # fmt: skip
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def event_fields(event: str, **facts: Any) -> dict[str, Any]:
    """`extra=` of a log call for an event: its name and facts (keys of FIELDS)."""
    unknown = set(facts) - set(FIELDS)
    if unknown:
        raise ValueError(f"log fields {sorted(unknown)} are not among {FIELDS}")
    return {"event": event, **facts}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: `ts` (UTC, ISO 8601 with ms), `level`, `logger`,
    `message`, the event's fields, and `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, tz=UTC)
        out: dict[str, Any] = {
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            if name in record.__dict__:
                out[name] = record.__dict__[name]
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure(fmt: LogFormat) -> None:
    """Log INFO and above to stderr in `fmt`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
