"""A dnode's copy of the mnode's catalog (server/core/replica.py): the changes an mnode
engine logs (sql/catalog_store.py), applied in order to a dnode engine's catalog (in
memory and on disk) and WALs, once each even across a crash between the WAL and the
catalog."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.errors import ConfigError
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.vnode_host import Placed, VnodeHost
from sqltopic.server.mnode.dnode_registry import DnodeRegistry
from sqltopic.wal import EntryType

SCHEMA = """
CREATE DATABASE power VGROUPS 2;
CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT);
CREATE TABLE power.d1 USING power.meters TAGS (1);
CREATE TABLE power.d2 USING power.meters TAGS (2);
CREATE TOPIC t AS SELECT ts, v FROM power.meters;
"""

# a fake dnode that reports every catalog change applied (statements wait for none)
CAUGHT_UP = 1 << 62


@pytest.fixture
def mnode(tmp_path: Path) -> Iterator[Engine]:
    registry = DnodeRegistry(lambda: 0)
    with Engine(tmp_path / "m", background=False, role="mnode", registry=registry) as engine:
        engine.execute("CREATE DNODE 'h1:1'")
        registry.beat(1, {}, CAUGHT_UP)
        engine.execute(SCHEMA)
        yield engine


@pytest.fixture
def host(tmp_path: Path, mnode: Engine) -> Iterator[VnodeHost]:
    host = VnodeHost(tmp_path / "d")
    host.follow([Placed.of(db.name, v, db.precision, db.wal) for db, v in mnode.placed_on(1)])
    yield host
    host.close()


def _dnode(tmp_path: Path, host: VnodeHost) -> Engine:
    def no_tables(*args: object) -> int:
        raise AssertionError("this test's writes create no tables")

    return Engine(tmp_path / "d", background=False, role="dnode", hosted=host.live,
                  make_tables=no_tables)  # fmt: skip


def _changes(mnode: Engine, after: int, limit: int) -> tuple[int, list[tuple[int, str]]]:
    """The mnode's last change and the next ones for dnode 1, as its heartbeat gets them."""
    view = mnode.heartbeat_view("h1:1", after, limit, 1 << 30)
    return view.last, view.changes


def _meta(host: VnodeHost) -> dict[int, list[bytes]]:
    return {
        vgroup: [
            bytes(r.body)
            for batch in vnode.reader().batches(1)
            for r in batch
            if r.entry_type is EntryType.META
        ]
        for vgroup, vnode in host.vnodes().items()
    }


def test_changes_are_logged_in_order_and_applied_as_on_the_mnode(
    tmp_path: Path, mnode: Engine, host: VnodeHost
) -> None:
    last, changes = _changes(mnode, 0, 1000)
    assert [seq for seq, _ in changes] == list(range(1, last + 1))
    assert _changes(mnode, last, 1000) == (last, [])
    assert len(_changes(mnode, 0, 2)[1]) == 2
    replica = _dnode(tmp_path, host)
    assert replica.apply_changes(changes) == last
    assert replica.applied_change == last
    assert replica.catalog == mnode.catalog  # in memory, change by change
    assert set(replica.catalog.stables) == {("power", "meters")}
    assert set(replica.catalog.topics) == {"t"}
    # the WALs hold the events the mnode logged, byte for byte, in order
    logged: dict[int, list[bytes]] = {}
    for _seq, body in changes:
        change = json.loads(body)
        for v, indexes in change.get("entries", {}).items():
            logged.setdefault(int(v), []).extend(change["events"][i].encode() for i in indexes)
    # a super table's event is logged once for both its vgroups
    stable = next(json.loads(b) for _, b in changes if '"type": "create"' in b or "meters" in b)
    assert len(stable["events"]) == 1
    assert len(stable["entries"]) == 2
    assert _meta(host) == logged
    assert replica.apply_changes(changes) == 0  # applied already: nothing again
    replica.close()
    again = _dnode(tmp_path, host)
    assert again.applied_change == last
    assert again.catalog == mnode.catalog  # read from its disk
    again.close()


