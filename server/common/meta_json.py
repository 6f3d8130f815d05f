"""A meta event as `MetaMessage.event_json`: JSON that every language's parser reads
exactly.

JSON parsers that hold numbers as IEEE doubles (JavaScript's `JSON.parse`, jq, many
others) round integers beyond 2^53 - 1 without a word. A table's `uid` and a column's
`colId` are random 62-bit ids, and BIGINT tag values reach 2^63, so on the wire ids are
always decimal strings (an id is compared, never computed with, and its type should not
depend on its value) and any other integer outside the exact range is a decimal string
too.
"""

from __future__ import annotations

import json
from typing import Any

# The largest integer a double holds exactly (JavaScript's Number.MAX_SAFE_INTEGER).
MAX_EXACT_INT = (1 << 53) - 1
# Keys whose values are ids (a table's, a column's): strings always.
ID_KEYS = frozenset({"uid", "colId"})


def event_json(event: dict[str, Any]) -> str:
    """The event as compact UTF-8 JSON with ids and unsafe integers as strings."""
    return json.dumps(_exact(event), separators=(",", ":"))


def _exact(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _exact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    exact = isinstance(value, bool) or not isinstance(value, int)
    if not exact and (key in ID_KEYS or abs(value) > MAX_EXACT_INT):
        return str(value)
    return value
