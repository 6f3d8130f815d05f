"""TDengine's naming rules for the objects a statement creates (its "Names & Limits").

A plain identifier is letters, digits and underscores, not starting with a digit; a
name in backquotes may hold other characters, except `.` (it would read as db.table)
and control characters. Database and user names are always plain: they appear in
paths, logs and logins. Names are stored lower-cased (identifiers are
case-insensitive), and their length is counted in UTF-8 bytes, as TDengine does.

Names are checked where objects are created; references to what exists are only
looked up, so a data directory made before these rules keeps working.
"""

from __future__ import annotations

import re
from typing import Literal

from sqltopic.errors import InvalidValueError, excerpt

NameKind = Literal[
    "database", "super table", "table", "column", "tag", "topic", "user", "consumer group"
]

# TDengine's limits, in bytes of UTF-8.
MAX_BYTES: dict[NameKind, int] = {
    "database": 64,
    "super table": 192,
    "table": 192,
    "column": 64,
    "tag": 64,
    "topic": 192,
    "user": 23,
    "consumer group": 192,
}
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*\Z")
# Kinds whose names are plain even in backquotes.
_ALWAYS_PLAIN: frozenset[NameKind] = frozenset({"database", "user"})


def check_name(kind: NameKind, name: str) -> str:
    """`name` when a new object of `kind` may take it; InvalidValueError otherwise,
    saying which rule it breaks."""
    what = f"{kind} name {excerpt(name)}"
    if not name:
        raise InvalidValueError(f"a {kind} needs a name; `` is empty")
    size = len(name.encode())
    if size > MAX_BYTES[kind]:
        raise InvalidValueError(
            f"{what} is {size} bytes long; a {kind} name has at most {MAX_BYTES[kind]}"
        )
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise InvalidValueError(f"{what} holds control characters; remove them")
    if kind in _ALWAYS_PLAIN and not _PLAIN.match(name):
        raise InvalidValueError(
            f"{what}: a {kind} name is letters, digits and underscores, not starting with "
            "a digit (backquotes do not lift this for databases and users)"
        )
    if "." in name:
        raise InvalidValueError(f"{what} may not contain '.' (it separates db.table)")
    return name
