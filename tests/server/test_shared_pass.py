"""The shared pass (topic_reader.read_topics, server/dnode/live.py): every topic reads exactly
what it reads alone, from every position; a topic without a table among the entries is
not evaluated; held polls are answered only when their topic has rows."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest

from sqltopic.server.core import topic_reader
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import READ_BYTES, TopicBlock
from sqltopic.server.dnode import live
from sqltopic.server.dnode.live import LiveHub, Verdict
from sqltopic.server.dnode.poll import Message, PollLimits, read_message
from sqltopic.server.vnode.vnode import Vnode
from sqltopic.sql.topic import evaluate
from tests.server.support import block_rows, vgroups_of

# Topics of every kind over the power fixture's `meters`: device sets, tag and value
# filters, a child table, stable and database topics with and without DDL events.
TOPICS = {
    "dev_ab": "SELECT ts, current, voltage FROM meters WHERE tbname IN ('a', 'b')",
    "dev_c": "SELECT ts, voltage, tbname FROM meters WHERE tbname = 'c' AND voltage > 2",
    "site_x": "SELECT ts, current, location FROM meters WHERE location = 'x'",
    "group_2": "SELECT * FROM meters WHERE groupid = 2 OR voltage > 7",
    "loud": "SELECT ts, voltage FROM meters WHERE voltage >= 5",
    "now_tag": "SELECT ts, voltage FROM meters WHERE groupid < 100 AND ts < NOW()",
    "child_b": "SELECT ts, voltage * 2 AS double FROM b",
    "st_x": "STABLE meters WHERE location = 'x'",
    "st_all_meta": "WITH META AS STABLE meters",
    "db_meta": "WITH META AS DATABASE power",
    "db_only_meta": "ONLY META AS DATABASE power",
}


def _topic_sql(name: str, body: str) -> str:
    if body.startswith("SELECT"):
        return f"CREATE TOPIC {name} AS {body}"
    if body.startswith(("WITH META", "ONLY META")):
        head, _, rest = body.partition(" AS ")
        return f"CREATE TOPIC {name} {head} AS {rest}"
    return f"CREATE TOPIC {name} AS {body}"


def _history(power: Engine) -> None:
    """Data of several tables in several vgroups, with DDL among it."""
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1); CREATE TABLE b USING meters TAGS ('y', 2);"
        "CREATE TABLE c USING meters TAGS ('x', 3); CREATE TABLE d USING meters TAGS ('z', 4)"
    )
    for name, body in TOPICS.items():
        power.execute(_topic_sql(name, body))
    for k in range(10):
        c = "(ts, current, voltage, phase)"
        d = f"d {c} VALUES ({k}, 3, {k + 3}, 1)" if k <= 6 else ""
        power.execute(
            f"INSERT INTO a {c} VALUES ({k}, {k}.5, {k}, 1) b {c} VALUES ({k}, 1, {k + 1}, 1) "
            f"c {c} VALUES ({k}, 2, {k + 2}, 1) {d}"
        )
        if k == 4:
            power.execute("ALTER STABLE meters ADD COLUMN extra INT")
        if k == 6:
            power.execute("CREATE TABLE e USING meters TAGS ('x', 5); DROP TABLE d")
    power.execute("INSERT INTO e VALUES (100, 1, 9, 1, 7)")


def _comparable(items: list[Any]) -> list[Any]:
    return [dataclasses.astuple(item) if not hasattr(item, "data") else
            (item.table_name, item.data.to_pylist(), item.first_version, item.last_version)
            for item in items]  # fmt: skip


def test_every_topic_reads_in_the_shared_pass_what_it_reads_alone(power: Engine) -> None:
    _history(power)
    names = list(TOPICS)
    for vgroup in vgroups_of(power, "power"):
        end = power.state.vnode(vgroup).wal.next_version
        for position in range(1, end + 1):
            found, next_version = power.read_topics(names, vgroup, position)
            assert next_version == end
            for name in names:
                alone, alone_next = power.read_topic(name, vgroup, position, 10**9, READ_BYTES)
                assert alone_next == end
                assert _comparable(found.get(name, [])) == _comparable(alone), (
                    name, vgroup, position,
                )  # fmt: skip


def test_a_dropped_topic_is_left_out_and_the_others_still_read(power: Engine) -> None:
    _history(power)
    power.execute("DROP TOPIC dev_ab")
    vgroup = vgroups_of(power, "power")[0]
    found, _ = power.read_topics(["dev_ab", "loud"], vgroup, 1)
    assert "dev_ab" not in found
    assert found.get("loud", []) == power.read_topic("loud", vgroup, 1, 10**9)[0]


def test_tables_a_query_topic_cannot_deliver_are_not_in_its_interest(power: Engine) -> None:
    _history(power)
    interest: dict[str, set[str]] = {}
    for vgroup in vgroups_of(power, "power"):
        power.read_topics(["dev_ab"], vgroup, 1)
        _, index = power.state.interest[vgroup]
        for table, topics in index.items():
            interest.setdefault(table, set()).update(topics)
    holders = {table for table, topics in interest.items() if "dev_ab" in topics}
    assert holders == {"a", "b"}
    assert {t for t, topics in interest.items() if "site_x" in topics} == {"a", "c", "e"}
    # a condition on the clock decides nothing about tables: every table stays in
    assert {t for t, topics in interest.items() if "now_tag" in topics} == {"a", "b", "c", "e"}
    assert {t for t, topics in interest.items() if "group_2" in topics} == {"a", "b", "c", "e"}


async def _worker(fn: Callable[..., Any], *args: object) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def test_held_polls_wake_only_for_their_rows_and_move_past_the_others(power: Engine) -> None:
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1);"
        "CREATE TOPIC ta AS SELECT ts, voltage FROM meters WHERE tbname = 'a';"
        "CREATE TOPIC tz AS SELECT ts, voltage FROM meters WHERE location = 'z'"
    )
    vgroup = power.state.catalog.tables[("power", "a")].vgroup
    vnode = power.state.vnode(vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        start = vnode.wal.next_version
        limits = PollLimits()
        wait_a = asyncio.ensure_future(hub.wait("ta", start, 1, 1, limits, 30.0))
        wait_z = asyncio.ensure_future(hub.wait("tz", start, 2, 1, limits, 30.0))
        await asyncio.sleep(0)
        assert hub.waiting == 2
        await asyncio.get_running_loop().run_in_executor(
            None, power.execute, "INSERT INTO a VALUES (1, 1, 11, 1) (2, 1, 12, 1)"
        )
        outcome, message, position = await asyncio.wait_for(wait_a, 30)
        assert outcome == "data"
        assert message is not None
        assert [r[1] for r in block_rows(message.blocks)] == [11, 12]
        assert position == vnode.wal.next_version == message.end_offset
        # tz had nothing among those entries: still waiting, now past them
        await _until(lambda: hub.waiting == 1 and _bucket_position(hub) == position)
        assert not wait_z.done()
        hub.wake_if(lambda waiter: waiter.topic == "tz")
        outcome, message, moved = await asyncio.wait_for(wait_z, 30)
        assert (outcome, message, moved) == ("quiet", None, position)
        # what the hub gave equals what the poll reads alone
        alone = read_message(power, vnode, "ta", start, limits)
        assert alone.end_offset == position
        assert alone.rows == 2
        hub.close()

    asyncio.run(scenario())


def test_a_held_poll_behind_the_end_is_told_to_read_for_itself(power: Engine) -> None:
    power.execute("CREATE TABLE a USING meters TAGS ('x', 1); CREATE TOPIC ta AS SELECT * FROM a")
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        assert await hub.wait("ta", 1, 1, 1, PollLimits(), 30.0) == ("look", None, 1)
        outcome, _, position = await hub.wait(
            "ta", vnode.wal.next_version, 1, 1, PollLimits(), 0.01
        )
        assert (outcome, position) == ("quiet", vnode.wal.next_version)
        assert hub.waiting == 0
        hub.close()

    asyncio.run(scenario())


def test_a_message_over_a_polls_row_limit_is_read_by_the_poll_itself(power: Engine) -> None:
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1); CREATE TOPIC ta AS SELECT * FROM a;"
        "CREATE TOPIC tz AS SELECT ts, voltage FROM meters WHERE location = 'z'"
    )
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        start = vnode.wal.next_version
        small = asyncio.ensure_future(hub.wait("ta", start, 1, 1, PollLimits(max_rows=1), 30.0))
        large = asyncio.ensure_future(hub.wait("ta", start, 2, 1, PollLimits(), 30.0))
        # a topic with nothing in the entries: its waiters move on with their level
        other = asyncio.ensure_future(hub.wait("tz", start, 3, 1, PollLimits(), 30.0))
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(
            None, power.execute, "INSERT INTO a VALUES (1, 1, 1, 1) (2, 1, 2, 1)"
        )
        # told to read for itself from where it waited: the pass moved on past the
        # entries, and a poll that counted them read would lose its rows
        assert await asyncio.wait_for(small, 30) == ("look", None, start)
        outcome, message, _ = await asyncio.wait_for(large, 30)
        assert outcome == "data"
        assert message is not None
        assert message.rows == 2
        await _until(lambda: _bucket_position(hub) == vnode.wal.next_version)
        assert not other.done()
        hub.close()

    asyncio.run(scenario())


def test_polls_of_a_topic_dropped_while_they_wait_read_for_themselves(power: Engine) -> None:
    """The pass looks for dropped topics only after a catalog change: their polls are
    told to read for themselves (and find out), the others served."""
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1);"
        "CREATE TOPIC ta AS SELECT ts, voltage FROM meters WHERE tbname = 'a';"
        "CREATE TOPIC tz AS SELECT ts, voltage FROM meters WHERE location = 'z'"
    )
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        run = asyncio.get_running_loop().run_in_executor
        start = vnode.wal.next_version
        wait_a = asyncio.ensure_future(hub.wait("ta", start, 1, 1, PollLimits(), 30.0))
        wait_z = asyncio.ensure_future(hub.wait("tz", start, 2, 1, PollLimits(), 30.0))
        await asyncio.sleep(0)
        await run(None, power.execute, "INSERT INTO a VALUES (1, 1, 11, 1)")
        outcome, _, position = await asyncio.wait_for(wait_a, 30)
        assert outcome == "data"
        await _until(lambda: _bucket_position(hub) == position)  # tz waits on, moved
        # tz dropped while it waits; the next pass there releases it
        await run(None, power.execute, "DROP TOPIC tz")
        await run(None, power.execute, "INSERT INTO a VALUES (2, 1, 12, 1)")
        assert await asyncio.wait_for(wait_z, 30) == ("look", None, position)
        hub.close()

    asyncio.run(scenario())


class _Sink:
    """A standing waiter's sink: keeps what it is handed, says `verdicts` in turn."""

    def __init__(self, *verdicts: Verdict) -> None:
        self.verdicts = list(verdicts)
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> Verdict:
        verdict = self.verdicts.pop(0)
        if verdict != "skip":
            self.messages.append(message)
        return verdict


