"""Which vnode a table lives in: a stable hash of its name over equal hash ranges; and a
super table's children as arrays, so that a write finds all the tables it names at once.

The hash is XXH32 (seed 0) of the UTF-8 bytes of `"<database>.<table>"` with both names
lower-case. Vgroup i of n (in the database's vgroup order) owns the hash range
[i * 2**32 / n, (i + 1) * 2**32 / n), as TDengine splits its hash space. The same name
maps to the same vgroup in every process and every version (docs/sql.md, "Placement").
A table's vgroup is computed once, at its creation, and kept on the catalog's `Table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from sqltopic.sql.model import Database, Table

HASH_SPACE = 1 << 32


def table_hash(db: str, table: str) -> int:
    return xxhash.xxh32_intdigest(f"{db}.{table}".encode())


def vgroup_for(database: Database, table: str) -> int:
    """The vgroup id that holds `table` of `database`."""
    slot = table_hash(database.name, table) * len(database.vgroups) // HASH_SPACE
    return database.vgroups[slot]


@dataclass(frozen=True)
class ChildIndex:
    """The child tables of one super table as parallel arrays: `names[i]` is
    `tables[i]`, of uid `uids[i]`, in vgroup `vgroups[i]`. A write through the super
    table resolves every name it gives with one hash lookup (`find`) and gathers uids
    and vgroups with `take`, instead of a catalog lookup per table."""

    names: pa.Array  # string
    uids: pa.Array  # int64
    vgroups: pa.Array  # int32
    tables: tuple[Table, ...]

    @classmethod
    def of(cls, children: Sequence[Table]) -> ChildIndex:
        return cls(
            names=pa.array([t.name for t in children], pa.string()),
            uids=pa.array([t.uid for t in children], pa.int64()),
            vgroups=pa.array([t.vgroup for t in children], pa.int32()),
            tables=tuple(children),
        )

    def find(self, names: pa.Array) -> pa.Array:
        """Each name's position in the index (int32), null where it is no child."""
        return pc.index_in(names, value_set=self.names)
