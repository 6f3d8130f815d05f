"""Group types through a real server: `broadcast` gives every consumer every row with
offsets of its own (a consumer reopened with its client.id resumes), `exclusive` admits
one consumer, and a consumer the group refuses gets GroupConflict and changes nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from sqltopic.aio import Consumer as AsyncConsumer
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.errors import ConfigError, GroupConflict
from tests.client.support import SELECT, config, drain, drain_async, later_rows, rows_of
from tests.live_server import ServerProcess


def _broadcast(address: str, client: str, **extra: Any) -> dict[str, object]:
    return config(address, "b", group_type="broadcast", client_id=client, **extra)


def _all_rows(power: Connection) -> Counter[tuple[Any, ...]]:
    return Counter(power.execute(SELECT).rows)


def _subscriptions(power: Connection) -> list[tuple[Any, ...]]:
    """(consumer_group, vgroup_id, consumer_id is set, mode) of SHOW SUBSCRIPTIONS."""
    shown = power.execute("SHOW SUBSCRIPTIONS")
    names = shown.columns
    return sorted(
        (r[names.index("consumer_group")], r[names.index("vgroup_id")],
         r[names.index("consumer_id")] is not None, r[names.index("mode")])
        for r in shown.rows
    )  # fmt: skip


def test_broadcast_consumers_each_get_every_row_and_resume_from_their_own_offsets(
    power: Connection, server: ServerProcess
) -> None:
    everything = _all_rows(power)
    with (
        Consumer(_broadcast(server.address, "c1")) as c1,
        Consumer(_broadcast(server.address, "c2")) as c2,
    ):
        c1.subscribe(["overvoltage"])
        c2.subscribe(["overvoltage"])
        assert {p.vgroup for p in c1.assignment()} == {1, 2}  # every vgroup, each of them
        assert {p.vgroup for p in c2.assignment()} == {1, 2}
        assert rows_of(drain(c1)) == everything
        assert rows_of(drain(c2)) == everything
        c1.commit(asynchronous=False)  # c2 commits nothing
        consumers = power.execute("SHOW CONSUMERS")
        mode, group = consumers.columns.index("mode"), consumers.columns.index("consumer_group")
        assert sorted((r[group], r[mode]) for r in consumers.rows) == [("b", "broadcast")] * 2
        assert _subscriptions(power) == [
            ("b:c1", 1, True, "broadcast"), ("b:c1", 2, True, "broadcast"),
            ("b:c2", 1, True, "broadcast"), ("b:c2", 2, True, "broadcast"),
        ]  # fmt: skip
    power.execute(later_rows(1_700_000_000_000, 3))
    new = _all_rows(power) - everything
    assert sum(new.values()) == 3
    with (
        Consumer(_broadcast(server.address, "c1")) as c1,
        Consumer(_broadcast(server.address, "c2")) as c2,
    ):
        c1.subscribe(["overvoltage"])
        c2.subscribe(["overvoltage"])
        assert rows_of(drain(c1)) == new  # from its own committed offsets
        assert rows_of(drain(c2)) == everything + new  # committed nothing: earliest again
    # DROP CONSUMER GROUP takes the group's lanes with it
    power.execute("DROP CONSUMER GROUP b ON overvoltage")
    assert _subscriptions(power) == []


def test_an_exclusive_group_admits_one_consumer(power: Connection, server: ServerProcess) -> None:
    everything = _all_rows(power)
    with Consumer(config(server.address, "x", group_type="exclusive")) as first:
        first.subscribe(["overvoltage"])
        (holder,) = {row[0] for row in power.execute("SHOW CONSUMERS").rows}
        with Consumer(config(server.address, "x", group_type="exclusive")) as second:
            with pytest.raises(GroupConflict, match=r"consumer group x is exclusive") as refused:
                second.subscribe(["overvoltage"])
            assert f"consumer {holder} holds it" in str(refused.value)
        assert rows_of(drain(first)) == everything  # still all its own
    with Consumer(config(server.address, "x", group_type="exclusive")) as second:
        second.subscribe(["overvoltage"])  # the first closed: the group is free
        assert {p.vgroup for p in second.assignment()} == {1, 2}


@pytest.mark.parametrize(
    ("first", "second", "says"),
    [
        ({}, {"group_type": "broadcast", "client_id": "k"},
         "has group.type vgroup .* asks for group.type broadcast: use group.type vgroup"),
        ({"group_type": "broadcast", "client_id": "k"}, {},
         "has group.type broadcast .* asks for group.type vgroup"),
        ({"group_type": "exclusive"}, {"group_type": "vgroup"}, "has group.type exclusive"),
        ({"group_type": "broadcast", "client_id": "k"},
         {"group_type": "broadcast", "client_id": "k"}, "has client.id k, and consumer"),
    ],
)  # fmt: skip
def test_a_consumer_the_group_refuses_changes_nothing(
    power: Connection, server: ServerProcess, first: dict[str, Any], second: dict[str, Any],
    says: str,
) -> None:  # fmt: skip
    with Consumer(config(server.address, "m", **first)) as member:
        member.subscribe(["overvoltage"])
        held = member.assignment()
        before = (power.execute("SHOW CONSUMERS").rows, _subscriptions(power))
        with Consumer(config(server.address, "m", **second)) as other:
            with pytest.raises(GroupConflict, match=says):
                other.subscribe(["overvoltage"])
            assert other.assignment() == []
        assert (power.execute("SHOW CONSUMERS").rows, _subscriptions(power)) == before
        assert member.assignment() == held


def test_broadcast_needs_a_client_id_and_group_type_a_known_value(server: ServerProcess) -> None:
    with pytest.raises(ConfigError, match=r"client.id: required with group.type broadcast"):
        Consumer(config(server.address, "b", group_type="broadcast", client_id=""))
    with pytest.raises(ConfigError, match=r"group.type: 'shard' is not one of vgroup, exclusive"):
        Consumer(config(server.address, "b", group_type="shard"))


def test_the_asyncio_consumer_joins_a_broadcast_group(
    power: Connection, server: ServerProcess
) -> None:
    everything = _all_rows(power)

    async def scenario() -> None:
        async with AsyncConsumer(_broadcast(server.address, "a1")) as consumer:
            await consumer.subscribe(["overvoltage"])
            assert rows_of(await drain_async(consumer)) == everything
        with Consumer(_broadcast(server.address, "s1")) as other:
            other.subscribe(["overvoltage"])
            assert rows_of(drain(other)) == everything

    asyncio.run(scenario())