def test_a_standing_waiter_takes_each_message_through_its_sink_and_moves_on(
    power: Engine,
) -> None:
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1);"
        "CREATE TOPIC ta AS SELECT ts, voltage FROM meters WHERE tbname = 'a';"
        "CREATE TOPIC tz AS SELECT ts, voltage FROM meters WHERE location = 'z'"
    )
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        run = asyncio.get_running_loop().run_in_executor
        start = vnode.wal.next_version
        sink = _Sink("stay", "stay", "leave")
        standing = asyncio.ensure_future(
            hub.wait("ta", start, 1, 1, PollLimits(), 30.0, sink, power.generation)
        )
        other = asyncio.ensure_future(hub.wait("tz", start, 2, 1, PollLimits(), 30.0))
        await asyncio.sleep(0)
        for k in range(3):
            await run(None, power.execute, f"INSERT INTO a VALUES ({k}, 1, {10 + k}, 1)")
            await _until(lambda k=k: len(sink.messages) == k + 1)  # type: ignore[misc]
            if k < 2:  # still standing, with tz, at the level the pass moved to
                assert not standing.done()
                assert hub.waiting == 2
                assert _bucket_position(hub) == vnode.wal.next_version
        # each message from where the last ended, each the write's row: what the topic
        # reads alone from the same positions
        at = start
        for k, message in enumerate(sink.messages):
            assert (message.kind, message.offset) == ("data", at)
            assert [r[1] for r in block_rows(message.blocks)] == [10 + k]
            at = message.end_offset
        alone = read_message(power, vnode, "ta", start, PollLimits())
        assert (alone.end_offset, alone.rows) == (at, 3)
        # the third left (its credit spent): the wait ends where that message began
        # (the sink keeps where it got to), the others wait on
        third = sink.messages[2].offset
        assert await asyncio.wait_for(standing, 30) == ("credit", None, third)
        assert hub.waiting == 1
        assert not other.done()
        hub.close()

    asyncio.run(scenario())


