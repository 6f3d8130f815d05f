"""A dataset written through every write path, and the same rows as a DuckDB reference.

`write_dataset(engine)` creates database `power` (VGROUPS 4) with super table `meters`
(every column type) and normal table `ntb`, then writes rows by multi-table INSERT,
INSERT ... USING (auto-create), partial column lists, INSERT through the super table
with `tbname`, `Engine.write` through the super table (tbname and tag columns, creating
children) and into a child and a normal table, interleaved over ten children.

It returns a `Dataset`: the tag values of each child and the rows written, as chunks in
the order the engine appends them (a statement's rows of one table form one entry, in
the order the table first appears in it). That order per vgroup is the WAL order.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from sqltopic.server.core.engine import Engine
from tests.conftest import FakeClock

DB = "power"
VGROUPS = 4
BASE_TS = 1_538_548_685_000  # ms

# (name, TDengine type, Arrow type)
DATA_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("ts", "TIMESTAMP", pa.timestamp("ms")),
    ("b", "BOOL", pa.bool_()),
    ("ti", "TINYINT", pa.int8()),
    ("si", "SMALLINT", pa.int16()),
    ("i", "INT", pa.int32()),
    ("bi", "BIGINT", pa.int64()),
    ("uti", "TINYINT UNSIGNED", pa.uint8()),
    ("usi", "SMALLINT UNSIGNED", pa.uint16()),
    ("ui", "INT UNSIGNED", pa.uint32()),
    ("ubi", "BIGINT UNSIGNED", pa.uint64()),
    ("f", "FLOAT", pa.float32()),
    ("d", "DOUBLE", pa.float64()),
    ("vc", "VARCHAR(24)", pa.string()),
    ("bn", "BINARY(16)", pa.string()),
    ("nc", "NCHAR(8)", pa.string()),
]
TAG_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("location", "VARCHAR(32)", pa.string()),
    ("groupid", "INT", pa.int32()),
    ("region", "NCHAR(8)", pa.string()),
]
NORMAL_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("ts", "TIMESTAMP", pa.timestamp("ms")),
    ("c1", "INT", pa.int32()),
    ("c2", "DOUBLE", pa.float64()),
    ("c3", "VARCHAR(16)", pa.string()),
]
DATA_NAMES = [c[0] for c in DATA_COLUMNS]
TAG_NAMES = [c[0] for c in TAG_COLUMNS]
NORMAL_NAMES = [c[0] for c in NORMAL_COLUMNS]
CHILDREN = [f"d{i}" for i in range(10)]
NORMAL = "ntb"


def _defs(columns: Sequence[tuple[str, str, pa.DataType]]) -> str:
    return ", ".join(f"{name} {sql_type}" for name, sql_type, _ in columns)


SCHEMA_DDL = f"""
CREATE DATABASE {DB} VGROUPS {VGROUPS};
USE {DB};
CREATE STABLE meters ({_defs(DATA_COLUMNS)}) TAGS ({_defs(TAG_COLUMNS)});
CREATE TABLE {NORMAL} ({_defs(NORMAL_COLUMNS)});
"""

Row = dict[str, Any]

_VARCHARS = ["", "hello", "Zürich", "it's", "MiXeD", "10.5", "3", "a b c", "-7"]
_BINARIES = ["bin", "b%x", "x_y", "", "BIN2"]
_NCHARS = ["北京", "Zürich", "abc", "ÅÄÖ", "", "x"]


class RowMaker:
    """Deterministic rows with every type's edge values and about one NULL in six."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ts = BASE_TS

    def _maybe(self, value: Any) -> Any:
        return None if self.rng.random() < 1 / 6 else value

    def _pick(self, *choices: Any) -> Any:
        return self.rng.choice(choices)

    def next_ts(self) -> int:
        self.ts += 1 + self.rng.randrange(1000)
        return self.ts

    def meter(self) -> Row:
        r, m = self.rng, self._maybe
        return {
            "ts": self.next_ts(),
            "b": m(r.random() < 0.5),
            "ti": m(self._pick(-128, 127, 0, r.randint(-100, 100))),
            "si": m(self._pick(-32768, 32767, r.randint(-3000, 3000))),
            "i": m(self._pick(2**31 - 1, -(2**31) + 1, r.randint(-1000, 1000), r.randint(0, 500))),
            "bi": m(self._pick(2**63 - 1, -(2**63), r.randint(-(2**40), 2**40))),
            "uti": m(self._pick(0, 255, r.randint(0, 255))),
            "usi": m(self._pick(0, 65535, r.randint(0, 65535))),
            "ui": m(self._pick(0, 2**32 - 1, r.randint(0, 10**6))),
            "ubi": m(self._pick(0, 2**64 - 1, r.randint(0, 10**12))),
            "f": m(r.randint(-4000, 4000) / 8),  # exact in FLOAT
            "d": m(self._pick(r.uniform(-1e6, 1e6), 0.0, r.randint(1, 100) / 4)),
            "vc": m(r.choice(_VARCHARS)),
            "bn": m(r.choice(_BINARIES)),
            "nc": m(r.choice(_NCHARS)),
        }

    def normal(self) -> Row:
        r, m = self.rng, self._maybe
        return {
            "ts": self.next_ts(),
            "c1": m(r.randint(-50, 50)),
            "c2": m(r.randint(-400, 400) / 8),
            "c3": m(r.choice(["alpha", "beta", "Gamma", ""])),
        }


