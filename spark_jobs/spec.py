"""What a read of the `sqltopic_wal` source delivers, decided once on the driver from the
catalog and shipped (pickled) to every task: the columns, and per vgroup the tables whose
entries count, with their tag values.

The columns, in order: the table's current data columns, its super table's tags (for a
super or child table), `tbname`, `_vgroup` (INT) and `_version` (BIGINT: the WAL version
of the entry the row was written in; rows of one entry share it, and they are in WAL
order within a vgroup when sorted by `_version` and then by their place in the entry).
A `columns` option keeps only the columns named (in the order of the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from sqltopic.errors import BackfillError, ConfigError, Error, NotFoundError
from sqltopic.spark_jobs import types
from sqltopic.spark_jobs.commit import PARTITION
from sqltopic.spark_jobs.remote import Remote
from sqltopic.sql.catalog_store import CATALOG_FILE, load_readonly
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import TBNAME, Catalog, Column, Table, Topic
from sqltopic.sql.topic import topic_schema
from sqltopic.sql.topic.arrow_eval import ArrowPlan, arrow_plan

VGROUP = "_vgroup"
VERSION = "_version"


@dataclass(frozen=True)
class TableRef:
    """A table whose data entries a read delivers: entries carry its name and uid."""

    uid: int
    tags: tuple[Any, ...]  # its tag values, in the order of `Spec.tags`


@dataclass(frozen=True)
class Spec:
    data_dir: str
    database: str
    data: pa.Schema  # the current data columns, as `conform` wants them
    tags: pa.Schema  # the super table's tags (empty for a normal table)
    tables: dict[int, dict[str, TableRef]]  # vgroup -> table name -> table
    fields: tuple[str, ...]  # the columns delivered, in order
    arrow: pa.Schema  # the delivered columns in sqltopic's Arrow types
    spark: pa.Schema  # the same in Spark's Arrow types (see `types`)
    # a query topic's condition, evaluated in the source to leave out rows it rejects
    prefilter: ArrowPlan | None = None
    # the entries come through the server (remote.py), not from `data_dir`'s files
    remote: Remote | None = None

    @property
    def vgroups(self) -> tuple[int, ...]:
        return tuple(sorted(self.tables))


def load_catalog(data_dir: Path) -> Catalog:
    """The catalog of a data directory, read-only (a server may be running on it)."""
    try:
        catalog, _applied = load_readonly(data_dir / CATALOG_FILE)
    except FileNotFoundError as exc:
        raise BackfillError(str(exc)) from None
    return catalog


def build_spec(
    data_dir: Path,
    catalog: Catalog,
    database: str,
    table: str,
    columns: tuple[str, ...] = (),
    prefilter: str | None = None,
    remote: Remote | None = None,
) -> Spec:
    """The read of `database.table` (super, child or normal table), all columns or those
    named in `columns`; with `prefilter` (a query topic on that table), without rows the
    topic's condition rejects."""  # fmt: skip
    db = catalog.database(database)
    data_cols = catalog.columns_of(database, table)
    tags, tables = target_tables(catalog, database, table)
    full = _full_schema(data_cols, tags, db.precision)
    fields = _pick(full, columns, f"{database}.{table}")
    chosen = pa.schema([full.field(name) for name in fields])
    return Spec(
        data_dir=str(data_dir),
        database=database,
        data=data_schema(data_cols, db.precision),
        tags=pa.schema([pa.field(t.name, t.type.arrow(db.precision)) for t in tags]),
        tables={v: {t.name: _ref(t, tags) for t in tables if t.vgroup == v} for v in db.vgroups},
        fields=fields,
        arrow=chosen,
        spark=types.spark_schema(chosen),
        prefilter=_prefilter(catalog, database, table, prefilter, fields),
        remote=remote,
    )


def _prefilter(
    catalog: Catalog, database: str, table: str, topic_name: str | None, fields: tuple[str, ...]
) -> ArrowPlan | None:
    """The plan of the topic's condition when the source can evaluate it exactly over the
    delivered columns; None (deliver every row) otherwise."""
    if topic_name is None:
        return None
    topic = catalog.topic(topic_name.lower())
    if topic.kind != "query" or topic.db != database or topic.target != table:
        raise ConfigError(
            f"option prefilter: {topic_name} is not a query topic on {database}.{table}; "
            "name one that reads this table, or leave the option out"
        )
    plan = arrow_plan(topic.select_sql)
    if plan is None or plan.where is None or not plan.reads <= set(fields):
        return None
    return plan


def target_tables(
    catalog: Catalog, database: str, name: str
) -> tuple[tuple[Column, ...], list[Table]]:
    """The tags and the tables of a read of `name`: a super table's tags and children, a
    child table's super table's tags and itself, or a normal table alone."""
    stb = catalog.stables.get((database, name))
    if stb is not None:
        return stb.tags, catalog.children(database, name)
    table = catalog.table(database, name)
    if table.stable is None:
        return (), [table]
    return catalog.stable(database, table.stable).tags, [table]


def writable_output(
    catalog: Catalog, topic: Topic, who: str, verb: str, error: type[Error]
) -> pa.Schema:
    """`topic`'s output columns, or `error` unless `who` (the backfill, the streaming
    source) can deliver its rows as the backfill's files hold them: a query topic without
    parameters, whose output columns are not the files' own (`vgroup`, `_version`)."""
    if topic.params:
        raise error(
            f"topic {topic.name!r} has parameters ({', '.join(p.name for p in topic.params)}); "
            f"{who} does not bind them yet: create a topic with the values written in its WHERE "
            f"(e.g. tbname = 'd1001' instead of tbname = ?) and {verb} that"
        )
    if topic.kind != "query":
        what = "AS STABLE" if topic.kind == "stable" else "AS DATABASE"
        raise error(
            f"topic {topic.name!r} is a {topic.kind} topic ({what}); {who} reads query topics "
            "only (their rows have one fixed schema, and no meta events): create one, e.g. "
            f"CREATE TOPIC {topic.name}_rows AS SELECT * FROM <super table>, and {verb} it"
        )
    output = topic_schema(topic, catalog)
    for name in output.names:
        if name in (PARTITION, VERSION):
            raise error(
                f"topic {topic.name!r} has an output column {name!r}, a name {who} uses itself "
                f"({PARTITION}=N directories or a column, {VERSION}); rename it with AS"
            )
    return output


def _ref(table: Table, tags: tuple[Column, ...]) -> TableRef:
    return TableRef(table.uid, tuple(table.tags.get(t.name) for t in tags))


def _full_schema(
    data_cols: tuple[Column, ...], tags: tuple[Column, ...], precision: Any
) -> pa.Schema:
    fields = [pa.field(c.name, c.type.arrow(precision)) for c in (*data_cols, *tags)]
    fields += [pa.field(TBNAME, pa.string()), pa.field(VGROUP, pa.int32())]
    fields.append(pa.field(VERSION, pa.int64()))
    return pa.schema(fields)


def _pick(full: pa.Schema, columns: tuple[str, ...], what: str) -> tuple[str, ...]:
    if not columns:
        return tuple(full.names)
    wanted = {c.strip().lower() for c in columns if c.strip()}
    unknown = sorted(wanted - set(full.names))
    if unknown:
        raise NotFoundError(f"column {unknown[0]!r} does not exist in {what}; use some of "
                            f"{', '.join(full.names)}")  # fmt: skip
    return tuple(n for n in full.names if n in wanted)
