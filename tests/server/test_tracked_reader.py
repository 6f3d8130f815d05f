"""Reading topics for shared groups (server/core/tracked_reader.py): from any position, every
topic's rows are exactly what `read_topic` delivers, each named by an id that reads
back the same row; rows of a dropped table are reported gone; parameterized topics are
refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sqltopic.errors import ConfigError
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock
from sqltopic.server.core.tracked_reader import read_rows, read_tracked
from sqltopic.server.vnode.share_window import runs_of
from tests.server.support import vgroups_of
from tests.server.test_shared_pass import TOPICS, _history

# Topics that deliver rows (ONLY META delivers none to shared groups).
ROW_TOPICS = [name for name in TOPICS if name != "db_only_meta"]


def _rows(blocks: list[TopicBlock]) -> list[tuple[object, ...]]:
    return [(b.table_name, *r.values()) for b in blocks for r in b.data.to_pylist()]


@pytest.mark.parametrize("name", ROW_TOPICS)
def test_tracked_reads_give_the_topics_rows_and_ids_that_read_them_back(
    power: Engine, name: str
) -> None:
    _history(power)
    for vgroup in vgroups_of(power, "power"):
        end = power.state.vnode(vgroup).wal.next_version
        for position in range(1, end + 1, 3):
            items, _ = power.read_topic(name, vgroup, position, 10**9)
            plain = [i for i in items if isinstance(i, TopicBlock)]
            tracked, next_version = read_tracked(power.state, name, vgroup, position, 10**9)
            assert next_version == end
            assert _rows([t.block for t in tracked]) == _rows(plain), (name, vgroup, position)
            ids = [rid for t in tracked for rid in t.ids()]
            assert ids == sorted(set(ids))
            assert all(v >= position for v, _ in ids)
            again, gone = read_rows(power.state, name, vgroup, runs_of(ids))
            assert gone == []
            assert [rid for t in again for rid in t.ids()] == ids
            assert _rows([t.block for t in again]) == _rows(plain)


def test_a_row_of_a_dropped_table_is_gone(power: Engine) -> None:
    power.execute(
        "CREATE TABLE a USING meters TAGS ('x', 1); CREATE TOPIC ta AS SELECT * FROM meters;"
        "INSERT INTO a VALUES (1, 1, 1, 1) (2, 1, 2, 1)"
    )
    vgroup = power.state.catalog.tables[("power", "a")].vgroup
    tracked, _ = read_tracked(power.state, "ta", vgroup, 1, 10**9)
    ids = [rid for t in tracked for rid in t.ids()]
    assert len(ids) == 2
    power.execute("DROP TABLE a")
    assert read_rows(power.state, "ta", vgroup, runs_of(ids)) == ([], runs_of(ids))


def test_rows_of_one_multi_table_entry_have_ids_counted_over_the_whole_entry(
    power: Engine,
) -> None:
    names = [f"t{k}" for k in range(12)]
    power.execute("; ".join(f"CREATE TABLE {n} USING meters TAGS ('x', 1)" for n in names))
    vgroup_of = {n: power.state.catalog.tables[("power", n)].vgroup for n in names}
    first, second = next(
        (a, b) for a in names for b in names if a < b and vgroup_of[a] == vgroup_of[b]
    )  # two tables of one vgroup: one write to both is one entry there
    power.execute(
        f"CREATE TOPIC only_second AS SELECT ts, voltage FROM meters WHERE tbname = '{second}'"
    )
    rows = 4
    power.write(
        "power.meters",
        pa.table({
            "tbname": [first, first, second, second],
            "ts": pa.array(range(rows), pa.timestamp("ms")),
            "current": pa.array([1.0] * rows, pa.float32()),
            "voltage": pa.array(range(rows), pa.int32()),
            "phase": pa.array([0.5] * rows, pa.float32()),
        }),
    )  # fmt: skip
    tracked, _ = read_tracked(power.state, "only_second", vgroup_of[second], 1, 10**9)
    (block,) = tracked
    assert block.block.data.column("voltage").to_pylist() == [2, 3]
    version = block.versions[0].as_py()
    assert block.ids() == [(version, 2), (version, 3)]  # after the first table's two rows


def test_a_parameterized_topic_is_refused(power: Engine) -> None:
    power.execute("CREATE TOPIC p AS SELECT ts, voltage FROM meters WHERE tbname = ?")
    vgroup = vgroups_of(power, "power")[0]
    with pytest.raises(ConfigError, match="not offered to shared groups"):
        read_tracked(power.state, 'p?{"tbname":"a"}', vgroup, 1, 10)