@dataclass
class Chunk:
    """Rows one statement appended to one table (every column; unwritten ones None)."""

    table: str
    rows: list[Row]


@dataclass
class Dataset:
    tags: dict[str, dict[str, Any]] = field(default_factory=dict)  # child -> tag values
    chunks: list[Chunk] = field(default_factory=list)
    vgroup_of: dict[str, int] = field(default_factory=dict)  # table -> vgroup (SHOW TABLES)

    def add(self, table: str, rows: list[Row]) -> None:
        names = NORMAL_NAMES if table == NORMAL else DATA_NAMES
        full = [{n: r.get(n) for n in names} for r in rows]
        self.chunks.append(Chunk(table, full))

    def meters_reference(self) -> pa.Table:
        """Every child row with its tags, `tbname`, WAL order `__seq` and `__vgroup`."""
        out: list[Row] = []
        for seq, (table, row) in enumerate(self.all_rows()):
            if table == NORMAL:
                continue
            out.append({
                **row, **self.tags[table], "tbname": table, "__seq": seq,
                "__vgroup": self.vgroup_of[table],
            })  # fmt: skip
        fields = [(n, t) for n, _, t in (*DATA_COLUMNS, *TAG_COLUMNS)]
        fields += [("tbname", pa.string()), ("__seq", pa.int64()), ("__vgroup", pa.int32())]
        return pa.Table.from_pylist(out, schema=pa.schema(fields))

    def normal_reference(self) -> pa.Table:
        out = [
            {**row, "tbname": NORMAL, "__seq": seq, "__vgroup": self.vgroup_of[NORMAL]}
            for seq, (table, row) in enumerate(self.all_rows())
            if table == NORMAL
        ]
        fields = [(n, t) for n, _, t in NORMAL_COLUMNS]
        fields += [("tbname", pa.string()), ("__seq", pa.int64()), ("__vgroup", pa.int32())]
        return pa.Table.from_pylist(out, schema=pa.schema(fields))

    def all_rows(self) -> list[tuple[str, Row]]:
        return [(c.table, row) for c in self.chunks for row in c.rows]

    def rows_in_vgroup(self, vgroup: int) -> list[tuple[Any, ...]]:
        """(table, *values) of every row of every table of `vgroup`, in WAL order."""
        return [
            (table, *_python(table, row))
            for table, row in self.all_rows()
            if self.vgroup_of[table] == vgroup
        ]

    def reference_connection(self) -> duckdb.DuckDBPyConnection:
        """DuckDB with `meters` and `ntb` registered as plain tables (UTC)."""
        con = duckdb.connect()
        con.execute("SET TimeZone='UTC'")
        con.register("meters_rel", self.meters_reference())
        con.register("ntb_rel", self.normal_reference())
        con.execute("CREATE TABLE meters AS SELECT * FROM meters_rel")
        con.execute("CREATE TABLE ntb AS SELECT * FROM ntb_rel")
        return con


