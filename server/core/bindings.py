"""The bindings of parameterized topics that a server reads, and their partition.

A subscription to a parameterized topic is named `topic?key` (sql/topic/params.py). A
read evaluates the topic's shared form once and splits the result among bindings with a
`Partitioner`, whose cost is in the rows, hardly in the bindings, but which is built per
set of bindings (linear in them). So each topic keeps one `BindingSet`: every binding
read so far, with a partitioner over all of them, rebuilt only when the bindings it lacks
grow past a share of it (geometric growth: 10,000 bindings arriving one by one cost a
few dozen rebuilds); a binding it lacks yet is split with its own small partitioner.
"""

from __future__ import annotations

import threading
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import pyarrow as pa

from sqltopic.sql.model import Topic
from sqltopic.sql.topic.params import Binding
from sqltopic.sql.topic.partition import Partitioner

# Bindings a topic's set may lack before its partitioner is rebuilt over all of them:
# at least this many, and at least 1/REBUILD_SHARE of those it has.
REBUILD_MIN = 16
REBUILD_SHARE = 8
# Bindings one topic's set keeps at most; past it the set starts again with those read
# next (a bound on memory when subscribers come and go with ever new values).
MAX_BINDINGS = 200_000


@dataclass
class BindingSet:
    """The bindings of one topic read so far, and a partitioner over most of them."""

    topic: Topic
    schema: pa.Schema  # the topic's output
    bindings: dict[str, Binding] = field(default_factory=dict)
    _covered: dict[str, int] = field(default_factory=dict)  # key -> index in the partitioner
    _keys_of: list[str] = field(default_factory=list)  # index in the partitioner -> key
    _partitioner: Partitioner | None = None
    _alone: dict[str, Partitioner] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _uncovered: int = 0  # bindings the partitioner lacks

    def binding(self, key: str) -> Binding:
        """The binding `key` names (ConfigError when it is not a valid one's key)."""
        found = self.bindings.get(key)
        if found is None:
            found = Binding.from_key(self.topic, key)
            with self._lock:
                if len(self.bindings) >= MAX_BINDINGS:
                    self._reset()
                if key not in self.bindings:
                    self.bindings[key] = found
                    self._uncovered += 1
        return found

    def split(self, result: pa.Table, keys: AbstractSet[str]) -> dict[str, pa.Table]:
        """The rows of `result` (the shared form's output) of each binding in `keys`;
        bindings without rows are left out. Its work grows with the rows and with the
        bindings new to the set, not with `keys`: thousands may wait in a shared pass,
        and a write has rows for a few."""
        for key in keys - self.bindings.keys():  # new ones: each parsed once
            self.binding(key)
        partitioner, keys_of, alone = self._current(keys)
        out: dict[str, pa.Table] = {}
        if partitioner is not None:
            for index, part in partitioner.split(result).items():
                if (key := keys_of[index]) in keys:
                    out[key] = part
        for key in alone:
            part = self._partitioner_of(key).split(result).get(0)
            if part is not None:
                out[key] = part
        return out

    def _current(self, keys: AbstractSet[str]) -> tuple[Partitioner | None, list[str], list[str]]:
        """The partitioner over most bindings (rebuilt when it lacks too many), the key
        of each of its indexes, and the keys it lacks."""
        with self._lock:
            if self._uncovered >= max(REBUILD_MIN, len(self._covered) // REBUILD_SHARE):
                every = list(self.bindings.values())
                self._partitioner = Partitioner(self.topic, every, self.schema)
                self._covered = {b.key: i for i, b in enumerate(every)}
                self._keys_of = [b.key for b in every]
                self._alone.clear()
                self._uncovered = 0
            return self._partitioner, self._keys_of, list(keys - self._covered.keys())

    def _partitioner_of(self, key: str) -> Partitioner:
        with self._lock:
            found = self._alone.get(key)
            if found is None:
                found = self._alone[key] = Partitioner(
                    self.topic, [self.bindings[key]], self.schema
                )
            return found

    def _reset(self) -> None:
        self.bindings.clear()
        self._covered.clear()
        self._keys_of = []
        self._alone.clear()
        self._partitioner = None
        self._uncovered = 0
