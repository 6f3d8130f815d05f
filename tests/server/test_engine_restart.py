"""Restart and crash: a reopened engine has everything; DDL that reached a WAL but not the
catalog is replayed at open; acknowledged inserts survive SIGKILL; one engine per directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sqltopic.errors import WalLockedError
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicMeta
from sqltopic.sql.catalog_store import CATALOG_FILE, CatalogStore
from tests.server.dataset import write_dataset
from tests.server.support import (
    POWER_DDL,
    EngineFactory,
    block_rows,
    metas,
    read_vgroups,
    table_names,
    vgroups_of,
)
from tests.support import run_until_killed

CHILD = Path(__file__).with_name("engine_child.py")
# A child that has not finished (or acknowledged) this long after starting is stuck.
CHILD_DEADLINE_S = 60.0

TOPICS = """
CREATE TOPIC q_funcs AS SELECT ts, abs(i) AS a, upper(nc) AS u, tbname, location FROM power.meters
    WHERE i > 0 OR vc IS NULL;
CREATE TOPIC s_sf WITH META AS STABLE power.meters WHERE location = 'SF';
CREATE TOPIC db_all WITH META AS DATABASE power;
CREATE TOPIC q_child AS SELECT * FROM power.d3;
CREATE TOPIC q_normal AS SELECT ts, c1 + 1 AS c FROM power.ntb;
"""
SHOWS = [
    "SHOW DATABASES",
    "SHOW power.STABLES",
    "SHOW power.TABLES",
    "SHOW TOPICS",
    "SHOW USERS",
    "DESCRIBE power.meters",
    "DESCRIBE power.d0",
    "DESCRIBE power.ntb",
    "SELECT * FROM power.meters ORDER BY ts",
    "SELECT tbname, location, groupid, region, count(*) FROM power.meters GROUP BY ALL ORDER BY 1",
    "SELECT * FROM power.ntb ORDER BY ts",
]


def _state(engine: Engine) -> dict[str, Any]:
    """Everything a user can see: SHOW, DESCRIBE, queries, and every topic's items."""
    out: dict[str, Any] = {sql: engine.execute(sql).rows for sql in SHOWS}
    for topic in ("q_funcs", "s_sf", "db_all", "q_child", "q_normal"):
        for vgroup, items in read_vgroups(engine, topic, "power").items():
            out[f"{topic}/{vgroup}"] = [_item(i) for i in items]
    return out


def _item(item: Any) -> Any:
    if isinstance(item, TopicMeta):
        return ("meta", item.version, item.event)
    return ("data", item.table_name, item.first_version, item.last_version, item.data.to_pylist())


def test_reopen_keeps_everything(make_engine: EngineFactory) -> None:
    engine = make_engine()
    write_dataset(engine)
    engine.execute(TOPICS)
    before = _state(engine)
    ends = {v: engine.state.vnode(v).wal.last_version for v in vgroups_of(engine, "power")}
    engine = make_engine.reopen(engine)
    assert _state(engine) == before
    engine = make_engine.reopen(engine)
    assert _state(engine) == before, "a second reopen changes nothing"

    # the engine goes on: versions continue, new rows reach the topics
    engine.execute(
        "INSERT INTO power.d3 VALUES "
        "(1600000000000, true, 1, 1, 7, 1, 1, 1, 1, 1, 1, 1, 'n', 'b', 'x')"
    )
    vgroup = {r[0]: r[5] for r in engine.execute("SHOW power.TABLES").rows}["d3"]
    assert engine.state.vnode(vgroup).wal.last_version == ends[vgroup] + 1
    items, _ = engine.read_topic("q_child", vgroup, ends[vgroup] + 1, 100)
    assert [r[4] for r in block_rows(items)] == [7]


