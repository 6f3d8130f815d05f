"""CREATE/DROP DNODE, SHOW DNODES and SHOW VGROUPS on the engine: the all-in-one server
(dnode 1, every vgroup its own) and a cluster's mnode (dnodes admitted, their liveness
from heartbeats); the dnodes' registry alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.errors import (
    AlreadyExistsError,
    InvalidValueError,
    NoPermission,
    NotFoundError,
    SchemaInUseError,
    UnsupportedStatement,
)
from sqltopic.server.common.result import Session
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.dnode_registry import DnodeRegistry

CLOCK_US = 1_800_000_000_000_000

# a fake dnode that reports every catalog change applied (statements wait for none)
CAUGHT_UP = 1 << 62


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine(tmp_path, background=False) as engine:
        yield engine


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mnode(tmp_path: Path, clock: Clock) -> Iterator[Engine]:
    registry = DnodeRegistry(lambda: CLOCK_US, monotonic=clock)
    with Engine(tmp_path / "mnode", background=False, role="mnode", registry=registry) as engine:
        yield engine


# --- the all-in-one server ---------------------------------------------------------------


def test_the_all_in_one_server_is_dnode_1_hosting_every_vgroup(engine: Engine) -> None:
    engine.listening("127.0.0.1:6030")
    engine.execute("CREATE DATABASE a VGROUPS 2; CREATE DATABASE b VGROUPS 1")
    engine.execute("CREATE TABLE b.t (ts TIMESTAMP, v INT); INSERT INTO b.t VALUES (1, 1)")
    (row,) = engine.execute("SHOW DNODES").rows
    assert row[:4] == (1, "127.0.0.1:6030", "ready", 3)
    assert row[4].timestamp() * 1e6 == pytest.approx(engine.state.since_us, abs=1)
    rows = engine.execute("SHOW VGROUPS").rows
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("a", 1, "127.0.0.1:6030", "ready"), ("a", 1, "127.0.0.1:6030", "ready"),
        ("b", 1, "127.0.0.1:6030", "ready"),
    ]  # fmt: skip
    (b_vgroup,) = engine.state.catalog.database("b").vgroups
    assert rows[2][1] == b_vgroup
    assert rows[2][5] == "1..2"  # the table's creation and the row
    assert {r[5] for r in rows[:2]} == {"empty"}
    assert engine.execute("SHOW b.VGROUPS").rows == rows[2:]
    assert engine.execute("USE a; SHOW VGROUPS").rows == rows[:2]


@pytest.mark.parametrize(
    ("sql", "error", "words"),
    [
        ("CREATE DNODE 'h1:6031'", UnsupportedStatement, "this server is all-in-one"),
        ("DROP DNODE 1", SchemaInUseError, "dnode 1 is this all-in-one server itself"),
        ("DROP DNODE 'local'", SchemaInUseError, "dnode 1 is this all-in-one server itself"),
        ("DROP DNODE 2", NotFoundError, "dnode '2' does not exist"),
    ],
)
def test_the_all_in_one_server_admits_and_drops_no_dnode(
    engine: Engine, sql: str, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        engine.execute(sql)
    assert len(engine.execute("SHOW DNODES").rows) == 1


def test_only_root_manages_dnodes(engine: Engine, mnode: Engine) -> None:
    for server in (engine, mnode):
        server.execute("CREATE USER alice PASS 'alice-pw-1'")
        alice = Session(user="alice")
        for sql in ("CREATE DNODE 'h1:6031'", "DROP DNODE 1"):
            with pytest.raises(NoPermission, match="only root"):
                server.execute(sql, alice)
    assert mnode.execute("SHOW DNODES").rows == []


def test_show_vgroups_shows_only_databases_the_user_sees(engine: Engine) -> None:
    engine.execute("CREATE DATABASE a VGROUPS 1; CREATE DATABASE b VGROUPS 1")
    engine.execute("CREATE USER alice PASS 'alice-pw-1'; GRANT READ ON a.* TO alice")
    alice = Session(user="alice")
    assert [r[0] for r in engine.execute("SHOW VGROUPS", alice).rows] == ["a"]
    with pytest.raises(NotFoundError, match="database 'b' does not exist"):
        engine.execute("SHOW b.VGROUPS", alice)


# --- a cluster's mnode -------------------------------------------------------------------


def test_the_mnode_admits_dnodes_and_shows_their_liveness(mnode: Engine, clock: Clock) -> None:
    mnode.execute("CREATE DNODE 'h1:6031'; CREATE DNODE h2 PORT 6032")
    registry = mnode.state.registry
    assert registry is not None
    rows = mnode.execute("SHOW DNODES").rows
    assert [r[:4] for r in rows] == [(1, "h1:6031", "offline", 0), (2, "h2:6032", "offline", 0)]
    created = mnode.state.catalog.dnodes[1].create_us
    assert rows[0][4].timestamp() * 1e6 == pytest.approx(created, abs=1)  # never seen
    registry.beat(2, {}, CAUGHT_UP)
    assert [r[2] for r in mnode.execute("SHOW DNODES").rows] == ["offline", "ready"]
    clock.now += 10
    assert [r[2] for r in mnode.execute("SHOW DNODES").rows] == ["offline", "offline"]


@pytest.mark.parametrize(
    ("endpoint", "words"),
    [
        ("h1", "expected host:port"),
        (":6030", "expected host:port"),
        ("h1:", "expected host:port"),
        ("h 1:6030", "expected host:port"),
        ("h1:port", "expected host:port"),
        ("h1:0", "port 0 is not 1..65535"),
        ("h1:70000", "port 70000 is not 1..65535"),
        ("-h1:6030", "expected host:port"),
        ("h" * 300 + ":6030", "expected host:port"),
    ],
)
def test_a_bad_endpoint_is_refused(mnode: Engine, endpoint: str, words: str) -> None:
    with pytest.raises(InvalidValueError, match=words):
        mnode.execute(f"CREATE DNODE '{endpoint}'")
    assert mnode.state.catalog.dnodes == {}


def test_an_endpoint_is_admitted_once_and_ids_are_never_reused(tmp_path: Path) -> None:
    mnode = Engine(tmp_path, background=False, role="mnode", registry=DnodeRegistry(lambda: 0))
    mnode.execute("CREATE DNODE 'H1:6031'; CREATE DNODE '[::1]:6032'")
    with pytest.raises(AlreadyExistsError, match="dnode 1 already has endpoint h1:6031"):
        mnode.execute("CREATE DNODE 'h1:6031'")
    mnode.execute("DROP DNODE 'h1:6031'")
    mnode.execute("CREATE DNODE 'h3:6033'")
    assert [r[:2] for r in mnode.execute("SHOW DNODES").rows] == [
        (2, "[::1]:6032"), (3, "h3:6033"),
    ]  # fmt: skip
    mnode.close()
    again = DnodeRegistry(lambda: CLOCK_US)
    with Engine(tmp_path, background=False, role="mnode", registry=again) as reopened:
        assert sorted(reopened.state.catalog.dnodes) == [2, 3]
        reopened.execute("CREATE DNODE 'h4:6034'")
        assert max(reopened.state.catalog.dnodes) == 4


def test_a_dnode_hosting_vgroups_is_not_dropped(mnode: Engine, clock: Clock) -> None:
    mnode.execute("CREATE DNODE 'h1:6031'; CREATE DNODE 'h2:6032'; CREATE DNODE 'h3:6033'")
    registry = mnode.state.registry
    assert registry is not None
    registry.beat(1, {}, CAUGHT_UP)
    registry.beat(2, {}, CAUGHT_UP)
    mnode.execute("CREATE DATABASE a VGROUPS 2")  # one vgroup on each ready dnode
    db = mnode.state.catalog.database("a")
    assert db.placement == (1, 2)
    with pytest.raises(SchemaInUseError, match=r"dnode 2 \(h2:6032\) hosts 1 vgroups"):
        mnode.execute("DROP DNODE 2")
    registry.beat(1, {db.vgroups[0]: (1, 9)}, CAUGHT_UP)
    rows = mnode.execute("SHOW VGROUPS").rows
    assert [r[1:] for r in rows] == [
        (db.vgroups[0], 1, "h1:6031", "ready", "1..9"),
        (db.vgroups[1], 2, "h2:6032", "placing", ""),  # not reported by its dnode yet
    ]  # fmt: skip
    clock.now += 10
    assert {r[4] for r in mnode.execute("SHOW VGROUPS").rows} == {"offline"}
    assert [r[3] for r in mnode.execute("SHOW DNODES").rows] == [1, 1, 0]
    mnode.execute("DROP DNODE 3")  # hosts none
    with pytest.raises(NotFoundError, match="dnode '7' does not exist"):
        mnode.execute("DROP DNODE 7")


# --- the registry --------------------------------------------------------------------------


def test_the_registry_follows_heartbeats(clock: Clock) -> None:
    now_us = [CLOCK_US]
    registry = DnodeRegistry(lambda: now_us[0], timeout_s=3.0, monotonic=clock)
    assert registry.status(1) == ("offline", 0)
    registry.beat(1, {5: (1, 10)})
    assert registry.status(1) == ("ready", CLOCK_US)
    assert registry.ready(1)
    assert registry.versions(1, 5) == (1, 10)
    assert registry.versions(1, 6) is None
    assert registry.versions(2, 5) is None
    clock.now += 2.0
    now_us[0] += 2_000_000
    registry.beat(1, {5: (1, 12)})  # still ready: since unchanged
    assert registry.status(1) == ("ready", CLOCK_US)
    clock.now += 5.0
    now_us[0] += 5_000_000
    # offline since the beat plus the timeout: two seconds ago
    assert registry.status(1) == ("offline", now_us[0] - 2_000_000)
    registry.beat(1, {}, CAUGHT_UP)
    assert registry.status(1) == ("ready", now_us[0])
    registry.forget(1)
    assert registry.status(1) == ("offline", 0)


def test_an_mnode_engine_and_only_one_takes_a_registry(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="only one"):
        Engine(tmp_path, background=False, role="mnode")
    with pytest.raises(ValueError, match="only one"):
        Engine(tmp_path, background=False, registry=DnodeRegistry(lambda: 0))
    Engine(tmp_path, background=False).close()  # the directory was left free


def test_waiting_for_the_dnodes_to_apply_a_change(clock: Clock) -> None:
    registry = DnodeRegistry(lambda: CLOCK_US, monotonic=clock)
    woken: list[int] = []
    registry.watch(lambda: woken.append(registry.last_change))
    registry.changed(3)
    assert (registry.last_change, woken) == (3, [3])
    registry.changed(2)  # an older one never lowers it
    assert registry.last_change == 3
    assert registry.wait_applied(3, 0.0) == []  # no dnode at all
    registry.beat(1, {}, 3)
    registry.beat(2, {}, 1)
    assert registry.wait_applied(3, 0.0) == [2]
    registry.beat(2, {}, 3)
    assert registry.wait_applied(3, 0.0) == []
    registry.beat(2, {}, 2)
    clock.now += 10  # both offline: nobody to wait for
    assert registry.wait_applied(3, 0.0) == []


def test_a_waiting_statement_wakes_at_the_dnode_s_report() -> None:
    # a long liveness timeout: only the report's notification can end the wait in time
    registry = DnodeRegistry(lambda: CLOCK_US, timeout_s=3600.0)
    registry.beat(1, {}, 0)
    registry.changed(1)
    result: list[list[int]] = []
    waiter = threading.Thread(target=lambda: result.append(registry.wait_applied(1, 600.0)))
    waiter.start()
    registry.beat(1, {}, 1)
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert result == [[]]


def test_only_a_statement_that_changed_the_catalog_waits_for_the_dnodes(
    mnode: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = mnode.state.registry
    assert registry is not None
    waits: list[int] = []

    def wait_applied(seq: int, timeout_s: float) -> list[int]:
        waits.append(seq)
        return []

    monkeypatch.setattr(registry, "wait_applied", wait_applied)
    mnode.execute("CREATE DNODE 'h1:6031'")
    last = mnode.last_change()
    assert waits == [last]
    registry.beat(1, {}, 0)  # behind: a statement that changed nothing must not wait
    mnode.execute("SHOW DNODES; SHOW VGROUPS")
    assert waits == [last]
    mnode.execute("DROP DNODE 1")
    assert waits == [last, last + 1]
    assert registry.status(1) == ("offline", 0)  # forgotten with its drop


def test_a_replayed_heartbeat_is_not_fresh() -> None:
    registry = DnodeRegistry(lambda: CLOCK_US)
    assert registry.fresh(1, 100)
    registry.beat(1, {}, 0, sent_ms=100)
    assert registry.fresh(1, 100)  # the same one again: it says nothing new
    assert registry.fresh(1, 101)
    assert not registry.fresh(1, 99)
