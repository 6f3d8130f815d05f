"""A cluster's catalog change log (sql/change_log.py): numbering, trimming, snapshots for
a dnode that needs trimmed changes, and a replica applying both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sqltopic.sql import change_log
from sqltopic.sql.catalog_store import CatalogStore
from sqltopic.sql.model import Catalog, Database, Dnode


def _mnode(path: Path, changes: int) -> tuple[CatalogStore, Catalog]:
    store = CatalogStore(path)
    catalog = Catalog()
    for i in range(1, changes + 1):
        catalog.dnodes[i] = Dnode(i, f"h{i}:1", i)
        store.commit(catalog, [("dnode", "", str(i))], log={"entries": {}})
    return store, catalog


def test_changes_are_numbered_and_read_after_a_point(tmp_path: Path) -> None:
    store, _ = _mnode(tmp_path / "m.sqlite", 5)
    log = store.log
    assert (log.first(), log.last()) == (1, 5)
    assert [seq for seq, _ in log.after(2, 10)] == [3, 4, 5]
    assert [seq for seq, _ in log.after(0, 2)] == [1, 2]
    assert log.after(5, 10) == []
    body = json.loads(log.after(4, 1)[0][1])
    assert body["objects"][0][:2] == ["dnode", "5"]
    assert body["settings"]["next_vgroup"] == 1


def test_trimmed_changes_are_replaced_by_a_snapshot(tmp_path: Path) -> None:
    store, catalog = _mnode(tmp_path / "m.sqlite", 5)
    log = store.log
    assert log.trim(3) == 3
    assert (log.first(), log.last()) == (4, 5)
    assert [seq for seq, _ in log.after(3, 10)] == [4, 5]  # still all there
    ((seq, body),) = log.after(1, 10)  # needs 2 and 3: gone
    snapshot = json.loads(body)
    assert seq == 5
    assert snapshot["snapshot"] is True
    assert sorted(key for _kind, key, _ in snapshot["objects"]) == ["1", "2", "3", "4", "5"]
    assert log.trim(99) == 2  # never past the last
    assert (log.first(), log.last()) == (6, 5)  # none kept, numbering goes on
    catalog.dnodes[6] = Dnode(6, "h6:1", 6)
    assert store.commit(catalog, [("dnode", "", "6")], log={}) == 6
    assert log.trim(0) == 0


def test_the_log_keeps_at_most_max_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_log, "MAX_CHANGES_KEPT", 2)
    store, _ = _mnode(tmp_path / "m.sqlite", 5)
    assert store.log.trim(0) == 3  # an offline dnode holds nothing back beyond the cap
    assert store.log.first() == 4


def test_a_replica_applies_changes_and_snapshots(tmp_path: Path) -> None:
    mnode, catalog = _mnode(tmp_path / "m.sqlite", 3)
    replica = CatalogStore(tmp_path / "d.sqlite")
    for seq, body in mnode.log.after(0, 10):
        replica.log.apply(seq, body, {})
    assert replica.log.applied() == 3
    assert sorted(replica.load()[0].dnodes) == [1, 2, 3]
    del catalog.dnodes[2]
    catalog.databases["a"] = Database("a", (1,), "ms", {}, 1, placement=(1,))
    mnode.commit(catalog, [("dnode", "", "2"), ("database", "", "a")], log={})
    mnode.log.trim(4)
    ((seq, body),) = mnode.log.after(1, 10)
    replica.log.apply(seq, body, {})
    loaded = replica.load()[0]
    assert replica.log.applied() == 4
    assert sorted(loaded.dnodes) == [1, 3]
    assert loaded.databases["a"].placement == (1,)
