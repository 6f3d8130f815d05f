"""read_topic itself: positions, page sizes, precisions, and bad arguments."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.errors import Error, NotFoundError, TopicNotFound
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.state import TOPIC_CACHE_FLOOR, TOPIC_CACHE_SLACK
from sqltopic.server.core.topic_reader import TopicMeta
from tests.server.support import block_rows, blocks, read_all, read_vgroups, vgroups_of

BASE_NS = 1_538_548_685_000_000_000


@pytest.mark.parametrize(("precision", "scale"), [("ms", 10**6), ("us", 10**3), ("ns", 1)])
def test_timestamp_filters_in_every_precision(engine: Engine, precision: str, scale: int) -> None:
    engine.execute(f"""
        CREATE DATABASE p PRECISION '{precision}' VGROUPS 2; USE p;
        CREATE STABLE m (ts TIMESTAMP, v INT) TAGS (g INT);
        CREATE TABLE a USING m TAGS (1); CREATE TABLE b USING m TAGS (2);
    """)
    stamps = [BASE_NS // scale + i for i in range(10)]
    engine.execute(
        "INSERT INTO a VALUES "
        + " ".join(f"({t}, {i})" for i, t in enumerate(stamps) if i % 2 == 0)
        + " b VALUES "
        + " ".join(f"({t}, {i})" for i, t in enumerate(stamps) if i % 2 == 1)
    )
    low = {"ms": "06:38:05.002", "us": "06:38:05.000002", "ns": "06:38:05.000000002"}[precision]
    engine.execute(
        f"CREATE TOPIC t AS SELECT ts, v FROM m WHERE ts > '2018-10-03 {low}' AND ts <= {stamps[7]}"
    )
    found = [b for items in read_vgroups(engine, "t", "p").values() for b in blocks(items)]
    assert sorted(v for b in found for v in b.data.column("v").to_pylist()) == [3, 4, 5, 6, 7]
    for block in found:
        assert block.data.schema.field("ts").type == pa.timestamp(precision)
        stamped = zip(block.data.column("ts").cast(pa.int64()).to_pylist(),
                      block.data.column("v").to_pylist(), strict=True)  # fmt: skip
        assert all(stamps[v] == t for t, v in stamped)


def test_reading_resumes_at_the_returned_version(power: Engine) -> None:
    power.execute(
        "CREATE TABLE d1 USING meters TAGS ('x', 1); CREATE TOPIC t AS SELECT voltage FROM d1"
    )
    vgroup = {r[0]: r[5] for r in power.execute("SHOW TABLES").rows}["d1"]
    for k in range(10):
        power.execute(f"INSERT INTO d1 VALUES ({k}, 1, {k}, 1)")
    items, position = power.read_topic("t", vgroup, 0, 3)
    seen = [r[0] for r in block_rows(items)]
    assert seen == [0, 1, 2]
    while True:
        items, next_position = power.read_topic("t", vgroup, position, 3)
        if next_position == position:
            break
        seen += [r[0] for r in block_rows(items)]
        position = next_position
    assert seen == list(range(10))
    assert power.read_topic("t", vgroup, position + 100, 3) == ([], position + 100)
    power.execute("INSERT INTO d1 VALUES (10, 1, 10, 1)")
    items, _ = power.read_topic("t", vgroup, position, 3)
    assert [r[0] for r in block_rows(items)] == [10]


def test_other_vgroups_are_empty_for_a_child_topic(power: Engine) -> None:
    power.execute("""
        CREATE TABLE d1 USING meters TAGS ('x', 1); CREATE TABLE d2 USING meters TAGS ('y', 2);
        CREATE TOPIC t AS SELECT * FROM d1;
        INSERT INTO d1 VALUES (1, 1, 1, 1) d2 VALUES (2, 2, 2, 2);
    """)
    vgroup = {r[0]: r[5] for r in power.execute("SHOW TABLES").rows}["d1"]
    for v in vgroups_of(power, "power"):
        rows = block_rows(read_all(power, "t", v))
        assert len(rows) == (1 if v == vgroup else 0)


def test_unknown_topic(power: Engine) -> None:
    with pytest.raises(TopicNotFound):
        power.read_topic("nosuch", vgroups_of(power, "power")[0], 0, 10)


def test_unknown_vgroup_is_a_clear_error(power: Engine) -> None:
    power.execute("CREATE TOPIC t AS DATABASE power")
    with pytest.raises(Error, match="999"):
        power.read_topic("t", 999, 0, 10)


def test_a_vgroup_of_another_database_delivers_nothing(power: Engine) -> None:
    power.execute("""
        CREATE DATABASE other VGROUPS 1;
        CREATE TABLE other.x (ts TIMESTAMP, a INT);
        CREATE TOPIC odb WITH META AS DATABASE other;
        CREATE TABLE d1 USING meters TAGS ('x', 1);
        INSERT INTO d1 VALUES (1, 1, 1, 1);
    """)
    for vgroup in vgroups_of(power, "power"):
        with pytest.raises(
            NotFoundError, match=f"vgroup {vgroup} is not a vgroup of database other"
        ):
            power.read_topic("odb", vgroup, 0, 100)
    # its own vgroup delivers its own table's creation, and nothing of power's
    (own,) = vgroups_of(power, "other")
    items, _ = power.read_topic("odb", own, 0, 100)
    assert [i.event["tableName"] for i in items if isinstance(i, TopicMeta)] == ["x"]
    assert len(items) == 1


def test_caches_of_dropped_topics_are_pruned_and_live_ones_kept(power: Engine) -> None:
    """A server that makes and drops topics all day keeps its per-topic caches the size
    of its live topics (state.bump): each topic read once, then dropped."""
    power.execute("CREATE TABLE d1 USING meters TAGS ('x', 1); INSERT INTO d1 VALUES (1, 1, 7, 1)")
    vgroup = power.state.catalog.table("power", "d1").vgroup
    power.execute("CREATE TOPIC kept AS SELECT voltage FROM meters WHERE voltage > 5")
    assert block_rows(power.read_topic("kept", vgroup, 0, 10)[0]) == [(7,)]
    kept = ("kept", power.state.catalog.topics["kept"].create_us)
    made = 3 * (TOPIC_CACHE_SLACK + TOPIC_CACHE_FLOOR)
    for k in range(made):
        power.execute(f"CREATE TOPIC t{k} AS SELECT voltage FROM meters WHERE voltage > {k}")
        power.read_topic(f"t{k}", vgroup, 0, 10)
        power.execute(f"DROP TOPIC t{k}")
    state = power.state
    for cache in (state.shapes, state.kept_share, state.scopes):
        assert len(cache) <= TOPIC_CACHE_SLACK * 1 + TOPIC_CACHE_FLOOR
    assert kept in state.shapes  # the live topic's entries stay
    assert (*kept, vgroup) in state.scopes
    assert block_rows(power.read_topic("kept", vgroup, 0, 10)[0]) == [(7,)]


def test_create_topic_derives_a_query_topic_s_shapes_at_once(power: Engine) -> None:
    """Not in the first shared pass after it: a thousand CREATE TOPICs would stall
    that pass for seconds (topic_reader.prepare)."""
    power.execute("CREATE TOPIC q AS SELECT voltage FROM meters WHERE location = 'x'")
    power.execute("CREATE TOPIC s AS STABLE meters")
    topics = power.state.catalog.topics
    assert ("q", topics["q"].create_us) in power.state.shapes
    assert ("s", topics["s"].create_us) not in power.state.shapes  # no query: no shapes
