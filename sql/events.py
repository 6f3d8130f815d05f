"""DDL events: the meta entries a database's DDL writes to its vnodes' WALs, and how
each one changes the catalog.

The WAL is the source of truth for table-level DDL: the server appends an event, then
applies it to the catalog; at start it re-applies events the catalog has not seen, so a
crash between the two loses nothing. The same JSON is what `WITH META` topics deliver,
shaped like TDengine's `tmq_get_json_meta` (type, tableType, tableName, ...).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from sqltopic.sql.model import Catalog, Column, SuperTable, Table
from sqltopic.sql.types import ColumnType

Event = dict[str, Any]
Key = tuple[Literal["stable", "table"], str, str]  # what an event touched: kind, db, name


def _columns(cols: tuple[Column, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for c in cols:
        item: dict[str, Any] = {"name": c.name, "type": c.type.sql()}
        if c.cid:  # data columns; tags have none
            item["colId"] = c.cid
        out.append(item)
    return out


def _parse_columns(raw: list[dict[str, Any]]) -> tuple[Column, ...]:
    return tuple(Column(c["name"], ColumnType.parse(c["type"]), c.get("colId", 0)) for c in raw)


def create_stable(stb: SuperTable) -> Event:
    return {
        "type": "create", "tableType": "super", "db": stb.db, "tableName": stb.name,
        "columns": _columns(stb.columns), "tags": _columns(stb.tags), "createTime": stb.create_us,
    }  # fmt: skip


def create_table(tb: Table) -> Event:
    event: Event = {
        "type": "create", "db": tb.db, "tableName": tb.name, "vgroup": tb.vgroup,
        "createTime": tb.create_us, "uid": tb.uid,
    }  # fmt: skip
    if tb.stable is not None:
        tags = [{"name": k, "value": v} for k, v in tb.tags.items()]
        event.update(tableType="child", using=tb.stable, tags=tags)
    else:
        event.update(tableType="normal", columns=_columns(tb.columns))
    return event


def alter_stable(
    db: str, name: str, action: str, column: str, *, type_: ColumnType | None = None,
    new_name: str | None = None, cid: int = 0,
    table_type: Literal["super", "normal"] = "super",
) -> Event:  # fmt: skip
    """A super table's (or a normal table's) column or tag change: `action` is an
    `AlterAction` (add_column, modify_tag, rename_column, ...)."""
    event: Event = {
        "type": "alter", "tableType": table_type, "db": db, "tableName": name,
        "alterType": action, "colName": column,
    }  # fmt: skip
    if type_ is not None:
        event["colType"] = type_.sql()
    if cid:
        event["colId"] = cid
    if new_name is not None:
        event["colNewName"] = new_name
    return event


def set_tag(tb: Table, tag: str, value: Any) -> Event:
    return {
        "type": "alter", "tableType": "child", "db": tb.db, "tableName": tb.name,
        "alterType": "set_tag", "colName": tag, "colValue": value,
    }  # fmt: skip


def drop(
    db: str, name: str, table_type: Literal["super", "child", "normal"], using: str | None = None
) -> Event:
    """A drop; a child table's names its super table (`using`), as its create did."""
    event: Event = {"type": "drop", "tableType": table_type, "db": db, "tableName": name}
    if using is not None:
        event["using"] = using
    return event


def apply(catalog: Catalog, event: Event) -> list[Key]:
    """Change the catalog as `event` says; returns the keys it touched. Applying an
    event twice leaves the same catalog (start-up replay relies on it)."""
    kind, table_type = event["type"], event["tableType"]
    handler = _APPLY[(kind, "super" if table_type == "super" else "table")]
    return handler(catalog, event)


def _apply_create_stable(catalog: Catalog, e: Event) -> list[Key]:
    db, name = e["db"], e["tableName"]
    catalog.stables[(db, name)] = SuperTable(
        db, name, _parse_columns(e["columns"]), _parse_columns(e["tags"]), e["createTime"]
    )
    return [("stable", db, name)]