def test_a_sink_that_skips_reads_for_itself_from_where_it_stood(power: Engine) -> None:
    power.execute("CREATE TABLE a USING meters TAGS ('x', 1); CREATE TOPIC ta AS SELECT * FROM a")
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        start = vnode.wal.next_version
        sink = _Sink("skip")
        standing = asyncio.ensure_future(
            hub.wait("ta", start, 1, 1, PollLimits(), 30.0, sink, power.generation)
        )
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(
            None, power.execute, "INSERT INTO a VALUES (1, 1, 1, 1)"
        )
        assert await asyncio.wait_for(standing, 30) == ("look", None, start)
        assert sink.messages == []
        hub.close()

    asyncio.run(scenario())


def test_a_catalog_change_sends_standing_waiters_back_to_read(power: Engine) -> None:
    """A right may have been revoked: a standing waiter is not handed rows after a
    catalog change; it reads for itself, and its poll checks it again."""
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1);"
        "CREATE TOPIC ta AS SELECT ts, voltage FROM meters WHERE tbname = 'a'"
    )
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        run = asyncio.get_running_loop().run_in_executor
        start = vnode.wal.next_version
        sink = _Sink("stay", "stay")
        standing = asyncio.ensure_future(
            hub.wait("ta", start, 1, 1, PollLimits(), 30.0, sink, power.generation)
        )
        ordinary = asyncio.ensure_future(hub.wait("ta", start, 2, 1, PollLimits(), 30.0))
        await asyncio.sleep(0)
        await run(None, power.execute, "INSERT INTO a VALUES (1, 1, 11, 1)")
        outcome, _, position = await asyncio.wait_for(ordinary, 30)
        assert outcome == "data"
        await _until(lambda: len(sink.messages) == 1)
        await run(None, power.execute, "CREATE TABLE b USING meters TAGS ('y', 2)")
        await run(None, power.execute, "INSERT INTO a VALUES (2, 1, 12, 1)")
        assert await asyncio.wait_for(standing, 30) == ("look", None, position)
        assert len(sink.messages) == 1
        assert hub.waiting == 0
        hub.close()

    asyncio.run(scenario())