def test_reopen_of_an_empty_directory(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine = make_engine.reopen(engine)
    assert engine.execute("SHOW DATABASES").rows == []
    engine.execute(POWER_DDL)
    engine = make_engine.reopen(engine)
    assert [r[0] for r in engine.execute("SHOW power.STABLES").rows] == ["meters"]


def test_session_database_is_not_persisted(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.execute(POWER_DDL)
    engine = make_engine.reopen(engine)
    assert engine.session.db is None
    engine.execute("USE power")
    assert table_names(engine) == []


def test_dropped_database_stays_dropped(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.execute(
        POWER_DDL + "CREATE TABLE d1 USING meters TAGS ('x', 1); INSERT INTO d1 VALUES (1, 1, 1, 1)"
    )
    engine.execute("DROP DATABASE power; CREATE DATABASE power VGROUPS 2")
    engine = make_engine.reopen(engine)
    assert [(r[0], r[2]) for r in engine.execute("SHOW DATABASES").rows] == [("power", 2)]
    assert table_names(engine, "power") == []
    assert engine.execute("SHOW power.STABLES").rows == []


# --- one engine per directory -------------------------------------------------------


def test_second_engine_on_the_directory_is_refused(make_engine: EngineFactory) -> None:
    first = make_engine()
    first.execute(POWER_DDL)
    with pytest.raises(WalLockedError, match="data directory") as info:
        make_engine()
    assert str(os.getpid()) in str(info.value)
    first.execute("CREATE TABLE d1 USING meters TAGS ('x', 1)")  # the first one goes on
    make_engine.close(first)
    second = make_engine()
    assert table_names(second, "power") == ["d1"]


# --- crash between the WAL append and the catalog commit ----------------------------

SETUP = (
    POWER_DDL
    + """
CREATE TABLE d1 USING meters TAGS ('SF', 1);
INSERT INTO d1 VALUES (1, 1.5, 220, 0.5);
CREATE TOPIC db_all WITH META AS DATABASE power;
"""
)

Check = Callable[[Engine], None]


def _has_table(name: str) -> Check:
    def check(engine: Engine) -> None:
        assert name in table_names(engine)
        assert engine.execute(f"DESCRIBE {name}").rows

    return check


def _check_d9(engine: Engine) -> None:
    _has_table("d9")(engine)
    engine.execute("INSERT INTO d9 VALUES (5, 1, 2, 3)")
    assert engine.execute("SELECT tbname, location, groupid, voltage FROM d9").rows == [
        ("d9", "LA", 9, 2)
    ]


def _check_d8(engine: Engine) -> None:
    _has_table("d8")(engine)
    assert engine.execute("SELECT location, groupid, voltage FROM d8").rows == [("NY", 8, 230)]


def _check_stable(engine: Engine) -> None:
    assert [r[0] for r in engine.execute("SHOW STABLES").rows] == ["meters", "s2"]
    engine.execute("CREATE TABLE s2c USING s2 TAGS (1)")


def _check_column(engine: Engine) -> None:
    assert engine.execute("DESCRIBE meters").rows[4] == ("extra", "INT", 4, "")
    assert engine.execute("SELECT extra FROM d1").rows == [(None,)]


def _check_set_tag(engine: Engine) -> None:
    assert engine.execute("SELECT groupid FROM d1").rows == [(5,)]


def _check_drop(engine: Engine) -> None:
    assert "d1" not in table_names(engine)


def _check_normal(engine: Engine) -> None:
    _has_table("ntb")(engine)
    engine.execute("INSERT INTO ntb VALUES (1, 'x')")
    assert engine.execute("SELECT c FROM ntb").rows == [("x",)]


CRASHES = [
    pytest.param("CREATE TABLE d9 USING meters TAGS ('LA', 9)", "d9", _check_d9, id="create_child"),
    pytest.param(
        "INSERT INTO d8 USING meters TAGS ('NY', 8) VALUES (2, 1.5, 230, 0.5)",
        "d8",
        _check_d8,
        id="insert_auto_create",
    ),
    pytest.param(
        "CREATE STABLE s2 (ts TIMESTAMP, v INT) TAGS (g INT)",
        "s2",
        _check_stable,
        id="create_stable",
    ),
    pytest.param(
        "CREATE TABLE ntb (ts TIMESTAMP, c VARCHAR(4))", "ntb", _check_normal, id="create_normal"
    ),
    pytest.param("ALTER STABLE meters ADD COLUMN extra INT", None, _check_column, id="add_column"),
    pytest.param("ALTER TABLE d1 SET TAG groupid = 5", None, _check_set_tag, id="set_tag"),
    pytest.param("DROP TABLE d1", None, _check_drop, id="drop_table"),
]


def _run_child(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), *args],
        capture_output=True,
        text=True,
        timeout=CHILD_DEADLINE_S,
        check=False,
    )


@pytest.mark.crash
@pytest.mark.parametrize(("sql", "created", "check"), CRASHES)
def test_ddl_in_the_wal_but_not_in_the_catalog_is_replayed(
    make_engine: EngineFactory, data_dir: Path, sql: str, created: str | None, check: Check
) -> None:
    engine = make_engine()
    engine.execute(SETUP)
    make_engine.close(engine)
    before = _catalog_objects(data_dir)

    done = _run_child([str(data_dir), "crash-commit", "USE power", sql])
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert _catalog_objects(data_dir) == before, "the child died before its catalog commit"

    engine = make_engine()
    engine.execute("USE power")
    check(engine)
    if created is not None:
        events = [
            m.event
            for items in read_vgroups(engine, "db_all", "power").values()
            for m in metas(items)
            if m.event["tableName"] == created
        ]
        assert events, "the replayed event is in the WAL"
    engine = make_engine.reopen(engine)  # replay committed: nothing changes on a reopen
    engine.execute("USE power")
    shown = (engine.execute("SHOW TABLES").rows, engine.execute("DESCRIBE meters").rows)
    engine = make_engine.reopen(engine)
    engine.execute("USE power")
    assert (engine.execute("SHOW TABLES").rows, engine.execute("DESCRIBE meters").rows) == shown


def _catalog_objects(data_dir: Path) -> tuple[Any, ...]:
    store = CatalogStore(data_dir / CATALOG_FILE)
    try:
        catalog, _ = store.load()
    finally:
        store.close()
    return (
        sorted(catalog.tables),
        sorted(catalog.stables),
        [(s.columns, s.tags) for _, s in sorted(catalog.stables.items())],
        [t.tags for _, t in sorted(catalog.tables.items())],
    )


# --- SIGKILL during a stream of INSERTs ---------------------------------------------

LOOP_SETUP = """
CREATE DATABASE power VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0;
USE power;
CREATE TABLE d0 (ts TIMESTAMP, k INT);
CREATE TABLE d1 (ts TIMESTAMP, k INT);
CREATE TABLE d2 (ts TIMESTAMP, k INT);
"""


@pytest.mark.crash
def test_acknowledged_inserts_survive_sigkill(make_engine: EngineFactory, data_dir: Path) -> None:
    engine = make_engine()
    engine.execute(LOOP_SETUP)
    make_engine.close(engine)
    acked: list[int] = []
    start = 1
    for wanted in (25, 40):
        args = [str(data_dir), "insert-loop", str(start)]  # inserts keys start, start + 1, ...
        acked += run_until_killed(CHILD, args, wanted, CHILD_DEADLINE_S)
        engine = make_engine()
        found = [
            k
            for t in ("d0", "d1", "d2")
            for (k,) in engine.execute(f"SELECT k FROM power.{t}").rows
        ]
        assert set(acked) <= set(found), f"lost: {sorted(set(acked) - set(found))}"
        assert len(found) == len(set(found)), "no row twice"
        for table in ("d0", "d1", "d2"):
            rows = engine.execute(f"SELECT ts, k FROM power.{table}").rows
            assert all(ts.microsecond // 1000 == k % 1000 for ts, k in rows), "rows intact"
            assert all(int(table[1]) == k % 3 for _, k in rows), "rows in their own table"
        make_engine.close(engine)
        start = max(found) + 1
