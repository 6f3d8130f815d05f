"""The coordinator's recent rebalances, for people: what changed whose assignment, when
and why, in a bounded list the web console shows (server/console). In memory only: a
restart starts it empty, as the history of a running process."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

# Rebalances kept, newest last: a screenful of recent history, a few hundred KB at most.
RECENT_REBALANCES = 200

# What set a rebalance off: a consumer joined or changed its topics, left (closed or
# unsubscribed), was removed (timed out, or DROP CONSUMER GROUP), or a vgroup its holder
# let go went on to its next owner.
Cause = Literal["join", "subscribe", "leave", "removed", "handover"]


@dataclass(frozen=True)
class Rebalance:
    """One rebalance of a (topic, group) that changed consumers' assignments."""

    time_us: int  # by the server's wall clock
    topic: str
    group: str
    cause: Cause
    consumer_id: int  # the consumer whose join, leave or let-go set it off
    consumers: int  # the group's subscribers of the topic after it
    # each changed consumer's vgroups of the topic after it, by consumer id
    assigned: tuple[tuple[int, tuple[int, ...]], ...]


class RebalanceLog:
    """The last `RECENT_REBALANCES` rebalances. Thread-safe."""

    def __init__(self, kept: int = RECENT_REBALANCES) -> None:
        self._kept: deque[Rebalance] = deque(maxlen=kept)
        self._lock = threading.Lock()

    def add(self, rebalance: Rebalance) -> None:
        with self._lock:
            self._kept.append(rebalance)

    def recent(self) -> list[Rebalance]:
        """Newest first."""
        with self._lock:
            return list(reversed(self._kept))
