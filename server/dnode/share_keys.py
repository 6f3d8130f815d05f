"""A key_shared group's keys: which rows go to one consumer at a time, in WAL order.

By default a row's key is its table (one device: Pulsar's key is the message key, and a
child table is what a TDengine row is keyed by). A group's `group.key` names another:
a tag of the topic's super table (every device of one site, say) or a column of the
topic's rows (a value computed per row). `key_source` checks the name against a topic
at subscribe; `key_pieces` cuts the runs of a read into pieces of one key for the
window (server/vnode/share_window.py's `KeyPieces`). A row without a value (NULL, or a tag
dropped since) has the key "" as every other such row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from sqltopic.errors import ConfigError, excerpt
from sqltopic.server.core.tracked_reader import TrackedBlock, table_of
from sqltopic.server.vnode.share_window import KeyPieces
from sqltopic.sql.model import Catalog, Topic

KeyKind = Literal["table", "tag", "column"]


@dataclass(frozen=True)
class KeySource:
    """Where a topic's rows take their key from: their table, a tag, or a column."""

    kind: KeyKind
    name: str = ""


TABLE_KEY = KeySource("table")


def key_source(catalog: Catalog, topic: Topic, key: str | None) -> KeySource:
    """The key of `topic`'s rows for group.key `key` (None: the table). A column of the
    topic's rows wins over a tag of the same name (a query topic that selects the tag
    gives the same value). ConfigError when `key` is neither."""
    if key is None:
        return TABLE_KEY
    columns = _row_columns(catalog, topic)
    if key in columns:
        return KeySource("column", key)
    tags = _tags(catalog, topic)
    if key in tags:
        return KeySource("tag", key)
    raise ConfigError(
        f"group.key: {excerpt(key)} is neither a column of topic {topic.name}'s rows "
        f"({', '.join(columns) or 'none'}) nor a tag of its super table "
        f"({', '.join(tags) or 'none'}); name one of them, or leave group.key unset to key "
        "rows by their table"
    )


def key_pieces(
    catalog: Catalog, db: str, source: KeySource, blocks: Iterable[TrackedBlock]
) -> KeyPieces:
    """The pieces of one key of any run of `blocks`' rows."""
    blocks = list(blocks)
    by_table = table_of(blocks)
    if source.kind == "table":
        return by_table
    if source.kind == "tag":

        def by_tag(version: int, lo: int, hi: int) -> Iterator[tuple[int, int, str]]:
            for a, b, name in by_table(version, lo, hi):
                table = catalog.tables.get((db, name))
                yield a, b, _text(table.tags.get(source.name) if table is not None else None)

        return _joined(by_tag)
    keys: dict[int, dict[int, str]] = defaultdict(dict)
    for block in blocks:
        data = block.block.data
        if source.name not in data.column_names:
            continue  # a stable topic's table without the column: no value
        values = data.column(source.name).to_pylist()
        versions, indexes = block.id_lists
        for version, index, value in zip(versions, indexes, values, strict=True):
            keys[version][index] = _text(value)

    def by_column(version: int, lo: int, hi: int) -> Iterator[tuple[int, int, str]]:
        of = keys.get(version, {})
        for i in range(lo, hi):
            yield i, i + 1, of.get(i, "")

    return _joined(by_column)


def _joined(pieces: KeyPieces) -> KeyPieces:
    """`pieces` with neighbours of the same key made one."""

    def joined(version: int, lo: int, hi: int) -> Iterator[tuple[int, int, str]]:
        held: tuple[int, int, str] | None = None
        for a, b, key in pieces(version, lo, hi):
            if held is not None and held[2] == key and held[1] == a:
                held = (held[0], b, key)
                continue
            if held is not None:
                yield held
            held = (a, b, key)
        if held is not None:
            yield held

    return joined


def _row_columns(catalog: Catalog, topic: Topic) -> list[str]:
    """The columns of the rows a topic delivers (none for a database topic, whose rows
    come from tables of any shape)."""
    if topic.kind == "query":
        return [column.name for column in topic.output]
    if topic.kind == "stable" and topic.target is not None:
        return [column.name for column in catalog.columns_of(topic.db, topic.target)]
    return []


def _tags(catalog: Catalog, topic: Topic) -> list[str]:
    """The tags of the super table the topic reads (of a child table's, for a query on
    one child), none for a normal table or a database topic."""
    if topic.target is None:
        return []
    stable = catalog.stables.get((topic.db, topic.target))
    if stable is None:
        table = catalog.tables.get((topic.db, topic.target))
        stable = catalog.stables.get((topic.db, table.stable or "")) if table else None
    return [tag.name for tag in stable.tags] if stable is not None else []


def _text(value: Any) -> str:
    """A key's value as the window keeps it (the rendezvous hash takes strings)."""
    return "" if value is None else str(value)
