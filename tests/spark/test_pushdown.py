"""Filter pushdown of the `sqltopic_wal` source: which filters it takes, and that a read
with them pushed delivers exactly what Spark's own filtering of a full read does."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from sqltopic.spark_jobs.pushdown import Pushed
from tests.spark.conftest import HistoryFactory

V, G = ("_version",), ("_vgroup",)

# filters -> (low, high, vgroups of 1..4 kept, the filters left to Spark by position)
CASES: list[tuple[list[Filter], int, int | None, list[int], list[int]]] = [
    ([], 0, None, [1, 2, 3, 4], []),
    ([GreaterThan(V, 4), LessThan(V, 9)], 5, 9, [1, 2, 3, 4], []),
    ([GreaterThanOrEqual(V, 4), LessThanOrEqual(V, 9), LessThan(V, 7)], 4, 7, [1, 2, 3, 4], []),
    ([EqualTo(V, 6)], 6, 7, [1, 2, 3, 4], []),
    ([EqualTo(G, 2)], 0, None, [2], []),
    ([In(G, (1, 3)), GreaterThan(G, 1)], 0, None, [3], []),
    ([LessThanOrEqual(G, 2), GreaterThanOrEqual(G, 2)], 0, None, [2], []),
    ([In(V, (1, 2)), Not(EqualTo(G, 1)), IsNotNull(V)], 0, None, [1, 2, 3, 4], [0, 1, 2]),
    ([EqualTo(("ts",), 5), GreaterThan(V, 2.5), EqualTo(V, True)], 0, None, [1, 2, 3, 4],
     [0, 1, 2]),
    ([In(G, (1, "2"))], 0, None, [1, 2, 3, 4], [0]),
]  # fmt: skip


@pytest.mark.parametrize(("filters", "low", "high", "kept", "left"), CASES)
def test_filters_taken_and_left(
    filters: list[Filter], low: int, high: int | None, kept: list[int], left: list[int]
) -> None:
    pushed = Pushed()
    remaining = [f for f in filters if not pushed.take(f)]
    assert (pushed.low, pushed.high) == (low, high)
    assert [v for v in (1, 2, 3, 4) if pushed.keeps_vgroup(v)] == kept
    assert remaining == [filters[i] for i in left]


METERS = """
CREATE DATABASE power VGROUPS 3 WAL_SEGMENT_SIZE 1; USE power;
CREATE STABLE meters (ts TIMESTAMP, voltage INT) TAGS (n INT);
"""


def test_a_pushed_read_equals_spark_filtering_a_full_one(
    spark: SparkSession, make_history: HistoryFactory
) -> None:
    engine = make_history(METERS)
    for i in range(40):
        engine.execute("INSERT INTO " + " ".join(
            f"d{t} USING meters TAGS ({t}) VALUES ({1_700_000_000_000 + i}, {i})"
            for t in range(6)
        ))  # fmt: skip

    def read(pushdown: bool) -> DataFrame:
        return (
            spark.read.format("sqltopic_wal").option("path", str(engine.state.data_dir))
            .option("database", "power").option("table", "meters")
            .option("pieceBytes", "2000").option("pushdown", str(pushdown).lower()).load()
        )  # fmt: skip

    where = "_version >= 20 AND _version < 60 AND _vgroup IN (1, 3) AND voltage % 2 = 0"
    pushed, plain = read(True).where(where), read(False).where(where)
    rows = sorted(tuple(r) for r in plain.collect())
    assert rows
    assert sorted(tuple(r) for r in pushed.collect()) == rows
    assert {r._vgroup for r in pushed.collect()} <= {1, 3}
    assert pushed.rdd.getNumPartitions() < plain.rdd.getNumPartitions()
    nothing = read(True).where("_version > 1000000")
    assert nothing.count() == 0
