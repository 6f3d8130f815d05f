"""topic_tables: the tables each topic delivers, its conditions evaluated for every topic of
a super table in a few queries, exactly as one topic alone; a failing condition fails its
own topic only."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqltopic.errors import Error, SqlError
from sqltopic.server.core import topic_tables as tt
from sqltopic.server.core.engine import Engine
from tests.server.support import vgroups_of


def test_conditions_of_many_topics_keep_what_each_keeps_alone(
    power: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    power.execute(
        "CREATE TABLE "
        + " ".join(f"d{i} USING meters TAGS ('site{i % 5}', {i})" for i in range(40))
    )
    conditions = {}
    for k in range(30):
        if k % 3 == 0:
            body = f"SELECT ts, voltage FROM meters WHERE tbname IN ('d{k}', 'd{k + 1}')"
        elif k % 3 == 1:
            body = f"SELECT * FROM meters WHERE location = 'site{k % 5}' AND voltage > {k}"
        else:
            body = f"STABLE meters WHERE groupid BETWEEN {k} AND {k + 4}"
        power.execute(f"CREATE TOPIC t{k} AS {body}")
        conditions[f"t{k}"] = body
    monkeypatch.setattr(tt, "CONDITIONS_PER_QUERY", 7)  # several queries of a few topics
    together = _tables_by_topic(power)
    monkeypatch.setattr(tt, "CONDITIONS_PER_QUERY", 1)  # one topic a query
    power.execute("CREATE TABLE later USING meters TAGS ('site1', 100)")  # a catalog change
    power.execute("DROP TABLE later")
    alone = _tables_by_topic(power)
    assert together == alone
    assert together["t0"] == {"d0", "d1"}
    assert together["t1"] == {f"d{i}" for i in range(40) if i % 5 == 1}
    assert together["t2"] == {f"d{i}" for i in range(2, 7)}


def test_a_failing_condition_fails_its_topic_only() -> None:
    # the compiler refuses conditions that can fail; DuckDB's error() stands in for one
    con = duckdb.connect()
    tags = pa.table({"tbname": ["a", "b"], "groupid": [1, 2]})
    conditions = ["groupid = 2", "error('boom') IS NULL", "tbname = 'a'"]
    kept = tt._evaluate(con, tags, ["good", "bad", "other"], conditions)
    assert kept["good"] == frozenset({"b"})
    assert kept["other"] == frozenset({"a"})
    failed = kept["bad"]
    assert isinstance(failed, SqlError)
    assert "the tag condition of topic 'bad' failed" in str(failed)
    assert "boom" in str(failed)


def _tables_by_topic(power: Engine) -> dict[str, set[str]]:
    state = power.state
    found: dict[str, set[str]] = {}
    for topic in state.catalog.topics.values():
        for vgroup in vgroups_of(power, "power"):
            found.setdefault(topic.name, set()).update(tt.topic_tables(state, topic, vgroup))
    return found


# A catalog change, as SQL over the power fixture's meters (tags location, groupid).
CHANGES = [
    "CREATE TABLE c{n} USING meters TAGS ('site{m}', {n})",
    "CREATE TABLE IF NOT EXISTS c{m} USING meters TAGS ('site{n}', {m})",
    "DROP TABLE IF EXISTS c{m}",
    "ALTER TABLE c{m} SET TAG groupid = {n}",
    "ALTER TABLE c{m} SET TAG location = 'site{n}'",
    "CREATE TOPIC IF NOT EXISTS q{m} AS SELECT ts FROM meters WHERE groupid > {n} AND voltage > 1",
    "CREATE TOPIC IF NOT EXISTS s{m} AS STABLE meters WHERE location = 'site{n}'",
    "CREATE TOPIC IF NOT EXISTS i{m} AS SELECT * FROM meters WHERE tbname IN ('c{n}', 'c{m}')",
    "DROP TOPIC IF EXISTS q{m}",
    "DROP TOPIC IF EXISTS s{m}",
    "CREATE TABLE other{n} USING meters TAGS (NULL, NULL)",
]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 6), st.integers(0, 6)),
                min_size=1, max_size=25))  # fmt: skip
def test_after_every_catalog_change_the_kept_tables_equal_a_whole_evaluation(
    power: Engine, changes: list[tuple[str, int, int]]
) -> None:
    """The kept tables of conditions seen before are evaluated only over the children a
    change added (topic_tables._kept_over): after any sequence of changes, exactly what
    evaluating every condition over every child gives."""
    state = power.state
    for sql, n, m in changes:
        try:
            power.execute(sql.format(n=n + 10 * len(state.catalog.tables), m=m))
        except Error:
            continue  # a refused change (a table or topic that is not there) is no change
        kept = tt._kept(state, "power", "meters")
        assert kept == tt._kept_over(state, "power", "meters", None).kept
    for name in [*state.catalog.topics]:
        power.execute(f"DROP TOPIC {name}")
    for name in [t.name for t in state.catalog.children("power", "meters")]:
        power.execute(f"DROP TABLE {name}")
