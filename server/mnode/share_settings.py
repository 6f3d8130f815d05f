"""A shared group's settings: how long a lease lasts (`ack.timeout.ms`), how many times a
row is delivered at most (`max.deliveries`), where rows that ran out of deliveries go
(`dead.letter.table`) and, in a key_shared group, what a row's key is (`group.key`:
server/dnode/share_keys.py). They are the group's: its first member fixes them, and a member
asking for other values is refused (`differences`), as Kafka fixes a share group's
record lock duration and delivery count limit for the whole group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqltopic.errors import ConfigError, excerpt

# ack.timeout.ms: Pulsar's and Kafka share groups' 30 s by default; at least 1 s (a
# shorter lease expires under a consumer still working), at most an hour (Kafka's bound
# of its record lock: a lease longer than that hides a dead consumer's rows too long).
DEFAULT_ACK_TIMEOUT_MS = 30_000
ACK_TIMEOUT_RANGE_MS = (1_000, 3_600_000)
# max.deliveries: 0 is unlimited; a row is never delivered more than this.
MAX_MAX_DELIVERIES = 1_000_000
# dead.letter.table: "db.name", each part a name of at most this many characters.
MAX_NAME = 192


@dataclass(frozen=True)
class ShareSettings:
    """A shared group's settings, checked."""

    ack_timeout_ms: int = DEFAULT_ACK_TIMEOUT_MS
    max_deliveries: int | None = None  # None: unlimited
    dead_letter_table: tuple[str, str] | None = None  # (database, table)
    group_key: str | None = None  # None: the table

    @classmethod
    def of(
        cls, ack_timeout_ms: int, max_deliveries: int, dead_letter_table: str,
        group_key: str = "",
    ) -> ShareSettings:  # fmt: skip
        """From request fields, where 0 and "" mean the default; ConfigError on a bad value."""
        timeout = ack_timeout_ms or DEFAULT_ACK_TIMEOUT_MS
        low, high = ACK_TIMEOUT_RANGE_MS
        if not low <= timeout <= high:
            raise ConfigError(f"ack.timeout.ms: {timeout} is out of range {low}..{high}")
        if not 0 <= max_deliveries <= MAX_MAX_DELIVERIES:
            raise ConfigError(
                f"max.deliveries: {max_deliveries} is out of range 0..{MAX_MAX_DELIVERIES} "
                "(0: unlimited)"
            )
        return cls(timeout, max_deliveries or None, _table(dead_letter_table), _key(group_key))

    @property
    def lease_s(self) -> float:
        return self.ack_timeout_ms / 1000

    def doc(self) -> dict[str, Any]:
        table = ".".join(self.dead_letter_table) if self.dead_letter_table else ""
        return {"ack_timeout_ms": self.ack_timeout_ms,
                "max_deliveries": self.max_deliveries or 0, "dead_letter_table": table,
                "group_key": self.group_key or ""}  # fmt: skip

    @classmethod
    def of_doc(cls, doc: dict[str, Any]) -> ShareSettings:
        """From `doc()` (a document stored before group.key existed has none)."""
        return cls.of(doc["ack_timeout_ms"], doc["max_deliveries"], doc["dead_letter_table"],
                      doc.get("group_key", ""))  # fmt: skip

    def differences(self, other: ShareSettings) -> list[str]:
        """`key ours (theirs)` for each setting in which `other` differs."""
        ours, theirs = self.doc(), other.doc()
        return [
            f"{key.replace('_', '.')} {ours[key] or 'none'} (asked: {theirs[key] or 'none'})"
            for key in ours
            if ours[key] != theirs[key]
        ]


def _table(value: str) -> tuple[str, str] | None:
    """`db.name` as (db, name), lower case as the catalog's names; None for ""."""
    if not value:
        return None
    db, sep, name = value.strip().partition(".")
    if not sep or not _name(db) or not _name(name):
        raise ConfigError(
            f"dead.letter.table: {excerpt(value)} is not db.name (two names of letters, digits "
            f"and _, not starting with a digit, each at most {MAX_NAME} characters)"
        )
    return db.lower(), name.lower()


def _key(value: str) -> str | None:
    """group.key: a column or tag name (lower case, as the catalog's), or None for ""."""
    if not value:
        return None
    if not _name(value.strip()):
        raise ConfigError(
            f"group.key: {excerpt(value)} is not a name (letters, digits and _, not starting "
            f"with a digit, at most {MAX_NAME} characters): name a tag or a column"
        )
    return value.strip().lower()


def _name(text: str) -> bool:
    return (
        0 < len(text) <= MAX_NAME
        and text.isascii()
        and (text[0].isalpha() or text[0] == "_")
        and all(c.isalnum() or c == "_" for c in text)
    )
