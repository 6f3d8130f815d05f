"""Which vnode a table lives in: a stable hash of its name over equal hash ranges.

The hash is XXH32 (seed 0) of the UTF-8 bytes of `"<database>.<table>"` with both names
lower-case. Vgroup i of n (in the database's vgroup order) owns the hash range
[i * 2**32 / n, (i + 1) * 2**32 / n), as TDengine splits its hash space. The same name
maps to the same vgroup in every process and every version (docs/sql.md, "Placement").
"""

from __future__ import annotations

import xxhash

from sqltopic.sql.model import Database

HASH_SPACE = 1 << 32


def table_hash(db: str, table: str) -> int:
    return xxhash.xxh32_intdigest(f"{db}.{table}".encode())


def vgroup_for(database: Database, table: str) -> int:
    """The vgroup id that holds `table` of `database`."""
    slot = table_hash(database.name, table) * len(database.vgroups) // HASH_SPACE
    return database.vgroups[slot]
