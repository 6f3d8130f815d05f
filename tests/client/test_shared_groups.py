"""Shared groups through a real server: every consumer reads every vgroup, rows are
leased to them, acknowledged one by one, released rows come again with their delivery
count raised, and a closed consumer's leases go to the others at once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from sqltopic.aio import Consumer as AsyncConsumer
from sqltopic.client import Connection
from sqltopic.client.consumer import Consumer
from sqltopic.client.message import Message
from sqltopic.errors import ConfigError, GroupConflict, NotFoundError
from tests.client.support import DEADLINE_S, SELECT, config, keyed_rows, later_rows
from tests.live_server import ServerProcess

Row = tuple[Any, ...]


def _shared(address: str, **extra: Any) -> dict[str, object]:
    return config(address, "s", group_type="shared", **extra)


def _all_rows(power: Connection) -> Counter[Row]:
    return Counter(power.execute(SELECT).rows)


def _until(
    consumers: list[Consumer], wanted: int, ack: bool = True, who: Counter[int] | None = None
) -> list[Message]:
    """Poll the consumers in turn until `wanted` rows came (acknowledging each message);
    `who` counts the rows each consumer got."""
    got: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    while sum(m.row_count for m in got) < wanted:
        assert time.monotonic() < deadline, f"{sum(m.row_count for m in got)} of {wanted} rows"
        for n, consumer in enumerate(consumers):
            message = consumer.poll(0.2)
            if message is not None:
                got.append(message)
                if who is not None:
                    who[n] += message.row_count
                if ack:
                    assert consumer.ack(message) == message.row_count
    return got


def _rows(messages: list[Message]) -> Counter[Row]:
    return Counter(row for m in messages for row in m.rows())


WIDE = """
CREATE DATABASE wide VGROUPS 4;
CREATE STABLE wide.meters (ts TIMESTAMP, v INT) TAGS (site INT);
CREATE TOPIC spread AS SELECT ts, v, tbname FROM wide.meters WHERE v % 3 > 0;
"""


def test_eight_consumers_on_four_vgroups_all_work_and_each_row_is_acknowledged_once(
    conn: Connection, server: ServerProcess
) -> None:
    conn.execute(WIDE)
    for site in range(16):  # child tables spread over the four vgroups
        values = " ".join(f"({1_700_000_000_000 + i}, {i})" for i in range(60))
        conn.execute(f"INSERT INTO wide.m{site} USING wide.meters TAGS ({site}) VALUES {values}")
    everything = Counter(conn.execute("SELECT ts, v, tbname FROM wide.meters WHERE v % 3 > 0").rows)
    total = sum(everything.values())
    # record_limit: leases of 10 rows (each write's 40 rows go out as four), so that
    # every consumer of the eight gets some of the 16 writes
    limit = {"max_poll_rows": 10, "share_acquire_mode": "record_limit"}
    consumers = [Consumer(_shared(server.address, **limit)) for _ in range(8)]
    try:
        for consumer in consumers:
            consumer.subscribe(["spread"])
        for consumer in consumers:
            assert {p.vgroup for p in consumer.assignment()} == {1, 2, 3, 4}
        who: Counter[int] = Counter()
        got = _until(consumers, total, who=who)  # each message acknowledged: all its rows
        assert _rows(got) == everything
        assert max(m.row_count for m in got) == 10
        assert len(who) == 8, f"every consumer got rows: {who}"
        assert {m.delivery_count for m in got} == {1}
        ids = [(m.vgroup, *rid) for m in got for rid in m.row_ids]  # ids are per vgroup
        assert len(ids) == len(set(ids)) == total
        for consumer in consumers:  # nothing comes again: every row was acknowledged
            assert consumer.poll(0.3) is None
        shown = conn.execute("SHOW SUBSCRIPTIONS")
        names = shown.columns
        figures = [
            {k: r[names.index(k)] for k in ("vgroup_id", "consumer_id", "mode", "in_flight",
                                            "acked", "redelivered", "dead_lettered", "lag")}
            for r in shown.rows
        ]  # fmt: skip
        assert sorted(f["vgroup_id"] for f in figures) == [1, 2, 3, 4]
        assert all(
            (f["consumer_id"], f["mode"], f["in_flight"], f["redelivered"], f["dead_lettered"])
            == (None, "shared", 0, 0, 0)
            for f in figures
        )
        assert sum(f["acked"] for f in figures) == total
        assert all(f["lag"] == 0 for f in figures)  # the windows' starts are at the ends
    finally:
        for consumer in consumers:
            consumer.close()


def test_a_lease_holds_whole_writes_by_default(conn: Connection, server: ServerProcess) -> None:
    """batch_optimized (the default, Kafka's): max.poll.rows is soft, as for every poll;
    a lease stops after the write that reaches it and never splits one."""
    conn.execute(WIDE)
    for site in (0, 1):
        values = " ".join(f"({1_700_000_000_000 + i}, {i})" for i in range(60))
        conn.execute(f"INSERT INTO wide.m{site} USING wide.meters TAGS ({site}) VALUES {values}")
    with Consumer(_shared(server.address, max_poll_rows=10)) as consumer:
        consumer.subscribe(["spread"])
        got = _until([consumer], 80)
    assert sorted(m.row_count for m in got) == [40, 40]  # each write's 40 rows at once
    assert all(list(m.row_ids) == [(m.offset, i) for i in range(60) if i % 3] for m in got)


def test_nack_delivers_again_with_the_count_raised_and_close_releases(
    power: Connection, server: ServerProcess
) -> None:
    everything = _all_rows(power)
    total = sum(everything.values())
    with Consumer(_shared(server.address)) as first, Consumer(_shared(server.address)) as other:
        first.subscribe(["overvoltage"])
        other.subscribe(["overvoltage"])
        held = _until([first], total, ack=False)
        assert _rows(held) == everything
        message = held[0]
        assert first.nack(message, rows=[0]) == 1
        again = _until([first], 1, ack=False)
        assert again[0].rows() == [message.rows()[0]]
        assert again[0].delivery_counts == (2,)
        first.close()  # its leases end: the other consumer gets every row left
        rest = _until([other], total - 0)
        assert _rows(rest) == everything
        assert max(m.delivery_count or 0 for m in rest) >= 2


def test_acknowledging_outside_a_shared_group_is_refused(
    power: Connection, server: ServerProcess
) -> None:
    with Consumer(config(server.address, "v")) as consumer:
        consumer.subscribe(["overvoltage"])
        message = _until([consumer], 1, ack=False)[0]
        with pytest.raises(ConfigError, match="only shared groups acknowledge rows"):
            consumer.ack(message)
    with Consumer(_shared(server.address)) as consumer:
        consumer.subscribe(["overvoltage"])
        message = _until([consumer], 1, ack=False)[0]
        with pytest.raises(ConfigError, match="acknowledges rows instead of committing"):
            consumer.commit(message)
        with pytest.raises(ConfigError, match=r"row 99 is not a position"):
            consumer.ack(message, rows=[99])


def _nack_all(consumer: Consumer, total: int, count: int) -> None:
    """Take every row (at delivery `count`) and release it again."""
    for message in _until([consumer], total, ack=False):
        assert message.delivery_counts == (count,) * message.row_count
        assert consumer.nack(message) == message.row_count


def test_rows_out_of_deliveries_go_to_the_dead_letter_table_and_a_topic_delivers_them(
    power: Connection, server: ServerProcess
) -> None:
    everything = _all_rows(power)
    total = sum(everything.values())
    settings = {"max_deliveries": 2, "dead_letter_table": "power.dlq"}
    with Consumer(_shared(server.address, **settings)) as consumer:
        consumer.subscribe(["overvoltage"])
        _nack_all(consumer, total, 1)
        _nack_all(consumer, total, 2)
        deadline = time.monotonic() + DEADLINE_S
        while not _dead(power, total):
            assert time.monotonic() < deadline, "the rows did not reach power.dlq"
            assert consumer.poll(0.2) is None  # given up: never delivered a third time
    shown = power.execute(
        "SELECT topic, group_id, deliveries, reason, ts, current, voltage, location, row_tbname "
        "FROM power.dlq"
    )
    assert {r[:4] for r in shown.rows} == {("overvoltage", "s", 2, "max.deliveries")}
    assert Counter(r[4:] for r in shown.rows) == everything
    # dead letters are rows like any other: a topic delivers them
    power.execute("CREATE TOPIC dead AS SELECT ts, voltage, vgroup, version FROM power.dlq")
    with Consumer(config(server.address, "reader")) as reader:
        reader.subscribe(["dead"])
        got = _until([reader], total, ack=False)
    assert sorted(r[1] for m in got for r in m.rows()) == sorted(r[2] for r in everything)


def _dead(power: Connection, total: int) -> bool:
    tables = [r[0] for r in power.execute("SHOW power.TABLES").rows]
    if "dlq" not in tables:
        return False
    return int(power.execute("SELECT count(*) FROM power.dlq").rows[0][0]) == total


def test_the_first_member_fixes_the_groups_settings(
    power: Connection, server: ServerProcess
) -> None:
    with Consumer(_shared(server.address, ack_timeout_ms=5_000)) as first:
        first.subscribe(["overvoltage"])
        second = Consumer(_shared(server.address))
        with second, pytest.raises(GroupConflict, match=r"ack\.timeout\.ms 5000 \(asked: 30000\)"):
            second.subscribe(["overvoltage"])
        with Consumer(_shared(server.address, ack_timeout_ms=5_000)) as third:
            third.subscribe(["overvoltage"])  # the same settings: welcome
    lost = Consumer(_shared(server.address, dead_letter_table="nowhere.dlq"))
    with lost, pytest.raises(NotFoundError, match="nowhere"):
        lost.subscribe(["overvoltage"])
    with pytest.raises(ConfigError, match=r"max\.deliveries: a setting of shared groups"):
        Consumer(config(server.address, "v", max_deliveries=3))


def test_the_asyncio_consumer_acknowledges_and_releases(
    power: Connection, server: ServerProcess
) -> None:
    everything = _all_rows(power)
    total = sum(everything.values())

    async def take(consumer: AsyncConsumer, wanted: int) -> list[Message]:
        got: list[Message] = []
        deadline = time.monotonic() + DEADLINE_S
        while sum(m.row_count for m in got) < wanted:
            assert time.monotonic() < deadline
            message = await consumer.poll(0.2)
            got += [message] if message is not None else []
        return got

    async def scenario() -> None:
        async with AsyncConsumer(_shared(server.address)) as consumer:
            await consumer.subscribe(["overvoltage"])
            first = await take(consumer, total)
            assert _rows(first) == everything
            assert await consumer.nack(first[0], rows=[0]) == 1
            again = await take(consumer, 1)
            assert (again[0].rows(), again[0].delivery_counts) == ([first[0].rows()[0]], (2,))
            for message in first + again:
                await consumer.ack(message)  # the nacked row is no longer held: skipped
            assert await consumer.poll(0.3) is None

    asyncio.run(scenario())


def test_with_auto_commit_the_next_poll_accepts_what_the_last_ones_handed_out(
    power: Connection, server: ServerProcess
) -> None:
    power.execute(later_rows(1_700_000_000_000, 300))
    everything = _all_rows(power)
    total = sum(everything.values())
    implicit = _shared(server.address, enable_auto_commit="true", max_poll_rows=50)
    with Consumer(implicit) as consumer:
        consumer.subscribe(["overvoltage"])
        got = _until([consumer], total, ack=False)  # each poll accepts the messages before
        assert _rows(got) == everything
        shown = power.execute("SHOW SUBSCRIPTIONS")
        acked, in_flight = shown.columns.index("acked"), shown.columns.index("in_flight")
        # every message but the last of each vgroup rode a later poll (or is on its way)
        assert sum(r[acked] for r in shown.rows) + sum(r[in_flight] for r in shown.rows) == total
    # close sent the rest: the group has nothing left to deliver
    with Consumer(_shared(server.address)) as after:
        after.subscribe(["overvoltage"])
        assert after.poll(1.0) is None
    shown = power.execute("SHOW SUBSCRIPTIONS")
    assert sum(r[shown.columns.index("acked")] for r in shown.rows) == total


def test_key_shared_keeps_each_tables_rows_in_wal_order_through_joins_and_leaves(
    conn: Connection, server: ServerProcess
) -> None:
    keyed_rows(conn, tables=8, writes=4, rows=40)
    keyed = config(server.address, "k", group_type="key_shared", max_poll_rows=30)
    seen: list[tuple[int, str, int]] = []  # (consumer, table, ts) in the order received
    consumers = [Consumer(keyed), Consumer(keyed)]
    try:
        for consumer in consumers:
            consumer.subscribe(["by_meter"])

        def take(rows: int) -> None:
            got = 0
            deadline = time.monotonic() + DEADLINE_S
            while got < rows:
                assert time.monotonic() < deadline, f"{got} of {rows} rows"
                for n, consumer in enumerate(consumers):
                    message = consumer.poll(0.1)
                    if message is None:
                        continue
                    seen.extend((n, r[2], r[0]) for r in message.rows())
                    got += message.row_count
                    consumer.ack(message)

        take(8 * 160 // 2)
        consumers.append(Consumer(keyed))  # a join moves some keys to it
        consumers[-1].subscribe(["by_meter"])
        take(8 * 160 // 4)
        consumers[0].close()  # a leave moves its keys to the others
        consumers[0] = Consumer(keyed)
        consumers[0].subscribe(["by_meter"])
        take(8 * 160 - len(seen))  # the rest (messages overshoot the counts above)
    finally:
        for consumer in consumers:
            consumer.close()
    assert len(seen) == 8 * 160
    by_table: dict[str, list[int]] = {}
    holders: dict[str, set[int]] = {}
    for n, table, ts in seen:
        by_table.setdefault(table, []).append(ts)
        holders.setdefault(table, set()).add(n)
    for table, stamps in by_table.items():  # each table's rows in WAL order, once each
        assert stamps == sorted(stamps), table
        assert len(set(stamps)) == 160, table
    assert len({n for hs in holders.values() for n in hs}) >= 2  # keys were spread


ZONED = """
CREATE DATABASE zoned VGROUPS 1;
CREATE STABLE zoned.meters (ts TIMESTAMP, v INT) TAGS (zone INT);
CREATE TOPIC by_zone AS SELECT ts, v, v % 4 AS bucket, zone FROM zoned.meters;
"""


@pytest.mark.parametrize(("key", "column"), [("zone", 3), ("bucket", 2)])
def test_group_key_keys_rows_by_a_tag_or_a_column(
    conn: Connection, server: ServerProcess, key: str, column: int
) -> None:
    """group.key: all rows of one tag value (or column value) stay with one consumer,
    in WAL order, whichever of the 16 tables wrote them."""
    conn.execute(ZONED)
    first = 1_700_000_000_000
    for write in range(3):
        for n in range(16):  # zone = n % 4: four tables per zone
            ts = first + write * 16 + n
            values = f"({ts}, {n + write})"
            conn.execute(
                f"INSERT INTO zoned.m{n} USING zoned.meters TAGS ({n % 4}) VALUES {values}"
            )
    keyed = config(server.address, "z", group_type="key_shared", group_key=key, max_poll_rows=5)
    seen: list[tuple[int, int, int]] = []  # (consumer, key value, ts) as received
    consumers = [Consumer(keyed), Consumer(keyed)]
    try:
        for consumer in consumers:
            consumer.subscribe(["by_zone"])
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 48:
            assert time.monotonic() < deadline, f"{len(seen)} of 48 rows"
            for n, consumer in enumerate(consumers):
                message = consumer.poll(0.1)
                if message is not None:
                    seen.extend((n, r[column], r[0]) for r in message.rows())
                    consumer.ack(message)
    finally:
        for consumer in consumers:
            consumer.close()
    assert len(seen) == 48
    holders: dict[int, set[int]] = {}
    stamps: dict[int, list[int]] = {}
    for n, value, ts in seen:
        holders.setdefault(value, set()).add(n)
        stamps.setdefault(value, []).append(ts)
    assert all(len(h) == 1 for h in holders.values()), holders  # one consumer per key
    assert all(s == sorted(s) for s in stamps.values())  # in WAL order per key


def test_a_group_key_is_checked_at_subscribe(conn: Connection, server: ServerProcess) -> None:
    conn.execute(ZONED)
    unknown = config(server.address, "z", group_type="key_shared", group_key="phase")
    expected = r"group\.key: 'phase' is neither a column of topic by_zone's rows \(ts, v, bucket"
    with Consumer(unknown) as consumer, pytest.raises(ConfigError, match=expected):
        consumer.subscribe(["by_zone"])
    with pytest.raises(ConfigError, match=r"group\.key: a setting of key_shared groups"):
        Consumer(config(server.address, "s", group_type="shared", group_key="zone"))
    first = Consumer(config(server.address, "k", group_type="key_shared", group_key="zone"))
    other = Consumer(config(server.address, "k", group_type="key_shared"))
    try:
        first.subscribe(["by_zone"])
        with pytest.raises(GroupConflict, match=r"group\.key zone \(asked: none\)"):
            other.subscribe(["by_zone"])
    finally:
        first.close()
        other.close()