def _standing_topic(power: Engine, monkeypatch: pytest.MonkeyPatch, where: str) -> Vnode:
    """Table `a` and topic `ta` over it (WHERE `where`), standing deadlines of any
    length: the vnode of `a`."""
    monkeypatch.setattr(live, "MIN_STANDING_TIMEOUT_S", 0.0)
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1);"
        f"CREATE TOPIC ta AS SELECT ts, voltage FROM meters WHERE {where}"
    )
    return power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)


def test_a_standing_waiters_deadline_answers_only_once_entries_passed_it_by(
    power: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle follower sends nothing: its deadline rearms while nothing passed it by
    since its last message, and answers "quiet" (an empty message moving it on) once
    entries its topic does not keep went past."""
    vnode = _standing_topic(power, monkeypatch, "tbname = 'a' AND voltage > 5")

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        fired: list[int] = []
        timed_out = hub._timed_out

        def counted(waiter: live.Waiter, timeout: float) -> None:
            fired.append(1)
            timed_out(waiter, timeout)

        hub._timed_out = counted  # type: ignore[method-assign]
        run = asyncio.get_running_loop().run_in_executor
        start = vnode.wal.next_version
        sink = _Sink("stay", "stay")
        standing = asyncio.ensure_future(
            hub.wait("ta", start, 1, 1, PollLimits(), 0.001, sink, power.generation)
        )
        # nothing written: its deadline passes again and again, and it stands on
        await _until(lambda: len(fired) >= 5)
        assert not standing.done()
        # a message for it: it stays, and nothing passed it by since that message
        await run(None, power.execute, "INSERT INTO a VALUES (1, 1, 11, 1)")
        await _until(lambda: len(sink.messages) == 1)
        after = len(fired)
        await _until(lambda: len(fired) >= after + 5)
        assert not standing.done()
        assert hub.waiting == 1
        # an entry it does not keep: the level moves past it, and the next deadline
        # answers "quiet" where the level is now
        await run(None, power.execute, "INSERT INTO a VALUES (2, 1, 1, 1)")
        assert await asyncio.wait_for(standing, 30) == ("quiet", None, vnode.wal.next_version)
        assert len(sink.messages) == 1
        assert hub.waiting == 0
        hub.close()

    asyncio.run(scenario())


def test_a_standing_waiter_no_pass_took_past_entries_answers_at_its_deadline(
    power: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries written past a standing waiter that no pass took it over (the pass has
    not run) end its wait at its deadline: its follow then reads them itself."""
    vnode = _standing_topic(power, monkeypatch, "tbname = 'a'")

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        hub._remove()  # it hears of no write: no pass comes
        start = vnode.wal.next_version
        sink = _Sink("stay", "stay")
        standing = asyncio.ensure_future(
            hub.wait("ta", start, 1, 1, PollLimits(), 0.001, sink, power.generation)
        )
        await asyncio.sleep(0)
        power.execute("INSERT INTO a VALUES (1, 1, 11, 1)")
        outcome, message, _ = await asyncio.wait_for(standing, 30)
        assert (outcome, message, sink.messages) == ("quiet", None, [])
        assert vnode.wal.next_version > start  # what its follow reads next
        hub.close()

    asyncio.run(scenario())


def test_a_held_poll_answers_quiet_at_its_deadline(power: Engine) -> None:
    """A poll that does not stand answers at its deadline, entries or not (the
    `max_wait_ms` of Fetch and Poll)."""
    power.execute("CREATE TABLE a USING meters TAGS ('x', 1); CREATE TOPIC ta AS SELECT * FROM a")
    vnode = power.state.vnode(power.state.catalog.tables[("power", "a")].vgroup)

    async def scenario() -> None:
        hub = LiveHub(power, vnode, _worker)
        start = vnode.wal.next_version
        held = hub.wait("ta", start, 1, 1, PollLimits(), 0.001)
        assert await asyncio.wait_for(held, 30) == ("quiet", None, start)
        assert hub.waiting == 0
        hub.close()

    asyncio.run(scenario())


def test_topics_of_one_form_share_one_evaluation(power: Engine) -> None:
    """Device-set topics differ only in their tables: over the same entries they are
    evaluated once, and each still reads exactly what it reads alone."""
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1); CREATE TABLE b USING meters TAGS ('y', 2);"
        "CREATE TOPIC t_ab AS SELECT ts, voltage FROM meters WHERE tbname IN ('a', 'b');"
        "CREATE TOPIC t_a AS SELECT ts, voltage FROM meters WHERE tbname = 'a';"
        "CREATE TOPIC t_b AS SELECT ts, voltage FROM meters WHERE tbname IN ('b');"
        "CREATE TOPIC t_a2 AS SELECT ts, current FROM meters WHERE tbname = 'a'"
    )
    vgroup = power.state.catalog.tables[("power", "a")].vgroup
    start = power.state.vnode(vgroup).wal.next_version
    power.execute("INSERT INTO a VALUES (1, 1.5, 11, 1) b VALUES (1, 2.5, 21, 1)")
    names = ["t_ab", "t_a", "t_b", "t_a2"]
    found, _ = power.read_topics(names, vgroup, start)
    for name in names:
        alone, _ = power.read_topic(name, vgroup, start, 10**9)
        assert _comparable(found.get(name, [])) == _comparable(alone), name
    # t_a and t_ab evaluate alike over a's entry when a is their only table there
    a_vgroup_only = power.state.catalog.tables[("power", "b")].vgroup != vgroup
    blocks = {name: items[0] for name, items in found.items()}
    assert all(isinstance(block, TopicBlock) for block in blocks.values())
    data = {name: block.data for name, block in blocks.items() if isinstance(block, TopicBlock)}
    if a_vgroup_only:
        assert data["t_ab"] is data["t_a"]
    assert data["t_a2"] is not data["t_a"]  # another form


