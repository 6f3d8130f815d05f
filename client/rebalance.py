"""Flow control and rebalance notifications as flows: `pause`/`resume` (confluent-kafka's
meaning: a paused vgroup is not fetched, its position is kept, and it stays paused
until it is let go), and the `Notify` effects behind the `on_assign`, `on_revoke` and
`on_lost` callbacks of `subscribe`.

When the application hears of a change: `assign` from `poll` (before it fetches the new
vgroups, so the callback may `seek`), `revoke` before vgroups are let go (still held,
so the callback may `commit` them; from poll, subscribe, unsubscribe, assignment or
close), `lost` once vgroups were taken away without a chance to commit (the consumer
was fenced or removed). Only vgroups it was told were assigned are revoked or lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from sqltopic.client.effects import Flow, Notify, RebalanceKind
from sqltopic.client.message import TopicPartition
from sqltopic.client.offsets import REWIND, Offsets
from sqltopic.client.state import Key
from sqltopic.errors import Error

# confluent-kafka's logical offsets, as `assign` takes them from an on_assign callback.
OFFSET_BEGINNING = -2  # the first retained version
OFFSET_END = -1  # the vnode's end: only rows written from now on
OFFSET_STORED = -1000  # the committed offset (what an unset position reads from)
OFFSET_INVALID = -1001  # no offset: the position is left as it is


class Rebalancing(Offsets):
    """Pause/resume, and telling the application about assignment changes."""

    def pause(self, parts: Sequence[TopicPartition]) -> None:
        """Stop fetching these vgroups; what was fetched already waits for `resume`."""
        self.paused.update(self._assigned_keys("pause", parts))

    def resume(self, parts: Sequence[TopicPartition]) -> None:
        """Fetch these vgroups again, from their positions."""
        self.paused.difference_update(self._assigned_keys("resume", parts))

    def paused_parts(self) -> list[TopicPartition]:
        """The paused vgroups, with their positions."""
        self.check_open()
        return [TopicPartition(*key, self._position_of(key)) for key in sorted(self.paused)]

    def _assigned_keys(self, what: str, parts: Sequence[TopicPartition]) -> list[Key]:
        self.check_open()
        if isinstance(parts, TopicPartition) or not isinstance(parts, Sequence):
            raise TypeError(f"{what}: give a list of TopicPartition, not {parts!r}")
        keys = [(p.topic, p.vgroup) for p in parts]
        missing = [key for key in keys if key not in self.held]
        if missing:
            raise Error(
                f"{what}: {', '.join(f'topic {t} vgroup {v}' for t, v in missing)} not "
                f"assigned to this consumer (assigned: {sorted(self.held) or 'none'}); "
                "see assignment()"
            )
        return keys

    def assign(self, parts: Sequence[TopicPartition]) -> Flow[None]:
        """confluent-kafka's `assign(partitions)` from an on_assign callback: position each
        of these assigned vgroups at its `offset` (a version, or OFFSET_BEGINNING,
        OFFSET_END; None, OFFSET_STORED and OFFSET_INVALID leave it). The group decides
        the assignment: other vgroups are an Error, not a manual assignment."""
        for part in parts:
            key = self._assigned_keys("assign", [part])[0]
            if part.offset is None or part.offset in (OFFSET_STORED, OFFSET_INVALID):
                continue
            target = part.offset
            if target == OFFSET_BEGINNING:
                target = REWIND
            elif target == OFFSET_END:
                target = (yield from self._ranges([key]))[key][1]
            yield from self.seek(replace(part, offset=target))

    def check_not_in_callback(self, what: str) -> None:
        if self.in_callback:
            raise Error(
                f"{what} cannot be called from a rebalance callback; seek, commit, "
                "position, committed, assignment, pause and resume can"
            )

    def raise_callback_error(self) -> None:
        """Raise what a rebalance callback raised (once the flow that called it is done)."""
        error, self.callback_error = self.callback_error, None
        if error is not None:
            raise error

    def _announce(self) -> Flow[None]:
        """`assign` for the held vgroups the application has not been told of."""
        new = sorted(key for key in self.held if key not in self.announced)
        if new:
            self.announced.update(new)
            yield from self._notify("assign", new)

    def _let_go(self, kind: RebalanceKind, keys: Iterable[Key]) -> Flow[None]:
        """`revoke` or `lost` for those of `keys` the application was told of."""
        told = sorted(key for key in keys if key in self.announced)
        self.announced.difference_update(told)
        if told:
            yield from self._notify(kind, told)

    def _notify(self, kind: RebalanceKind, keys: list[Key]) -> Flow[None]:
        parts = tuple(replace(TopicPartition(*key), offset=self._position_of(key)) for key in keys)
        self.in_callback = True
        try:
            error = yield Notify(kind, parts)
        finally:
            self.in_callback = False
        if isinstance(error, Exception) and self.callback_error is None:
            self.callback_error = error
