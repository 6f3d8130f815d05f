"""client/admin.py against a real server: retained ranges, standalone commits (all or
none, refused while a live consumer holds a vgroup), live consumers and eviction."""

from __future__ import annotations

import pytest

from sqltopic.client import Connection, admin
from sqltopic.client.consumer import Consumer
from sqltopic.errors import ConsumerFenced, NotFoundError, OffsetOutOfRange, TopicNotFound
from tests.client.support import config, drain, rows_of
from tests.live_server import ServerProcess

VGROUPS = (1, 2)  # the first database's vgroups (`power`, VGROUPS 2)


def test_offset_ranges_answer_each_vgroup_begin_and_end(power: Connection) -> None:
    ranges = admin.offset_ranges(power, "overvoltage", VGROUPS)
    assert set(ranges) == set(VGROUPS)
    for vgroup, span in ranges.items():
        assert span.vgroup == vgroup
        assert 1 <= span.begin < span.end  # the example rows are there
    power.execute("INSERT INTO power.d1001 VALUES (1700000000000, 1.0, 240, 0.1)")
    after = admin.offset_ranges(power, "overvoltage", VGROUPS)
    assert sum(after[v].end - ranges[v].end for v in VGROUPS) == 1


def test_unknown_topic_and_vgroup_are_errors(power: Connection) -> None:
    with pytest.raises(TopicNotFound):
        admin.offset_ranges(power, "nope", VGROUPS)
    with pytest.raises(NotFoundError, match="vgroup 9"):
        admin.offset_ranges(power, "overvoltage", [9])


def test_a_standalone_commit_is_what_a_consumer_resumes_from(
    power: Connection, server: ServerProcess
) -> None:
    assert admin.committed(power, "overvoltage", "g", VGROUPS) == {1: None, 2: None}
    ends = {v: r.end for v, r in admin.offset_ranges(power, "overvoltage", VGROUPS).items()}
    admin.commit_group(power, "overvoltage", "g", ends)
    assert admin.committed(power, "overvoltage", "g", VGROUPS) == ends
    power.execute("INSERT INTO power.d1001 VALUES (1700000000000, 1.0, 240, 0.1)")
    with Consumer(config(server.address, "g")) as consumer:
        consumer.subscribe(["overvoltage"])
        got = rows_of(drain(consumer))
    # only the row written after the commit; nothing of the history before it
    assert [row[2] for row in got] == [240]


def test_a_commit_is_all_or_none(power: Connection) -> None:
    ends = {v: r.end for v, r in admin.offset_ranges(power, "overvoltage", VGROUPS).items()}
    with pytest.raises(OffsetOutOfRange):
        admin.commit_group(power, "overvoltage", "g", {1: ends[1], 2: ends[2] + 5})
    assert admin.committed(power, "overvoltage", "g", VGROUPS) == {1: None, 2: None}


def test_a_live_consumer_blocks_a_standalone_commit_unless_it_evicts(
    power: Connection, server: ServerProcess
) -> None:
    with Consumer(config(server.address, "busy", client_id="c-busy")) as consumer:
        consumer.subscribe(["overvoltage"])
        drain(consumer)
        consumer.commit()
        before = admin.committed(power, "overvoltage", "busy", VGROUPS)
        live = admin.live_consumers(power, "overvoltage", "busy")
        assert [c.client_id for c in live] == ["c-busy"]
        assert "c-busy" in str(live[0])
        assert admin.live_consumers(power, "overvoltage", "other") == []
        with pytest.raises(ConsumerFenced, match="live consumer"):
            admin.commit_group(power, "overvoltage", "busy", {1: 1, 2: 1})
        assert admin.committed(power, "overvoltage", "busy", VGROUPS) == before
        admin.commit_group(power, "overvoltage", "busy", {1: 1, 2: 1}, evict=True)
        assert admin.committed(power, "overvoltage", "busy", VGROUPS) == {1: 1, 2: 1}
        # the evicted consumer rejoins by itself and resumes from the new offsets
        firsts: dict[int, int] = {}
        for message in drain(consumer):
            firsts.setdefault(message.vgroup, message.offset)
        assert firsts == {1: 1, 2: 1}
        assert [c.client_id for c in admin.live_consumers(power, "overvoltage", "busy")] == [
            "c-busy"
        ]


def test_group_names_are_quoted(power: Connection) -> None:
    group = 'odd-"group" name'
    admin.commit_group(power, "overvoltage", group, {1: 1}, evict=True)
    assert admin.committed(power, "overvoltage", group, [1]) == {1: 1}
