"""WITH META and ONLY META topics: DDL events among the data blocks, in WAL order; topics
without META (query, stable, database) skip the meta entries.

The test runs a script of DDL and writes, keeps a model of the WAL entries it makes (a
super table's events go to every vgroup, a table's to its own), and compares what each
topic delivers per vgroup with the model filtered by what that topic is about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock, TopicItem, TopicMeta
from tests.server.support import block_rows, metas, read_all, vgroups_of

# (kind, name, event type, alter type, table type, super table) or (data, table, rows)
Item = tuple[Any, ...]

TOPICS = """
CREATE TOPIC tm WITH META AS STABLE meters;
CREATE TOPIC tonly ONLY META AS STABLE meters;
CREATE TOPIC tdb WITH META AS DATABASE mdb;
CREATE TOPIC tdbonly ONLY META AS DATABASE mdb;
CREATE TOPIC tdbplain AS DATABASE mdb;
CREATE TOPIC tplain AS STABLE meters;
CREATE TOPIC tq AS SELECT ts, voltage, tbname FROM meters;
"""


@dataclass
class Entry:
    vgroups: frozenset[int]
    item: Item
    stable: str | None  # the super table the entry is about (itself or a child's)


class Script:
    """Runs statements on the engine and models the WAL entries they append."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.entries: list[Entry] = []
        self.parents: dict[str, str | None] = {}

    def all_vgroups(self) -> frozenset[int]:
        return frozenset(vgroups_of(self.engine, "mdb"))

    def vgroup(self, table: str) -> frozenset[int]:
        return frozenset(r[5] for r in self.engine.execute("SHOW TABLES").rows if r[0] == table)

    def run(self, sql: str) -> None:
        self.engine.execute(sql)

    def stable_event(self, sql: str, type_: str, name: str, alter: str | None = None) -> None:
        self.run(sql)
        self.entries.append(
            Entry(self.all_vgroups(), ("meta", name, type_, alter, "super", None), name)
        )

    def table_event(
        self, sql: str, type_: str, name: str, stable: str | None, alter: str | None = None
    ) -> None:
        vgroup = self.vgroup(name)  # before a drop
        self.run(sql)
        vgroup = vgroup or self.vgroup(name)  # after a create
        kind = "child" if stable else "normal"
        self.parents[name] = stable
        using = stable if type_ != "alter" else None  # creates and drops name it
        self.entries.append(Entry(vgroup, ("meta", name, type_, alter, kind, using), stable))

    def insert(self, table: str, rows: list[str]) -> None:
        self.run(f"INSERT INTO {table} VALUES {' '.join(rows)}")
        self.entries.append(
            Entry(self.vgroup(table), ("data", table, len(rows)), self.parents[table])
        )

    def expected(self, vgroup: int, want: str, stable: str | None) -> list[Item]:
        """What a topic on `stable` (None: the database) delivers: `want` is "with",
        "only" or "none" (its META mode)."""
        out: list[Item] = []
        for e in self.entries:
            if vgroup not in e.vgroups or (stable is not None and e.stable != stable):
                continue
            is_meta = e.item[0] == "meta"
            if (is_meta and want != "none") or (not is_meta and want != "only"):
                out.append(e.item)
        return _merge(out)


def _merge(items: list[Item]) -> list[Item]:
    """Consecutive data items of one table as one (blocks may split anywhere)."""
    out: list[Item] = []
    for item in items:
        if item[0] == "data" and out and out[-1][0] == "data" and out[-1][1] == item[1]:
            out[-1] = ("data", item[1], out[-1][2] + item[2])
        else:
            out.append(item)
    return out


def describe(items: list[TopicItem]) -> list[Item]:
    out: list[Item] = []
    for it in items:
        if isinstance(it, TopicMeta):
            e = it.event
            kind = e["tableType"]
            out.append(
                ("meta", e["tableName"], e["type"], e.get("alterType"), kind, e.get("using"))
            )
        else:
            out.append(("data", it.table_name, it.data.num_rows))
    return _merge(out)


