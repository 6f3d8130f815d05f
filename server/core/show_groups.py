"""SHOW CONSUMERS and SHOW SUBSCRIPTIONS: the mnode's view of consumer groups, as
TDengine shows it (docs/sql.md §10).

SHOW CONSUMERS has one row per (consumer, subscribed topic). SHOW SUBSCRIPTIONS has one
row per (topic, group, vgroup) for every group that has a live consumer on the topic or
a committed offset on one of its vgroups, unassigned vgroups included (NULL consumer);
each consumer of a broadcast group has rows of its own, under its lane `group:client`.
`mode` is the group's group.type (NULL for a group with only committed offsets left).
`lag_rows` counts the data rows in the WAL from the position to the end (every table's:
the rows the topic will look at, not those it will deliver), `lag_ms` how long ago the
first of them was written (0 when caught up): both from running counts and one record
header (wal/rows.py), never a scan (a cluster's mnode asks each dnode, `Dnode.Lags`).
`last_poll` is the group's last poll of the vgroup since the server started,
`last_commit` its last commit there.
`offset` is `log:<position>/<end>`: the holder's reported position (else the group's
committed offset) and the vgroup's next version to write; `lag` is their difference.
A shared group has no holder: its position is the start of its window (every row
before is done), and `in_flight`, `acked`, `redelivered` and `dead_lettered` count its
rows on the vgroup (server/vnode/share_windows.py; NULL for other groups and for a window
not opened since the server started).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import astuple
from typing import Any

import pyarrow as pa

from sqltopic.errors import ServerUnavailable
from sqltopic.server.common.group_names import LANE_SEP
from sqltopic.server.common.result import Result
from sqltopic.server.core.state import State
from sqltopic.server.mnode.coordinator import Coordinator, Member, Owner
from sqltopic.server.vnode.vnode import Lag, Vnode
from sqltopic.sql.topic.params import topic_of

Row = tuple[Any, ...]
Owners = dict[tuple[str, str], dict[int, Owner]]
# (subscription, group, position or None): a row whose lag is asked
Asked = tuple[str, str, int | None]


def consumers(state: State, schema: pa.Schema) -> Result:
    coordinator = state.coordinator
    if coordinator is None:
        return Result.of_rows(schema, [])
    members, _ = coordinator.snapshot()
    rows = [
        (str(m.id), m.group_id, m.client_id, m.user, m.fqdn, m.status, topic,
         _time(m.joined_us), _time(m.subscribed_us), _time(m.rebalanced_us), _parameters(m),
         m.mode)
        for m in sorted(members, key=lambda m: (m.group_id, m.id))
        for topic in m.topics
    ]  # fmt: skip
    return Result.of_rows(schema, rows)


def subscriptions(state: State, schema: pa.Schema) -> Result:
    coordinator = state.coordinator
    members, owners = coordinator.snapshot() if coordinator else ([], {})
    by_id = {m.id: m for m in members}
    modes = {m.group: m.mode for m in members}
    rows: list[Row] = []
    asked: dict[int, list[Asked]] = {}  # vgroup -> its rows' lags to find
    shared = {vgroup: vnode.shares.stats() for vgroup, vnode in state.vnodes.items()}
    for topic, group in sorted(_pairs(state, members, owners)):
        db = state.catalog.databases[state.catalog.topics[topic_of(topic)].db]
        mode = modes.get(group, "broadcast" if LANE_SEP in group else None)
        for vgroup in db.vgroups:
            owner = owners.get((topic, group), {}).get(vgroup)
            holder = by_id.get(owner.consumer) if owner else None
            row, position = _subscription(state, coordinator, topic, group, vgroup, holder)
            figures = shared.get(vgroup, {}).get((topic, group))
            counts = astuple(figures) if figures is not None else (None,) * 4
            if mode is None and figures is not None:
                mode = "shared"  # no member left, but its window on the vgroup is open
            rows.append((*row, mode, *counts))
            asked.setdefault(vgroup, []).append((topic, group, position))
    lags = {vgroup: iter(found) for vgroup, found in _lags(state, asked).items()}
    rows = [(*row, *next(lags[row[2]])) for row in rows]  # each vgroup's in row order
    return Result.of_rows(schema, rows)


def _lags(state: State, asked: dict[int, list[Asked]]) -> dict[int, list[Lag]]:
    """For each vgroup, the lag_rows, lag_ms, last_poll and last_commit of each asked
    (subscription, group, position), in order: the data rows from the position to the
    end, how long ago the first of them was written (0 when caught up). A cluster's mnode
    asks each dnode once for all of its vgroup's rows (NULLs if it does not answer)."""
    out: dict[int, list[Lag]] = {}
    now_us = state.now_us()
    for vgroup, subscriptions in asked.items():
        vnode = state.view(vgroup)
        if isinstance(vnode, Vnode):
            out[vgroup] = [vnode.subscription_lag(*sub, now_us) for sub in subscriptions]
            continue
        try:
            out[vgroup] = vnode.lags(subscriptions)
        except ServerUnavailable:  # the dnode is away: its rows' other columns say so
            out[vgroup] = [(None, None, None, None)] * len(subscriptions)
    return out


def _pairs(state: State, members: list[Member], owners: Owners) -> Iterator[tuple[str, str]]:
    """(topic, group) pairs to show: live subscribers', and committed offsets' groups."""
    seen: set[tuple[str, str]] = set()
    topics = state.catalog.topics
    candidates = [(t, m.group) for m in members for t in m.topics] + list(owners)
    for name, topic in topics.items():
        for vgroup in state.catalog.databases[topic.db].vgroups:
            candidates += state.view(vgroup).offsets.subscriptions(name)
    for pair in candidates:
        if topic_of(pair[0]) in topics and pair not in seen:
            seen.add(pair)
            yield pair


def _subscription(
    state: State, coordinator: Coordinator | None, topic: str, group: str, vgroup: int,
    holder: Member | None,
) -> tuple[Row, int | None]:  # fmt: skip
    """The row's first columns, and the position they show (None: none known)."""
    vnode = state.view(vgroup)
    end = vnode.wal.next_version
    report = coordinator.progress_of(topic, group, vgroup) if coordinator and holder else None
    position = report.position if report and report.position is not None else None
    if position is None:
        position = vnode.offsets.get(topic, group)
    rows = coordinator.rows(topic, group, vgroup) if coordinator else None
    return (
        topic, group, vgroup,
        str(holder.id) if holder else None, holder.user if holder else None,
        holder.fqdn if holder else None,
        f"log:{position}/{end}" if position is not None else None,
        rows,
        end - position if position is not None else None,
    ), position  # fmt: skip


def _time(us: int) -> int | None:
    return us or None


def _parameters(member: Member) -> str:
    """TDengine's form: `tbname:1,commit:1,interval:5000ms,reset:latest`."""
    p = member.parameters
    flag = {"true": 1, "false": 0}
    return (
        f"tbname:{flag.get(p.get('msg.with.table.name', 'true'), 1)},"
        f"commit:{flag.get(p.get('enable.auto.commit', 'true'), 1)},"
        f"interval:{p.get('auto.commit.interval.ms', '5000')}ms,"
        f"reset:{p.get('auto.offset.reset', 'latest')}"
    )