def test_a_crash_between_the_wal_and_the_catalog_appends_nothing_twice(
    tmp_path: Path, mnode: Engine, host: VnodeHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, changes = _changes(mnode, 0, 1000)
    replica = _dnode(tmp_path, host)
    stable = next(i for i, (_s, b) in enumerate(changes) if "meters" in b and "entries" in b)
    replica.apply_changes(changes[:stable])

    def crash(*args: object) -> None:
        raise OSError("the process died here")

    monkeypatch.setattr(replica._dnode_replica()._log, "apply", crash)
    with pytest.raises(OSError, match="died"):
        replica.apply_changes(changes)
    appended = _meta(host)
    assert all(len(bodies) == 1 for bodies in appended.values())  # the stable's event
    monkeypatch.undo()
    replica.close()
    again = _dnode(tmp_path, host)  # the restarted dnode
    again.apply_changes(changes)
    meta = _meta(host)
    assert [b for bodies in meta.values() for b in bodies].count(appended[1][0]) == 2  # 2 vgroups
    assert all(bodies.count(bodies[0]) == 1 for bodies in meta.values())
    again.close()


def test_a_dropped_topic_s_offsets_are_forgotten(
    tmp_path: Path, mnode: Engine, host: VnodeHost
) -> None:
    replica = _dnode(tmp_path, host)
    replica.apply_changes(_changes(mnode, 0, 1000)[1])
    vnode = host.vnodes()[1]
    vnode.offsets.commit([("t", "g", 5)], now_us=1)
    assert vnode.offsets.get("t", "g") == 5
    mnode.execute("DROP TOPIC t")
    replica.apply_changes(_changes(mnode, replica.applied_change, 1000)[1])
    assert vnode.offsets.get("t", "g") is None
    assert "t" not in replica.catalog.topics
    replica.close()


def test_an_answer_carries_at_most_its_bytes_of_changes_but_always_one(mnode: Engine) -> None:
    _, changes = _changes(mnode, 0, 1000)
    sizes = [len(body) for _, body in changes]
    view = mnode.heartbeat_view("h1:1", 0, 1000, sizes[0] + sizes[1])
    assert [seq for seq, _ in view.changes] == [1, 2]
    view = mnode.heartbeat_view("h1:1", 0, 1000, 1)  # smaller than any: one all the same
    assert [seq for seq, _ in view.changes] == [1]
    assert view.dnode is not None
    assert view.admitted == (1,)
    assert [v for _, v in view.placed] == [1, 2]
    unknown = mnode.heartbeat_view("h9:9", 0, 1000, 1)
    assert (unknown.dnode, unknown.placed) == (None, [])


def test_a_gap_in_the_changes_is_refused(tmp_path: Path, mnode: Engine, host: VnodeHost) -> None:
    _, changes = _changes(mnode, 0, 1000)
    replica = _dnode(tmp_path, host)
    with pytest.raises(ConfigError, match="changes between are missing"):
        replica.apply_changes(changes[1:])
    assert replica.applied_change == 0
    replica.apply_changes(changes)
    assert replica.applied_change == len(changes)
    replica.close()


def test_a_topic_made_on_the_mnode_is_prepared_on_the_dnode_as_it_arrives(
    tmp_path: Path, mnode: Engine, host: VnodeHost
) -> None:
    """As CREATE TOPIC does on the mnode (topic_reader.prepare): the dnode's first pass
    after many new topics does not derive all their shapes."""
    replica = _dnode(tmp_path, host)
    last, changes = _changes(mnode, 0, 1000)
    replica.apply_changes(changes)
    mnode.execute("CREATE TOPIC q AS SELECT ts, v FROM power.meters WHERE loc = 1")
    _, more = _changes(mnode, last, 1000)
    replica.apply_changes(more)
    topics = replica.state.catalog.topics
    assert {"t", "q"} <= set(topics)
    assert ("q", topics["q"].create_us) in replica.state.shapes
    assert ("t", topics["t"].create_us) in replica.state.shapes  # made before: prepared too
    replica.close()