def _apply_create_table(catalog: Catalog, e: Event) -> list[Key]:
    db, name = e["db"], e["tableName"]
    if e["tableType"] == "child":
        tags = {t["name"]: t["value"] for t in e["tags"]}
        tb = Table(
            db, name, e["vgroup"], e["createTime"], stable=e["using"], tags=tags, uid=e["uid"]
        )
    else:
        columns = _parse_columns(e["columns"])
        tb = Table(db, name, e["vgroup"], e["createTime"], columns=columns, uid=e["uid"])
    catalog.tables[(db, name)] = tb
    return [("table", db, name)]


def _apply_alter_stable(catalog: Catalog, e: Event) -> list[Key]:
    db, name = e["db"], e["tableName"]
    stb = catalog.stables.get((db, name))
    if stb is None:
        return []
    action = e["alterType"]
    columns, tags = list(stb.columns), list(stb.tags)
    _change(columns if action.endswith("_column") else tags, e)
    catalog.stables[(db, name)] = SuperTable(db, name, tuple(columns), tuple(tags), stb.create_us)
    return [("stable", db, name), *_retag_children(catalog, db, name, action, e["colName"], e)]


def _change(target: list[Column], e: Event) -> None:
    """Apply one ADD, DROP, MODIFY or RENAME of a column or tag to `target` (in place).
    A modified or renamed column keeps its id, so stored rows keep following it."""
    verb, col = e["alterType"].split("_")[0], e["colName"]
    if verb == "add":
        if all(c.name != col for c in target):
            target.append(Column(col, ColumnType.parse(e["colType"]), e.get("colId", 0)))
    elif verb == "drop":
        target[:] = [c for c in target if c.name != col]
    elif verb == "modify":
        new_type = ColumnType.parse(e["colType"])
        target[:] = [Column(c.name, new_type, c.cid) if c.name == col else c for c in target]
    elif verb == "rename":
        target[:] = [Column(e["colNewName"], c.type, c.cid) if c.name == col else c for c in target]


def _retag_children(
    catalog: Catalog, db: str, stable: str, action: str, col: str, e: Event
) -> list[Key]:
    """Tag values of child tables follow ADD, DROP and RENAME TAG."""
    if action not in ("add_tag", "drop_tag", "rename_tag"):
        return []
    keys: list[Key] = []
    for tb in catalog.children(db, stable):
        tags = dict(tb.tags)
        if action == "add_tag":
            tags.setdefault(col, None)
        elif action == "drop_tag":
            tags.pop(col, None)
        elif col in tags:
            tags = {(e["colNewName"] if k == col else k): v for k, v in tags.items()}
        catalog.tables[(db, tb.name)] = _with_tags(tb, tags)
        keys.append(("table", db, tb.name))
    return keys


def _with_tags(tb: Table, tags: dict[str, Any]) -> Table:
    return Table(tb.db, tb.name, tb.vgroup, tb.create_us, stable=tb.stable, tags=tags, uid=tb.uid)


def _apply_alter_table(catalog: Catalog, e: Event) -> list[Key]:
    db, name = e["db"], e["tableName"]
    tb = catalog.tables.get((db, name))
    if tb is None:
        return []
    if e["alterType"] == "set_tag":
        catalog.tables[(db, name)] = _with_tags(tb, {**tb.tags, e["colName"]: e["colValue"]})
    else:
        columns = list(tb.columns)
        _change(columns, e)
        catalog.tables[(db, name)] = replace(tb, columns=tuple(columns))
    return [("table", db, name)]


def _apply_drop_stable(catalog: Catalog, e: Event) -> list[Key]:
    db, name = e["db"], e["tableName"]
    keys: list[Key] = [("stable", db, name)]
    for tb in catalog.children(db, name):
        del catalog.tables[(db, tb.name)]
        keys.append(("table", db, tb.name))
    catalog.stables.pop((db, name), None)
    return keys


def _apply_drop_table(catalog: Catalog, e: Event) -> list[Key]:
    db, name = e["db"], e["tableName"]
    catalog.tables.pop((db, name), None)
    return [("table", db, name)]


_APPLY = {
    ("create", "super"): _apply_create_stable,
    ("create", "table"): _apply_create_table,
    ("alter", "super"): _apply_alter_stable,
    ("alter", "table"): _apply_alter_table,
    ("drop", "super"): _apply_drop_stable,
    ("drop", "table"): _apply_drop_table,
}