def versions(items: list[TopicItem]) -> list[int]:
    out: list[int] = []
    for it in items:
        if isinstance(it, TopicMeta):
            out.append(it.version)
        else:
            out += [it.first_version, it.last_version]
    return out


ROW = "({ts}, 1.5, {v}, 0.5)"
ROW5 = "({ts}, 1.5, {v}, 0.5, {x})"


@pytest.fixture
def script(engine: Engine) -> Script:
    s = Script(engine)
    s.run("CREATE DATABASE mdb VGROUPS 2; USE mdb")
    s.stable_event(
        "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
        "TAGS (location VARCHAR(64), groupid INT)",
        "create", "meters",
    )  # fmt: skip
    s.stable_event("CREATE STABLE other (ts TIMESTAMP, x INT) TAGS (t INT)", "create", "other")
    s.run(TOPICS)
    s.table_event("CREATE TABLE d1 USING meters TAGS ('a', 1)", "create", "d1", "meters")
    s.table_event("CREATE TABLE d2 USING meters TAGS ('b', 2)", "create", "d2", "meters")
    s.insert("d1", [ROW.format(ts=1, v=220), ROW.format(ts=2, v=221)])
    s.insert("d2", [ROW.format(ts=3, v=222)])
    s.table_event("CREATE TABLE o1 USING other TAGS (1)", "create", "o1", "other")
    s.insert("o1", ["(4, 7)"])
    s.table_event("CREATE TABLE ntb (ts TIMESTAMP, a INT)", "create", "ntb", None)
    s.insert("ntb", ["(5, 8)", "(6, 9)"])
    s.stable_event("ALTER STABLE meters ADD COLUMN extra INT", "alter", "meters", "add_column")
    s.insert("d1", [ROW5.format(ts=7, v=223, x=1)])
    s.insert("d2", [ROW5.format(ts=8, v=224, x=2)])
    s.table_event("ALTER TABLE d2 SET TAG groupid = 1", "alter", "d2", "meters", "set_tag")
    s.insert("d2", [ROW5.format(ts=9, v=225, x=3)])
    s.insert("d1", [ROW5.format(ts=10, v=226, x=4)])
    s.stable_event("ALTER STABLE other ADD TAG t2 INT", "alter", "other", "add_tag")
    # INSERT ... USING creates d3: its create event and its rows, in one append
    tables_before = {r[0] for r in engine.execute("SHOW TABLES").rows}
    assert "d3" not in tables_before
    s.run("INSERT INTO d3 USING meters TAGS ('c', 1) VALUES (11, 1.5, 227, 0.5, 5)")
    s.parents["d3"] = "meters"
    d3 = s.vgroup("d3")
    s.entries.append(Entry(d3, ("meta", "d3", "create", None, "child", "meters"), "meters"))
    s.entries.append(Entry(d3, ("data", "d3", 1), "meters"))
    return s


CASES = [
    ("tm", "with", "meters"),
    ("tonly", "only", "meters"),
    ("tplain", "none", "meters"),
    ("tdb", "with", None),
    ("tdbonly", "only", None),
    ("tdbplain", "none", None),
]


@pytest.mark.parametrize(("topic", "meta", "stable"), CASES, ids=[c[0] for c in CASES])
def test_meta_events_in_wal_order_among_blocks(
    script: Script, topic: str, meta: str, stable: str | None
) -> None:
    engine = script.engine
    for vgroup in vgroups_of(engine, "mdb"):
        items = read_all(engine, topic, vgroup, max_rows=10**6)
        assert describe(items) == script.expected(vgroup, meta, stable), f"vgroup {vgroup}"
        got = versions(items)
        assert got == sorted(got)
        meta_versions = [m.version for m in metas(items)]
        assert len(set(meta_versions)) == len(meta_versions)


@pytest.mark.parametrize(("topic", "meta", "stable"), CASES, ids=[c[0] for c in CASES])
def test_paged_reads_deliver_the_same_items(
    script: Script, topic: str, meta: str, stable: str | None
) -> None:
    engine = script.engine
    for vgroup in vgroups_of(engine, "mdb"):
        assert describe(read_all(engine, topic, vgroup, max_rows=1)) == script.expected(
            vgroup, meta, stable
        )