def test_many_device_set_topics_read_in_the_pass_what_each_reads_alone(power: Engine) -> None:
    """Topics alike (one form) that read the same of the entries' tables share their
    items in the pass: forty topics over random sets of eight children, writes over
    random children, every position of every vgroup."""
    rng = random.Random(14)
    children = _children(power)
    names = []
    for k in range(40):
        tables = ", ".join(f"'{c}'" for c in rng.sample(children, rng.randint(1, 4)))
        columns = "ts, voltage" if k % 5 else "ts, current"  # two forms
        power.execute(
            f"CREATE TOPIC s{k} AS SELECT {columns} FROM meters WHERE tbname IN ({tables})"
        )
        names.append(f"s{k}")
    for w in range(12):
        values = " ".join(f"{c} VALUES ({1_000 + w}, {w}.5, {w}, 1)"
                          for c in rng.sample(children, rng.randint(1, 5)))  # fmt: skip
        power.execute(f"INSERT INTO {values}")
    _pass_reads_what_each_reads_alone(power, names)


def _children(power: Engine) -> list[str]:
    """Eight children of meters, c0..c7, in locations 'x' and 'y' by turns."""
    children = [f"c{n}" for n in range(8)]
    power.execute("; ".join(f"CREATE TABLE {c} USING meters TAGS ('{'xy'[n % 2]}', {n})"
                            for n, c in enumerate(children)))  # fmt: skip
    return children


