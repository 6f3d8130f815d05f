"""Placing a cluster's vgroups (server/core/placement.py) on the engine of an mnode, and
a dnode's vnodes following the placement (server/dnode/vnode_host.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqltopic.errors import ConfigError, DataFileDamaged, SqlError, VgroupUnavailable
from sqltopic.server.core.engine import Engine
from sqltopic.server.dnode.vnode_host import PLACED_FILE, Placed, VnodeHost
from sqltopic.server.mnode.dnode_registry import DnodeRegistry

# a fake dnode that reports every catalog change applied (statements wait for none)
CAUGHT_UP = 1 << 62


@pytest.fixture
def mnode(tmp_path: Path) -> Iterator[Engine]:
    registry = DnodeRegistry(lambda: 0)
    with Engine(tmp_path, background=False, role="mnode", registry=registry) as engine:
        engine.execute("CREATE DNODE 'h1:1'; CREATE DNODE 'h2:2'; CREATE DNODE 'h3:3'")
        yield engine


def _beat(engine: Engine, *dnodes: int) -> None:
    assert engine.state.registry is not None
    for dnode in dnodes:
        engine.state.registry.beat(dnode, {}, CAUGHT_UP)


def _placement(engine: Engine, db: str) -> tuple[int, ...]:
    return engine.catalog.database(db).placement


@pytest.mark.parametrize(
    ("ready", "statements", "want"),
    [
        ((1, 2, 3), [("a", 4)], {"a": (1, 2, 3, 1)}),
        ((1, 2, 3), [("a", 4), ("b", 2)], {"a": (1, 2, 3, 1), "b": (2, 3)}),
        ((1, 2, 3), [("a", 1), ("b", 1), ("c", 1), ("d", 3)], {"d": (1, 2, 3)}),
        ((2,), [("a", 3)], {"a": (2, 2, 2)}),  # offline dnodes get none
        ((1, 3), [("a", 2), ("b", 1)], {"a": (1, 3), "b": (1,)}),
    ],
)
def test_vgroups_go_to_the_least_loaded_ready_dnode(
    mnode: Engine, ready: tuple[int, ...], statements: list[tuple[str, int]],
    want: dict[str, tuple[int, ...]],
) -> None:  # fmt: skip
    _beat(mnode, *ready)
    for name, count in statements:
        mnode.execute(f"CREATE DATABASE {name} VGROUPS {count}")
    assert {db: _placement(mnode, db) for db in want} == want
    assert not mnode.state.vnodes  # the mnode opens none itself
    for dnode in ready:
        assert [v for _db, v in mnode.placed_on(dnode)] == sorted(
            v
            for db in mnode.catalog.databases.values()
            for v, on in zip(db.vgroups, db.placement, strict=True)
            if on == dnode
        )


def test_no_ready_dnode_creates_nothing(mnode: Engine) -> None:
    with pytest.raises(VgroupUnavailable, match="no dnode is ready"):
        mnode.execute("CREATE DATABASE a VGROUPS 2")
    assert mnode.catalog.databases == {}
    assert mnode.catalog.next_vgroup == 1


def test_dropping_and_altering_a_placed_database_touch_no_local_vnode(mnode: Engine) -> None:
    _beat(mnode, 1, 2)
    mnode.execute("CREATE DATABASE a VGROUPS 2")
    mnode.execute("ALTER DATABASE a WAL_LEVEL 2")
    assert mnode.catalog.database("a").wal == {"WAL_LEVEL": 2}
    assert [db.wal for db, _ in mnode.placed_on(1)] == [{"WAL_LEVEL": 2}]
    mnode.execute("DROP DATABASE a")
    assert mnode.placed_on(1) == []
    assert "a" not in mnode.catalog.databases


# --- a dnode's vnodes ----------------------------------------------------------------------


def _placed(vgroup: int, db: str = "a", **wal: int) -> Placed:
    return Placed.of(db, vgroup, "ms", dict(wal))


def test_a_dnode_opens_alters_and_drops_what_is_placed_on_it(tmp_path: Path) -> None:
    host = VnodeHost(tmp_path)
    host.follow([_placed(1), _placed(4)])
    assert [v for v, _, _ in host.versions()] == [1, 4]
    assert (tmp_path / "vnode" / "vnode4" / "wal").is_dir()
    host.follow([_placed(1, WAL_LEVEL=2), _placed(4)])
    assert json.loads((tmp_path / PLACED_FILE).read_text())[0]["wal"] == {"WAL_LEVEL": 2}
    host.follow([_placed(4)])
    assert [v for v, _, _ in host.versions()] == [4]
    assert not (tmp_path / "vnode" / "vnode1").exists()
    host.close()
    again = VnodeHost(tmp_path)  # a restart opens what was placed, before any heartbeat
    assert [v for v, first, last in again.versions()] == [4]
    again.follow([])
    assert again.versions() == []
    assert json.loads((tmp_path / PLACED_FILE).read_text()) == []
    again.close()


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (("a", 1, "s", {}), ConfigError, "precision 's' is not ms, us or ns"),
        (("a", 1, "ms", {"WAL_LEVEL": 7}), SqlError, "bad database option"),
        (("a", 1, "ms", {"NOPE": 1}), ConfigError, "unknown WAL option 'NOPE'"),
    ],
)
def test_a_placement_no_database_could_have_is_refused(
    args: tuple[str, int, str, dict[str, int]], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        Placed.of(*args)


@pytest.mark.parametrize(
    "text",
    ["{", '[{"vgroup": 1}]', '[{"database": "a", "vgroup": 1, "precision": "x", "wal": {}}]'],
)
def test_a_damaged_placement_file_is_reported(tmp_path: Path, text: str) -> None:
    (tmp_path / PLACED_FILE).write_text(text)
    with pytest.raises(DataFileDamaged, match="placement file is damaged"):
        VnodeHost(tmp_path)


def test_a_reopened_mnode_opens_no_vnode_of_a_dnode(tmp_path: Path) -> None:
    registry = DnodeRegistry(lambda: 0)
    with Engine(tmp_path, background=False, role="mnode", registry=registry) as engine:
        engine.execute("CREATE DNODE 'h1:1'")
        registry.beat(1, {}, CAUGHT_UP)
        engine.execute("CREATE DATABASE a VGROUPS 2")
    with Engine(tmp_path, background=False, role="mnode", registry=registry) as again:
        assert again.state.vnodes == {}
        assert again.placed_on(1) != []
    assert not (tmp_path / "vnode").exists() or not any((tmp_path / "vnode").iterdir())


def test_an_mnode_on_an_all_in_one_directory_keeps_its_local_databases(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False) as server:
        server.execute("CREATE DATABASE old VGROUPS 2")
    registry = DnodeRegistry(lambda: 0)
    with Engine(tmp_path, background=False, role="mnode", registry=registry) as mnode:
        assert sorted(mnode.state.vnodes) == [1, 2]  # still its own to open
        mnode.execute("CREATE DNODE 'h1:1'")
        registry.beat(1, {}, CAUGHT_UP)
        mnode.execute("CREATE DATABASE new VGROUPS 1")
        assert [v for _, v in mnode.placed_on(1)] == [3]
        assert mnode.heartbeat_view("h1:1", 0, 10, 1 << 20).placed == mnode.placed_on(1)
