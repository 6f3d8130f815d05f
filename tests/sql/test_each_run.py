"""`each_run`: one evaluation of a topic's SQL over several runs (one table's rows each)
answers, run by run, what the topic's evaluation of each run alone answers: the same
rows in the same order and types, on generated data and conditions; None wherever
pyarrow cannot be exact over the runs together, so that the caller evaluates each."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqltopic.sql.model import Table
from sqltopic.sql.topic import evaluate
from sqltopic.sql.topic.evaluate import RUN_COLUMN, QueryShape, each_run, small_evaluation
from tests.sql.test_arrow_eval import BATCH, COLUMNS, TAG, _same, conditions, tables

OUT = ("i32", "f64", "s", TAG)
SELECT = "SELECT " + ", ".join(f'"{c}" AS "{c}"' for c in OUT) + f" FROM {BATCH}"


def _shape(schema: pa.Schema, tbname: bool = False) -> QueryShape:
    out = pa.schema([pa.field(c, schema.field(c).type) for c in OUT])
    return QueryShape(data=schema, tags=(), precision="ms", tbname=tbname, out=out)


def _runs(table: pa.Table, lengths: list[int]) -> tuple[list[Table], list[pa.RecordBatch]]:
    owners, batches, start = [], [], 0
    for i, n in enumerate(lengths):
        part = table.slice(start, n)
        columns = [column.combine_chunks() for column in part.columns]
        batches.append(pa.RecordBatch.from_arrays(columns, schema=table.schema))
        owners.append(Table("db", f"t{i}", 1, 0, stable="st"))
        start += n
    return owners, batches


def _alone(shape: QueryShape, sql: str, owner: Table, batch: pa.RecordBatch) -> Any:
    return small_evaluation(sql, shape.batch([owner], [batch]))


@st.composite
def splits(draw: st.DrawFn) -> tuple[pa.Table, list[int]]:
    table = draw(tables())
    lengths: list[int] = []
    left = table.num_rows
    while left:
        n = draw(st.integers(1, left))
        lengths.append(n)
        left -= n
    return table, lengths or [0]


@given(split=splits(), where=st.none() | conditions())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_each_runs_rows_are_what_its_evaluation_alone_answers(
    split: tuple[pa.Table, list[int]], where: str | None
) -> None:
    table, lengths = split
    shape = _shape(table.schema)
    sql = SELECT if where is None else f"{SELECT} WHERE {where}"
    owners, batches = _runs(table, lengths)
    slices = each_run(shape, sql, owners, batches, shape.out)
    if slices is None:  # pyarrow cannot be exact over them together: nor over all of them
        assert small_evaluation(sql, shape.batch(owners, batches)) is None
        return
    assert len(slices) == len(batches)
    for owner, batch, rows in zip(owners, batches, slices, strict=True):
        alone = _alone(shape, sql, owner, batch)
        if alone is None:  # this run alone goes to DuckDB: its rows are still pyarrow's
            continue
        assert rows.schema == shape.out
        assert _same(rows.to_pylist(), alone.cast(shape.out).to_pylist()), (where, lengths)


def test_the_runs_tbname_and_tags_are_each_runs_own() -> None:
    """Context columns (a constant per run) decide rows run by run."""
    data = pa.schema([("v", pa.int32())])
    owners = [Table("db", name, 1, 0, stable="st") for name in ("a", "b", "a", "c")]
    batches = [pa.RecordBatch.from_pydict({"v": [k, k + 1]}, schema=data) for k in (1, 3, 5, 7)]
    out = pa.schema([("v", pa.int32()), ("tbname", pa.string())])
    shape = QueryShape(data=data, tags=(), precision="ms", tbname=True, out=out)
    sql = (
        f'SELECT "v" AS "v", "tbname" AS "tbname" FROM {BATCH} WHERE "tbname" <> \'b\' AND "v" > 1'
    )
    slices = each_run(shape, sql, owners, batches, out)
    assert slices is not None
    assert [s.to_pylist() for s in slices] == [
        [{"v": 2, "tbname": "a"}],
        [],
        [{"v": 5, "tbname": "a"}, {"v": 6, "tbname": "a"}],
        [{"v": 7, "tbname": "c"}, {"v": 8, "tbname": "c"}],
    ]


def test_nan_in_a_compared_column_leaves_the_runs_to_their_own_evaluations() -> None:
    data = pa.schema([("f", pa.float64())])
    owners = [Table("db", "a", 1, 0, stable="st"), Table("db", "b", 1, 0, stable="st")]
    batches = [pa.RecordBatch.from_pydict({"f": v}, schema=data) for v in ([1.0], [float("nan")])]
    shape = QueryShape(data=data, tags=(), precision="ms", tbname=False, out=data)
    sql = f'SELECT "f" AS "f" FROM {BATCH} WHERE "f" > 0.5'
    assert each_run(shape, sql, owners, batches) is None


def test_runs_over_the_pyarrow_limit_or_sql_it_cannot_run_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = pa.schema([("v", pa.int32())])
    owners = [Table("db", "a", 1, 0, stable="st")] * 2
    batches = [pa.RecordBatch.from_pydict({"v": [1, 2, 3]}, schema=data)] * 2
    shape = QueryShape(data=data, tags=(), precision="ms", tbname=False, out=data)
    sql = f'SELECT "v" AS "v" FROM {BATCH}'
    assert each_run(shape, sql, owners, batches) is not None
    monkeypatch.setattr(evaluate, "ARROW_EVAL_MAX_ROWS", 5)
    assert each_run(shape, sql, owners, batches) is None
    monkeypatch.undo()
    ordered = f'SELECT "v" AS "v" FROM {BATCH} ORDER BY "v"'
    assert each_run(shape, ordered, owners, batches) is None


def test_a_column_named_as_the_run_numbers_leaves_the_runs_alone() -> None:
    """The run numbers' column cannot be a topic's (no identifier holds NUL); if a
    batch had one anyway, the runs are evaluated each on their own."""
    data = pa.schema([("v", pa.int32()), (RUN_COLUMN, pa.int32())])
    owners = [Table("db", "a", 1, 0, stable="st")]
    batches = [pa.RecordBatch.from_pydict({"v": [1], RUN_COLUMN: [9]}, schema=data)]
    shape = QueryShape(data=data, tags=(), precision="ms", tbname=False, out=data)
    sql = f'SELECT "v" AS "v" FROM {BATCH} WHERE "v" > 0'
    assert each_run(shape, sql, owners, batches) is None


def test_the_columns_of_the_generated_tables_are_the_outputs_known() -> None:
    assert set(OUT) <= {*COLUMNS, TAG}