def _pass_reads_what_each_reads_alone(
    power: Engine, names: list[str], before_pass: Callable[[], None] = lambda: None,
    after_pass: Callable[[], None] = lambda: None,
) -> None:  # fmt: skip
    """At every position of every vgroup, the pass over `names` answers each what it
    reads alone; `before_pass` and `after_pass` run around each pass."""
    for vgroup in vgroups_of(power, "power"):
        end = power.state.vnode(vgroup).wal.next_version
        for position in range(1, end + 1):
            before_pass()
            found, _ = power.read_topics(names, vgroup, position)
            after_pass()
            for name in names:
                alone, _ = power.read_topic(name, vgroup, position, 10**9, READ_BYTES)
                assert _comparable(found.get(name, [])) == _comparable(alone), (
                    name, vgroup, position,
                )  # fmt: skip


@pytest.mark.parametrize(
    "condition",
    ["", "AND voltage > 4", "AND (location = 'x' OR voltage < 3)", "AND current IS NULL"],
)
def test_topics_of_one_form_over_different_tables_are_evaluated_once_per_pass(
    power: Engine, monkeypatch: pytest.MonkeyPatch, condition: str
) -> None:
    """Device-set topics of one form, each over other tables of a write: the pass
    evaluates every run they have once (topic_reader._together), not once per set of
    tables, and each topic reads exactly what it reads alone, at every position."""
    rng = random.Random(9)
    children = _children(power)
    names = []
    for k in range(12):
        tables = ", ".join(f"'{c}'" for c in rng.sample(children, rng.randint(1, 3)))
        power.execute(f"CREATE TOPIC f{k} AS SELECT ts, current, voltage, location FROM "
                      f"meters WHERE tbname IN ({tables}) {condition}")  # fmt: skip
        names.append(f"f{k}")
    for w in range(6):
        values = " ".join(
            f"{c} VALUES ({1_000 + w}, {'NULL' if w % 3 == 0 else w}, {w + n}, 1)"
            for n, c in enumerate(rng.sample(children, rng.randint(3, 8)))
        )
        power.execute(f"INSERT INTO {values}")
    calls = {"each_run": 0, "alone": 0}
    each_run, evaluated = evaluate.each_run, topic_reader._evaluated

    def counted_each_run(*args: Any) -> Any:
        calls["each_run"] += 1
        return each_run(*args)

    def counted_alone(*args: Any) -> Any:
        calls["alone"] += 1
        return evaluated(*args)

    monkeypatch.setattr(topic_reader, "each_run", counted_each_run)
    monkeypatch.setattr(topic_reader, "_evaluated", counted_alone)
    together = 0

    def one_evaluation() -> None:
        nonlocal together
        assert calls["each_run"] <= 1  # one form: one evaluation of its runs at most
        assert calls["alone"] == 0 or not calls["each_run"]
        together += calls["each_run"]

    def uncounted() -> None:
        calls.update(each_run=0, alone=0)  # the reads alone before count for nothing

    _pass_reads_what_each_reads_alone(power, names, uncounted, one_evaluation)
    assert together > 0


def _bucket_position(hub: LiveHub) -> int | None:
    positions = [level.position for level in hub._at.values()]
    return positions[0] if len(positions) == 1 else None


async def _until(condition: Callable[[], bool], deadline_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not condition():
        if loop.time() > end:
            pytest.fail("condition not met before the deadline")
        await asyncio.sleep(0.01)
