"""The catalog on disk (sql/catalog_store.py): dnodes and placement round-trip, older
files load, the cluster id is made once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sqltopic.sql.catalog_store import CatalogStore
from sqltopic.sql.model import Catalog, Database, Dnode


def test_dnodes_and_placement_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    catalog = Catalog()
    catalog.dnodes[2] = Dnode(2, "h2:6030", 11)
    catalog.next_dnode = 5
    catalog.databases["a"] = Database("a", (7, 8), "ms", {}, 12, placement=(2, 3))
    catalog.databases["b"] = Database("b", (9,), "ms", {}, 13)
    store = CatalogStore(path)
    store.commit(catalog, [("dnode", "", "2"), ("database", "", "a"), ("database", "", "b")])
    store.close()
    loaded, _ = CatalogStore(path).load()
    assert loaded.dnodes == {2: Dnode(2, "h2:6030", 11)}
    assert loaded.next_dnode == 5
    assert loaded.databases["a"].placement == (2, 3)
    assert loaded.databases["a"].dnode_of(8) == 3
    assert loaded.databases["b"].placement == ()
    assert loaded.databases["b"].dnode_of(9) is None
    # a database of the all-in-one server is written as before clusters existed
    with sqlite3.connect(path) as con:
        (body,) = con.execute("SELECT body FROM objects WHERE key = 'b'").fetchone()
    assert "placement" not in json.loads(body)


def test_a_dropped_dnode_is_deleted(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    catalog = Catalog()
    catalog.dnodes[1] = Dnode(1, "h1:6030", 1)
    store = CatalogStore(path)
    store.commit(catalog, [("dnode", "", "1")])
    del catalog.dnodes[1]
    store.commit(catalog, [("dnode", "", "1")])
    assert store.load()[0].dnodes == {}


def test_an_older_catalog_has_no_dnodes_and_next_dnode_1(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    store = CatalogStore(path)
    store.commit(Catalog(), [])
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM settings WHERE name = 'next_dnode'")
    loaded, _ = store.load()
    assert (loaded.dnodes, loaded.next_dnode, loaded.next_vgroup) == ({}, 1, 1)


def test_the_cluster_id_is_made_once(tmp_path: Path) -> None:
    path = tmp_path / "catalog.sqlite"
    first = CatalogStore(path).cluster_id()
    assert len(first) == 32
    assert CatalogStore(path).cluster_id() == first