@dataclass(frozen=True)
class Loaded:
    """An engine holding the dataset, the dataset, and the DuckDB reference over it."""

    engine: Engine
    data: Dataset
    ref: duckdb.DuckDBPyConnection


def _python(table: str, row: Row) -> list[Any]:
    """A row's values as Arrow gives them back (timestamps as datetimes)."""
    columns = NORMAL_COLUMNS if table == NORMAL else DATA_COLUMNS
    arrays = [pa.array([row[n]], t) for n, _, t in columns]
    return [a[0].as_py() for a in arrays]


# --- writing ----------------------------------------------------------------------------


def literal(value: Any) -> str:
    """A value as an INSERT literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def values(rows: Sequence[Row], names: Sequence[str]) -> str:
    return " ".join("(" + ", ".join(literal(r.get(n)) for n in names) + ")" for r in rows)


def arrow_rows(
    rows: Sequence[Row], columns: Sequence[tuple[str, str, pa.DataType]], extra: Row | None = None
) -> pa.Table:
    """`rows` as an Arrow table of `columns` (plus constant `extra` columns)."""
    data = {n: pa.array([r.get(n) for r in rows], t) for n, _, t in columns}
    for name, value in (extra or {}).items():
        data[name] = pa.array([value] * len(rows))
    return pa.table(data)


def write_dataset(engine: Engine, seed: int = 20261121) -> Dataset:
    """Create the schema and write the dataset (see the module docstring)."""
    mk = RowMaker(seed)
    ds = Dataset()
    ex = engine.execute
    ex(SCHEMA_DDL)

    # child tables by CREATE TABLE: all tags, named tags, one tag (the rest NULL)
    ds.tags["d0"] = {"location": "SF", "groupid": 1, "region": "北京"}
    ds.tags["d1"] = {"location": "LA", "groupid": 2, "region": "west"}
    ds.tags["d2"] = {"location": "SF", "groupid": 2, "region": None}
    ds.tags["d3"] = {"location": "NY", "groupid": None, "region": None}
    ds.tags["d9"] = {"location": "Chicago", "groupid": 7, "region": "mid"}
    ex("""
        CREATE TABLE d0 USING meters TAGS ('SF', 1, '北京');
        CREATE TABLE d1 USING meters TAGS ('LA', 2, 'west');
        CREATE TABLE d2 USING meters (groupid, location) TAGS (2, 'SF');
        CREATE TABLE d3 USING meters (location) TAGS ('NY');
        CREATE TABLE power.d9 USING power.meters TAGS ('Chicago', 7, 'mid');
    """)

    # a multi-table INSERT with full rows
    parts = [("d0", 3), ("d1", 2), ("d2", 1), ("d3", 2)]
    sql = "INSERT INTO"
    for table, n in parts:
        batch = [mk.meter() for _ in range(n)]
        sql += f" {table} VALUES {values(batch, DATA_NAMES)}"
        ds.add(table, batch)
    ex(sql)

    # INSERT ... USING ... TAGS creates d4 and d5; d0 gets a row in the same statement
    ds.tags["d4"] = {"location": "la", "groupid": 3, "region": "Zürich"}
    ds.tags["d5"] = {"location": "SF", "groupid": 3, "region": None}
    r4, r5, r0 = [mk.meter(), mk.meter()], [mk.meter()], [mk.meter()]
    ex(
        f"INSERT INTO d4 USING meters TAGS ('la', 3, 'Zürich') VALUES {values(r4, DATA_NAMES)}"
        f" d5 USING meters (groupid, location) TAGS (3, 'SF') VALUES {values(r5, DATA_NAMES)}"
        f" d0 VALUES {values(r0, DATA_NAMES)}"
    )
    ds.add("d4", r4)
    ds.add("d5", r5)
    ds.add("d0", r0)

    # column lists: a subset, and a subset in another order
    r1 = [mk.meter() for _ in range(2)]
    r3 = [mk.meter()]
    ex(
        f"INSERT INTO d1 (ts, i, vc) VALUES {values(r1, ['ts', 'i', 'vc'])} "
        f"d3 (nc, ts, d) VALUES {values(r3, ['nc', 'ts', 'd'])}"
    )
    ds.add("d1", [{k: r[k] for k in ("ts", "i", "vc")} for r in r1])
    ds.add("d3", [{k: r[k] for k in ("nc", "ts", "d")} for r in r3])

    # Arrow through the super table: tbname and tags create d6 and d7; d1 exists
    ds.tags["d6"] = {"location": "Boston", "groupid": 4, "region": "east"}
    ds.tags["d7"] = {"location": None, "groupid": 5, "region": "east"}
    order = ["d6", "d1", "d6", "d7", "d1"]
    batch = [mk.meter() for _ in order]
    arrow = arrow_rows(batch, DATA_COLUMNS)
    arrow = arrow.append_column("tbname", pa.array(order))
    # tag values for the existing d1 are ignored: its tags stay as created
    ignored = {"location": "ignored", "groupid": 99, "region": "no"}
    for name, _, arrow_type in TAG_COLUMNS:
        tag_values = [ds.tags[t][name] if t != "d1" else ignored[name] for t in order]
        arrow = arrow.append_column(name, pa.array(tag_values, arrow_type))
    assert engine.write("power.meters", arrow) == len(order)
    for table in dict.fromkeys(order):
        ds.add(table, [r for t, r in zip(order, batch, strict=True) if t == table])

    # Arrow into a child table: some columns, in another order, in wider types
    r9 = [mk.meter() for _ in range(3)]
    arrow9 = pa.table({
        "d": pa.array([r["d"] for r in r9], pa.float64()),
        "TS": pa.array([r["ts"] for r in r9], pa.int64()),
        "i": pa.array([r["i"] for r in r9], pa.int64()),
        "nc": pa.array([r["nc"] for r in r9], pa.string()),
    })  # fmt: skip
    assert engine.write("d9", arrow9) == 3
    ds.add("d9", [{k: r[k] for k in ("ts", "d", "i", "nc")} for r in r9])

    # INSERT through the super table with tbname: creates d8 from its tag columns
    ds.tags["d8"] = {"location": "SF", "groupid": 6, "region": None}
    r8 = [mk.meter() for _ in range(3)]
    names = ["ts", "i", "f", "vc"]
    order = ["d8", "d0", "d8"]
    tuples = " ".join(
        f"('{t}', " + ", ".join(literal(r[n]) for n in names) + ", 'SF', 6)"
        for t, r in zip(order, r8, strict=True)
    )
    ex(f"INSERT INTO meters (tbname, {', '.join(names)}, location, groupid) VALUES {tuples}")
    ds.add("d8", [{k: r[k] for k in names} for t, r in zip(order, r8, strict=True) if t == "d8"])
    ds.add("d0", [{k: r[k] for k in names} for t, r in zip(order, r8, strict=True) if t == "d0"])

    # the normal table: INSERT and Arrow
    rn = [mk.normal() for _ in range(3)]
    ex(f"INSERT INTO ntb VALUES {values(rn, NORMAL_NAMES)}")
    ds.add(NORMAL, rn)
    rn = [mk.normal() for _ in range(4)]
    assert engine.write("power.ntb", arrow_rows(rn, NORMAL_COLUMNS)) == 4
    ds.add(NORMAL, rn)

    # interleaved multi-table INSERTs, a table twice in one statement included
    for _ in range(8):
        picks = [mk.rng.choice([*CHILDREN, NORMAL]) for _ in range(5)]
        sql = "INSERT INTO"
        for table in picks:
            n = mk.rng.randint(1, 4)
            if table == NORMAL:
                batch = [mk.normal() for _ in range(n)]
                sql += f" {table} VALUES {values(batch, NORMAL_NAMES)}"
            else:
                batch = [mk.meter() for _ in range(n)]
                sql += f" {table} VALUES {values(batch, DATA_NAMES)}"
            ds.add(table, batch)
        ex(sql)

    ds.vgroup_of = {r[0]: r[5] for r in ex(f"SHOW {DB}.TABLES").rows}
    return ds


@contextlib.contextmanager
def loaded_dataset(directory: Path) -> Iterator[Loaded]:
    """The dataset written to a new engine on `directory` (fake clock, no background
    threads), with its reference connection; both closed at the end."""
    engine = Engine(directory, clock=FakeClock(), background=False)
    try:
        data = write_dataset(engine)
        ref = data.reference_connection()
        yield Loaded(engine, data, ref)
        ref.close()
    finally:
        engine.close()