def test_drop_events_reach_a_consumer_that_read_up_to_them(script: Script) -> None:
    engine = script.engine
    positions: dict[tuple[str, int], int] = {}
    for topic in ("tm", "tdb", "tonly"):
        for vgroup in vgroups_of(engine, "mdb"):
            _, positions[(topic, vgroup)] = engine.read_topic(topic, vgroup, 0, 10**6)
    d1 = script.vgroup("d1")
    ntb = script.vgroup("ntb")
    engine.execute("DROP TABLE d1; DROP TABLE ntb")
    for topic, expect in (
        ("tm", {("d1", "child", "meters")}),
        ("tonly", {("d1", "child", "meters")}),
        ("tdb", {("d1", "child", "meters"), ("ntb", "normal", None)}),
    ):
        seen = set()
        for vgroup in vgroups_of(engine, "mdb"):
            items, _ = engine.read_topic(topic, vgroup, positions[(topic, vgroup)], 10**6)
            for m in metas(items):
                assert m.event["type"] == "drop"
                seen.add((m.event["tableName"], m.event["tableType"], m.event.get("using")))
                table = m.event["tableName"]
                assert vgroup in (d1 if table == "d1" else ntb)
            assert not [b for b in items if isinstance(b, TopicBlock)]
        assert seen == expect, topic


def test_event_contents(script: Script) -> None:
    engine = script.engine
    events = [m.event for v in vgroups_of(engine, "mdb") for m in metas(read_all(engine, "tdb", v))]
    by_key = {(e["tableName"], e["type"], e.get("alterType")): e for e in events}
    create = by_key[("meters", "create", None)]
    assert [c["name"] for c in create["columns"]] == ["ts", "current", "voltage", "phase"]
    assert create["tags"] == [
        {"name": "location", "type": "VARCHAR(64)"},
        {"name": "groupid", "type": "INT"},
    ]
    assert create["db"] == "mdb"
    child = by_key[("d1", "create", None)]
    assert child["tableType"] == "child"
    assert child["using"] == "meters"
    assert child["tags"] == [{"name": "location", "value": "a"}, {"name": "groupid", "value": 1}]
    normal = by_key[("ntb", "create", None)]
    assert normal["tableType"] == "normal"
    columns = [{k: c[k] for k in ("name", "type")} for c in normal["columns"]]
    assert columns == [{"name": "ts", "type": "TIMESTAMP"}, {"name": "a", "type": "INT"}]
    ids = [c["colId"] for c in normal["columns"]]  # data columns carry ids for life
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(set(ids)) == 2
    add = by_key[("meters", "alter", "add_column")]
    assert (add["colName"], add["colType"]) == ("extra", "INT")
    set_tag = by_key[("d2", "alter", "set_tag")]
    assert (set_tag["colName"], set_tag["colValue"]) == ("groupid", 1)


def test_query_topic_skips_meta(script: Script) -> None:
    engine = script.engine
    total = 0
    for vgroup in vgroups_of(engine, "mdb"):
        items = read_all(engine, "tq", vgroup, max_rows=2)
        assert not metas(items)
        total += len(block_rows(items))
        # reads go past trailing meta entries to the end of the WAL
        _, next_version = engine.read_topic("tq", vgroup, 0, 10**6)
        assert next_version == engine.state.vnode(vgroup).wal.last_version + 1
    assert total == 8


def test_query_topic_over_meta_only_wal_returns_nothing_but_moves_on(engine: Engine) -> None:
    engine.execute("""
        CREATE DATABASE mdb VGROUPS 1; USE mdb;
        CREATE STABLE meters (ts TIMESTAMP, v INT) TAGS (g INT);
        CREATE TABLE a USING meters TAGS (1); CREATE TABLE b USING meters TAGS (2);
        CREATE TOPIC tq AS SELECT v FROM meters;
    """)
    (vgroup,) = vgroups_of(engine, "mdb")
    items, next_version = engine.read_topic("tq", vgroup, 0, 100)
    assert items == []
    assert next_version == 4
    assert engine.read_topic("tq", vgroup, next_version, 100) == ([], next_version)
