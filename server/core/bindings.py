"""The bindings of parameterized topics that a server reads, and their partition.

A subscription to a parameterized topic is named `topic?key` (sql/topic/params.py). A
read evaluates the topic's shared form once and splits the result among bindings with a
`Partitioner`, whose cost is in the rows, hardly in the bindings, but which is built per
set of bindings (linear in them). So each topic keeps one `BindingSet`: every binding
read so far, with a partitioner over all of them, rebuilt when the bindings it lacks
grow past a share of it (geometric growth: 10,000 bindings arriving one by one cost a
few dozen rebuilds) or once no new binding came for a while; a binding it lacks yet is
split with its own small partitioner.

A shared pass asks for the subscriptions waiting, thousands of them where a write has
rows for a few: a split's work grows with the rows and with the bindings new to the set,
and finding the new ones is one C-level containment test, not a Python loop over all.
"""

from __future__ import annotations

import threading
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import pyarrow as pa

from sqltopic.sql.model import Topic
from sqltopic.sql.topic.params import SUBSCRIPTION_SEP, Binding
from sqltopic.sql.topic.partition import Partitioner

# Bindings a topic's set may lack before its partitioner is rebuilt over all of them:
# at least this many, and at least 1/REBUILD_SHARE of those it has.
REBUILD_MIN = 16
REBUILD_SHARE = 8
# Splits without a new binding after which the partitioner is rebuilt over the few it
# lacks: each of those costs a small partitioner's split on every pass until then.
QUIET_SPLITS = 32
# Versions of waiting subscriptions (topic_reader.Subscriptions) a set remembers as
# registered: a few per vnode, whose passes alternate.
CHECKED_VERSIONS = 64
# Bindings one topic's set keeps at most; past it the set starts again with those read
# next (a bound on memory when subscribers come and go with ever new values).
MAX_BINDINGS = 200_000


@dataclass
class BindingSet:
    """The bindings of one topic read so far, by subscription name, and a partitioner
    over most of them."""

    topic: Topic
    schema: pa.Schema  # the topic's output
    bindings: dict[str, Binding] = field(default_factory=dict)
    _names_of: list[str] = field(default_factory=list)  # index in the partitioner -> name
    _partitioner: Partitioner | None = None
    # the names the partitioner lacks -> their own partitioner, once made
    _alone: dict[str, Partitioner | None] = field(default_factory=dict)
    _quiet: int = 0  # splits since a binding was new
    _checked: set[int] = field(default_factory=set)  # versions of `names` registered
    _resets: int = 0  # a version registered before a reset is not registered after it
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def binding(self, name: str) -> Binding:
        """The binding subscription `name` (`topic?key`) names; ConfigError when its key
        is not a valid binding's (a name without one binds the empty key: an error)."""
        found = self.bindings.get(name)
        if found is None:
            found = Binding.from_key(self.topic, name.partition(SUBSCRIPTION_SEP)[2])
            with self._lock:
                if len(self.bindings) >= MAX_BINDINGS:
                    self._reset()
                if name not in self.bindings:
                    self.bindings[name] = found
                    self._alone[name] = None
                    self._quiet = 0
        return found

    def split(
        self, result: pa.Table, names: AbstractSet[str], version: int | None = None
    ) -> dict[str, pa.Table]:
        """The rows of `result` (the shared form's output) of each subscription in
        `names`; those without rows are left out. `version` names `names` as they are
        (it changes when one is added): one whose bindings were registered is not
        looked at again."""
        resets = self._resets
        if version is None or version not in self._checked:
            self._register(names)
            with self._lock:
                if version is not None and resets == self._resets:
                    if len(self._checked) >= CHECKED_VERSIONS:
                        self._checked.clear()
                    self._checked.add(version)
        partitioner, names_of, alone = self._current(names)
        if resets != self._resets:
            # the set started over during this split (MAX_BINDINGS): the names
            # registered before are gone from it, so each is split on its own (rare;
            # linear in the names, as before the set)
            partitioner, alone = None, list(names)
        out: dict[str, pa.Table] = {}
        if partitioner is not None:
            for index, part in partitioner.split(result).items():
                if (name := names_of[index]) in names:
                    out[name] = part
        for name in alone:
            part = self._partitioner_of(name).split(result).get(0)
            if part is not None:
                out[name] = part
        return out

    def _bound(self, name: str) -> Binding:
        """`name`'s binding, from the set or (gone by a reset meanwhile) from its key."""
        found = self.bindings.get(name)
        if found is None:
            found = Binding.from_key(self.topic, name.partition(SUBSCRIPTION_SEP)[2])
        return found

    def _register(self, names: AbstractSet[str]) -> None:
        """Make sure every name in `names` is a binding of the set."""
        if not self.bindings.keys() >= names:  # C-level: no Python loop over thousands
            for name in [n for n in list(names) if n not in self.bindings]:  # a copy: C-level
                self.binding(name)

    def _current(self, names: AbstractSet[str]) -> tuple[Partitioner | None, list[str], list[str]]:
        """The partitioner over most bindings (rebuilt when it lacks too many, or some
        while none came for QUIET_SPLITS splits), the name of each of its indexes, and
        the names in `names` it lacks."""
        with self._lock:
            self._quiet += 1
            lacking = len(self._alone)
            due = max(REBUILD_MIN, len(self._names_of) // REBUILD_SHARE)
            if lacking >= due or (lacking and self._quiet > QUIET_SPLITS):
                self._names_of = list(self.bindings)
                self._partitioner = Partitioner(
                    self.topic, list(self.bindings.values()), self.schema
                )
                self._alone.clear()
            return self._partitioner, self._names_of, [n for n in self._alone if n in names]

    def _partitioner_of(self, name: str) -> Partitioner:
        with self._lock:
            found = self._alone.get(name)
            if found is None:
                found = Partitioner(self.topic, [self._bound(name)], self.schema)
                if name in self._alone:  # not covered meanwhile by a rebuild
                    self._alone[name] = found
            return found

    def _reset(self) -> None:
        self.bindings.clear()
        self._checked.clear()
        self._resets += 1
        self._names_of = []
        self._alone.clear()
        self._partitioner = None
