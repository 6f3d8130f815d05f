"""Consumers on a cluster, as real processes: a group spanning three dnodes polls and
commits at the dnodes hosting its vgroups (fenced by the assignments the mnode ships
them), sync and asyncio alike; committed offsets hold across a consumer's restart and a
dnode's SIGKILL."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.aio import Consumer as AsyncConsumer
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message, TopicPartition
from sqltopic.errors import VgroupUnavailable
from sqltopic.server.core.routing import vgroup_for
from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly
from tests.client.support import config
from tests.cluster.support import Cluster

pytestmark = pytest.mark.cluster

SCHEMA = """
CREATE DATABASE power VGROUPS 6;
CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT);
CREATE TOPIC high AS SELECT ts, v, tbname FROM power.meters WHERE v >= 100;
"""
# A condition that does not hold within this long never will.
DEADLINE_S = 60.0
DEVICES = [f"d{i}" for i in range(30)]


@pytest.fixture
def three(three_dnodes: Cluster) -> Cluster:
    """The issue's cluster (an mnode and three dnodes) with this module's schema."""
    three_dnodes.sql(SCHEMA)
    return three_dnodes


def _write(
    cluster: Cluster, start: int, count: int, devices: list[str] = DEVICES
) -> Counter[tuple[Any, ...]]:
    """`count` rows per device from ts `start` (v = ts); the rows topic `high`
    delivers (those with v >= 100)."""
    rows = [(d, t) for t in range(start, start + count) for d in devices]
    with cluster.connect() as conn:
        ts = pa.array([t for _, t in rows], pa.timestamp("ms"))
        conn.write("power.meters", pa.table({
            "tbname": [d for d, _ in rows], "ts": ts, "v": [t for _, t in rows],
            "loc": [1] * len(rows),
        }))  # fmt: skip
    return Counter((t, t, d) for d, t in rows if t >= 100)


def _rows(messages: list[Message]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for message in messages:
        for ts, v, name in message.rows():
            out[(int(ts.timestamp() * 1000), v, name)] += 1
    return out


def _take(consumers: list[Consumer], want: Counter[tuple[Any, ...]]) -> list[Message]:
    """Poll the consumers in turn until they received `want` between them."""
    got: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while _rows(got) != want:
        assert time.monotonic() < deadline, f"{sum(_rows(got).values())} of {sum(want.values())}"
        for consumer in consumers:
            message = consumer.poll(0.2)
            if message is not None:
                got.append(message)
    return got


def test_a_group_spanning_dnodes_gets_every_row_once_and_commits_there(three: Cluster) -> None:
    want = _write(three, 50, 100)  # rows 100..149 of each device
    dnodes = {d.address for d in three.dnodes}
    settings = config(three.mnode.address, "g1")
    first, second = Consumer(settings), Consumer(settings)
    try:
        first.subscribe(["high"])
        second.subscribe(["high"])
        got = _take([first, second], want)
        assert sum(m.row_count for m in got) == sum(want.values())  # each row once
        parts = first.assignment() + second.assignment()
        assert sorted(p.vgroup for p in parts) == [1, 2, 3, 4, 5, 6]
        assert {m.vgroup for m in got} <= {p.vgroup for p in parts}
        first.commit(asynchronous=False)
        second.commit(asynchronous=False)
    finally:
        first.close()
        second.close()
    assert dnodes == {str(r[3]) for r in three.sql("SHOW power.VGROUPS")}
    more = _write(three, 150, 10)
    again = Consumer(settings)  # resumes from the offsets committed at the dnodes
    try:
        again.subscribe(["high"])
        assert _rows(_take([again], more)) == more
        # seeking by time asks each vgroup's dnode: from the epoch, everything again
        assert {p.offset for p in again.seek_to_time(0)} == {1}
        assert _rows(_take([again], want + more)) == want + more
        _write(three, 160, 5)  # 5 rows per device, not polled yet
        lags = again.lag()  # asked of each vgroup's dnode, from the consumer's positions
        assert {lag.vgroup for lag in lags} == {1, 2, 3, 4, 5, 6}
        assert sum(lag.rows or 0 for lag in lags) == 5 * len(DEVICES)
        again.commit(asynchronous=False)  # where SHOW SUBSCRIPTIONS counts from once it left
    finally:
        again.close()
    # the mnode asks each dnode for its vgroups' lags, from the committed offsets
    shown = [r for r in three.sql("SHOW SUBSCRIPTIONS") if r[1] == "g1"]
    assert len(shown) == 6
    assert sum(int(str(r[14])) for r in shown) == 5 * len(DEVICES)  # lag_rows
    assert all(r[17] is not None for r in shown)  # last_commit
    # not subscribed: its look-ups go to the mnode, which hosts no vgroup
    with Consumer(settings) as idle, pytest.raises(VgroupUnavailable, match="hosted by a dnode"):
        idle.offsets_for_times([TopicPartition("high", 1, 0)])


def test_an_asyncio_consumer_reads_from_the_dnodes(three: Cluster) -> None:
    want = _write(three, 90, 20)

    async def run() -> Counter[tuple[Any, ...]]:
        async with AsyncConsumer(config(three.mnode.address, "g2")) as consumer:
            await consumer.subscribe(["high"])
            got: list[Message] = []
            deadline = time.monotonic() + DEADLINE_S
            while _rows(got) != want:
                assert time.monotonic() < deadline
                message = await consumer.poll(0.2)
                if message is not None:
                    got.append(message)
            return _rows(got)

    assert asyncio.run(run()) == want


def test_consumers_of_other_dnodes_go_on_while_one_is_killed(three: Cluster) -> None:
    want = _write(three, 100, 5)
    consumer = Consumer(config(three.mnode.address, "g3"))
    try:
        consumer.subscribe(["high"])
        _take([consumer], want)
        consumer.commit(asynchronous=False)
        victim = three.dnodes[1]
        victim.kill()
        live = _devices_off(three, victim.address)
        more = _write(three, 200, 5, live)
        assert _rows(_take([consumer], more)) == more  # the other dnodes' rows arrive
        back = three.restart(victim)
        three.wait_status(back, "ready")
        rest = _write(three, 300, 3)
        assert _rows(_take([consumer], rest)) == rest  # and the restarted one's again
    finally:
        consumer.close()


def _devices_off(cluster: Cluster, dead: str) -> list[str]:
    """The devices whose vgroups live on dnodes other than the one at `dead`."""
    placement = {int(str(r[1])): str(r[3]) for r in cluster.sql("SHOW power.VGROUPS")}
    db = load_readonly(cluster.mnode.data / CATALOG_FILE)[0].databases["power"]
    return [d for d in DEVICES if placement[vgroup_for(db, d)] != dead]


def test_writes_and_polls_go_on_while_the_mnode_is_down(three: Cluster) -> None:
    want = _write(three, 100, 5)  # the devices' tables exist from here on
    consumer = Consumer(config(three.mnode.address, "g4"))
    try:
        consumer.subscribe(["high"])
        _take([consumer], want)
        with three.connect() as conn:  # a producer that wrote before: it has the routes
            one = pa.table({"ts": pa.array([1], pa.timestamp("ms")), "v": [1]})
            assert conn.write("power.d0", one) == 1
            three.mnode.kill()
            rows = [(d, t) for t in range(400, 403) for d in DEVICES]
            ts = pa.array([t for _, t in rows], pa.timestamp("ms"))
            written = conn.write("power.meters", pa.table({
                "tbname": [d for d, _ in rows], "ts": ts, "v": [t for _, t in rows],
            }))  # fmt: skip
            assert written == len(rows)
        more = Counter((t, t, d) for d, t in rows)
        assert _rows(_take([consumer], more)) == more  # assignments made go on
        back = three.restart_mnode()
        three.mnode = back
        for dnode in three.dnodes:
            three.wait_status(dnode, "ready")
    finally:
        consumer.close()


def test_a_shared_group_spanning_dnodes_leases_each_row_once(three: Cluster) -> None:
    """A shared group on a cluster: each consumer reads every vgroup at its dnode; each
    row is leased to one of them and acknowledged once; a consumer that closes with
    leases unacknowledged hands them to the other; acknowledged rows stay so at the
    dnodes for a consumer that joins later."""
    want = _write(three, 100, 20)
    settings = config(three.mnode.address, "s1", group_type="shared", max_poll_rows=50,
                      share_acquire_mode="record_limit")  # fmt: skip
    first, second = Consumer(settings), Consumer(settings)
    try:
        first.subscribe(["high"])
        second.subscribe(["high"])
        held = None
        while held is None:  # a lease the first consumer will not acknowledge
            held = first.poll(0.2)
        got: list[Message] = []
        deadline = time.monotonic() + DEADLINE_S
        first.close()  # its lease goes back to the group
        while _rows(got) != want:
            assert time.monotonic() < deadline, f"{sum(_rows(got).values())} rows"
            message = second.poll(0.2)
            if message is not None:
                assert second.ack(message) == message.row_count
                got.append(message)
        assert sum(m.row_count for m in got) == sum(want.values())  # each row once
        assert _rows([held]) <= want  # the released rows came again, to the other
        assert {p.vgroup for p in second.assignment()} == {1, 2, 3, 4, 5, 6}
    finally:
        first.close()
        second.close()
    more = _write(three, 200, 2)
    later = Consumer(settings)
    try:
        later.subscribe(["high"])
        assert _rows(_take([later], more)) == more  # nothing acknowledged comes again
    finally:
        later.close()
