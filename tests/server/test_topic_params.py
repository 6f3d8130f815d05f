"""Parameterized topics in the engine: CREATE TOPIC with `?` (SHOW TOPICS and
information_schema show it as written, a restart keeps its parameters, a misplaced `?`
is refused and creates nothing), the partition of a real WAL read equal to the topics
with each binding's values written as literals, and the Spark backfill's refusal."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from sqltopic.errors import BackfillUnsupported, ConfigError, InvalidTopicQuery
from sqltopic.server.core import bindings, topic_reader
from sqltopic.server.core.batches import data_entries
from sqltopic.server.core.engine import Engine
from sqltopic.spark_jobs.backfill import prepare
from sqltopic.sql import layout
from sqltopic.sql.entries import conform
from sqltopic.sql.layout import data_schema
from sqltopic.sql.model import Topic
from sqltopic.sql.topic import partition
from sqltopic.sql.topic.arrow_eval import arrow_plan
from sqltopic.sql.topic.context import with_context
from sqltopic.sql.topic.duck import query
from sqltopic.sql.topic.params import Binding, bind, subscription_name
from sqltopic.sql.topic.partition import Partitioner
from tests.server.support import EngineFactory, block_rows, norm_rows, read_all, vgroups_of

PARAMETERIZED = (
    "CREATE TOPIC tp AS SELECT ts, current, voltage, location FROM meters "
    "WHERE tbname IN (?) AND location = ? AND voltage > 1"
)
# Children (name, location, groupid): d4 has no location, so no binding matches it.
CHILDREN = [("d1", "'x'", 1), ("d2", "'x'", 2), ("d3", "'y'", 1), ("d4", "NULL", 2)]
BINDINGS: list[dict[str, Any]] = [
    {"tbname": ["d1"], "location": "x"},
    {"tbname": ["D1", "d2", "d3"], "location": "x"},  # d3 is in y: only d1 and d2
    {"tbname": ["d3", "d4"], "location": "y"},
    {"tbname": ["d4"], "location": "x"},  # nothing
    {"tbname": ["d1"], "location": "x"},  # the same as the first
]


@pytest.fixture
def written(power: Engine) -> Engine:
    """`power` with four children, 40 rows (NULL voltages among them) and topic tp."""
    for name, location, group in CHILDREN:
        power.execute(f"CREATE TABLE {name} USING meters TAGS ({location}, {group})")
    values: dict[str, list[str]] = {name: [] for name, _, _ in CHILDREN}
    for k in range(40):
        name = CHILDREN[k % 4][0]
        voltage = "NULL" if k % 7 == 0 else str(k % 5)
        values[name].append(f"({1_000 + k}, {k / 4}, {voltage}, 0.5)")
    for name, rows in values.items():
        power.execute(f"INSERT INTO {name} VALUES " + " ".join(rows[:5]))
        power.execute(f"INSERT INTO {name} VALUES " + " ".join(rows[5:]))
    power.execute(PARAMETERIZED)
    return power


def test_the_topic_is_shown_as_written_and_keeps_its_parameters(
    written: Engine, make_engine: EngineFactory
) -> None:
    shown = {r[0]: r[3] for r in written.execute("SHOW TOPICS").rows}
    assert shown["tp"] == PARAMETERIZED
    info = written.execute("SELECT topic_name, sql FROM information_schema.ins_topics").rows
    assert info == [("tp", PARAMETERIZED)]
    before = written.state.catalog.topic("tp")
    assert [(p.name, p.kind, p.op) for p in before.params] == [
        ("tbname", "tbname", "in"),
        ("location", "tag", "="),
    ]
    again = make_engine.reopen(written)
    assert again.state.catalog.topic("tp") == before


@pytest.mark.parametrize(
    ("sql", "part"),
    [
        ("CREATE TOPIC bad AS SELECT ts FROM meters WHERE current > ?", "only = and IN"),
        ("CREATE TOPIC bad AS STABLE meters WHERE groupid = ?", "only in a query topic"),
        ("CREATE TOPIC bad AS SELECT ts, ? FROM meters", "in the SELECT list"),
    ],
)
def test_a_misplaced_parameter_creates_nothing(power: Engine, sql: str, part: str) -> None:
    with pytest.raises(InvalidTopicQuery) as info:
        power.execute(sql)
    assert part in info.value.message
    assert (info.value.line, info.value.column) == (1, sql.index("?") + 1)
    assert power.execute("SHOW TOPICS").rows == []


def _batch(engine: Engine, topic: Topic, vgroup: int) -> pa.Table:
    """Every data entry of the topic's tables in `vgroup` as one batch, built as the
    vnode builds it (server/core/topic_reader.py): current columns, the tags the topic uses
    and tbname added as constants per entry."""
    catalog = engine.state.catalog
    precision = catalog.database(topic.db).precision
    stb = catalog.stable(topic.db, topic.target or "")
    schema = data_schema(stb.columns, precision)
    entries = [
        (catalog.table(topic.db, e.table.name), e.batch)
        for e in data_entries(engine.state.vnode(vgroup).reader())
    ]
    data = pa.Table.from_batches([conform(b, schema) for _, b in entries], schema=schema)
    tags = [t for t in stb.tags if t.name in topic.uses]
    owners, lengths = [t for t, _ in entries], [b.num_rows for _, b in entries]
    return with_context(data, owners, lengths, tags, precision, tbname=True)


def test_a_read_splits_among_bindings_as_literal_topics_read(written: Engine) -> None:
    topic = written.state.catalog.topic("tp")
    bindings = [bind(topic, params) for params in BINDINGS]
    for i, binding in enumerate(bindings):
        written.execute(_literal_topic(f"lit{i}", binding))
    partitioner = Partitioner(topic, bindings)
    delivered = dict.fromkeys(range(len(bindings)), 0)
    plan = arrow_plan(topic.select_sql)
    assert plan is not None
    for vgroup in vgroups_of(written, "power"):
        batch = _batch(written, topic, vgroup)
        by_duckdb = query(written.state.duck.get(), topic.select_sql, layout.BATCH, batch)
        by_arrow = plan.run(batch)
        assert by_arrow is not None
        for result in (by_duckdb, by_arrow):
            got = partitioner.split(result)
            for i in range(len(bindings)):
                want = block_rows(read_all(written, f"lit{i}", vgroup, max_rows=1_000))
                rows = got[i].to_pylist() if i in got else []
                assert norm_rows(tuple(r.values()) for r in rows) == norm_rows(want), (i, vgroup)
                delivered[i] += len(rows)
    # each binding got rows except the one matching nothing; equal bindings equal rows
    assert delivered[3] == 0
    assert delivered[0] == delivered[4] > 0
    assert delivered[1] > delivered[0]
    assert delivered[2] > 0


@pytest.mark.parametrize("runs", [True, False], ids=["by-runs", "vectorised"])
def test_the_split_by_runs_equals_the_vectorised_one(
    written: Engine, monkeypatch: pytest.MonkeyPatch, runs: bool
) -> None:
    """A result whose tags and tbname are constants per chunk (a vnode's) is split chunk
    by chunk into slices; the vectorised split, which takes every other result, gives
    the same rows to the same bindings. Past its bounds the split falls back to it."""
    topic = written.state.catalog.topic("tp")
    bindings = [bind(topic, params) for params in BINDINGS]
    partitioner = Partitioner(topic, bindings)
    plan = arrow_plan(topic.select_sql)
    assert plan is not None
    checked = 0
    for vgroup in vgroups_of(written, "power"):
        result = plan.run(_batch(written, topic, vgroup))
        assert result is not None
        if result.num_rows == 0:
            continue
        checked += 1
        assert partitioner._by_runs(result) is not None  # a vnode's result: by runs
        if not runs:
            monkeypatch.setattr(partition, "RUN_CHUNKS_MAX", 0)
            assert partitioner._by_runs(result) is None
        want = {i: Partitioner(topic, [b]).split(result).get(0) for i, b in enumerate(bindings)}
        got = partitioner.split(result)
        assert set(got) == {i for i, rows in want.items() if rows is not None}
        for i, rows in got.items():
            assert rows.to_pylist() == want[i].to_pylist()  # type: ignore[union-attr]
        monkeypatch.undo()
        plain = result.cast(pa.schema([f.with_type(pa.string()) if f.name.startswith("__")
                                       else f for f in result.schema]))  # fmt: skip
        assert partitioner._by_runs(plain) is None  # not dictionaries: vectorised
    assert checked >= 2


def test_the_split_by_runs_gives_way_past_its_candidates(
    written: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = written.state.catalog.topic("tp")
    partitioner = Partitioner(topic, [bind(topic, params) for params in BINDINGS])
    plan = arrow_plan(topic.select_sql)
    assert plan is not None
    results = [plan.run(_batch(written, topic, v)) for v in vgroups_of(written, "power")]
    result = next(r for r in results if r is not None and partitioner.split(r))
    whole = partitioner.split(result)
    monkeypatch.setattr(partition, "RUN_CANDIDATES_MAX", 0)
    assert partitioner._by_runs(result) is None
    again = partitioner.split(result)
    assert {i: t.to_pylist() for i, t in again.items()} == {
        i: t.to_pylist() for i, t in whole.items()
    }


def _results_and_own_splits(
    engine: Engine, topic: Topic, names: list[str], schema: pa.Schema
) -> list[tuple[pa.Table, dict[str, pa.Table]]]:
    """Per vgroup: the topic's shared result, and each name's rows split by its own
    binding's partitioner (names without rows left out): what a BindingSet must answer."""
    out = []
    for vgroup in vgroups_of(engine, "power"):
        plan = arrow_plan(topic.select_sql)
        assert plan is not None
        result = plan.run(_batch(engine, topic, vgroup))
        assert result is not None
        each = {n: Partitioner(topic, [Binding.from_key(topic, n.partition("?")[2])], schema)
                .split(result) for n in names}  # fmt: skip
        out.append((result, {n: parts[0] for n, parts in each.items() if 0 in parts}))
    return out


def test_a_binding_set_splits_for_the_subscriptions_asked_as_each_bindings_own_partitioner(
    written: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared pass asks a topic's BindingSet for the subscriptions waiting there: it
    answers exactly those with rows, whether its partitioner covers them, they are new
    to it, or it covers them only after a quiet rebuild."""
    monkeypatch.setattr(bindings, "QUIET_SPLITS", 3)
    topic = written.state.catalog.topic("tp")
    many = [{"tbname": [f"d{n % 4 + 1}", f"D{n // 4 % 6 + 1}"], "location": "xy"[n % 2]}
            for n in range(48)]  # fmt: skip
    keys = list(dict.fromkeys(bind(topic, p).key for p in BINDINGS + many))
    names = [subscription_name("tp", k) for k in keys]
    assert len(keys) > bindings.REBUILD_MIN  # the second round builds its partitioner
    schema = topic_reader._binding_set(written.state, topic).schema
    # new names, then covered ones, then two new ones left alone until the quiet rebuild
    extra = [subscription_name("tp", bind(topic, {"tbname": ["d2"], "location": loc}).key)
             for loc in ("x", "y")]  # fmt: skip
    assert set(extra) - set(names)
    split_rounds = [set(names[::2]), set(names), set(names[1::3])]
    split_rounds += [set(names[::5]) | set(extra)] * 5
    for result, each in _results_and_own_splits(written, topic, names + extra, schema):
        for asked in split_rounds:
            got = topic_reader._binding_set(written.state, topic).split(result, asked)
            want = {n: part for n, part in each.items() if n in asked}
            assert set(got) == set(want)
            assert all(got[n].equals(want[n]) for n in want)
    found = topic_reader._binding_set(written.state, topic)
    assert found._partitioner is not None
    assert found._partitioner.count == len({*names, *extra})
    assert not found._alone  # the two late ones were covered once no binding was new


def test_a_binding_set_looks_at_each_version_of_the_waiting_subscriptions_once(
    written: Engine,
) -> None:
    """A pass hands the subscriptions waiting with their version: the set registers a
    version's bindings once, looks again after a name is added (a new version) and
    after it started over (MAX_BINDINGS), never trusting a version from before that."""
    topic = written.state.catalog.topic("tp")
    found = topic_reader._binding_set(written.state, topic)
    names = [subscription_name("tp", bind(topic, p).key) for p in BINDINGS[:4]]
    empty = pa.table({"ts": pa.array([], pa.int64())})
    assert topic_reader.Subscriptions().version is None  # nothing noted: always looked at
    subs = topic_reader.Subscriptions()
    for name in names[:2]:
        subs[name] = None
        subs.added()
    first = subs.version
    found.split(empty, subs.keys(), first)
    assert set(names[:2]) <= found.bindings.keys()
    subs[names[2]] = None  # added without a new version: this version was looked at
    found.split(empty, subs.keys(), first)
    assert names[2] not in set(found.bindings)
    subs.added()
    assert subs.version != first
    found.split(empty, subs.keys(), subs.version)
    assert names[2] in set(found.bindings)
    found._reset()
    found.split(empty, subs.keys(), subs.version)  # registered before the reset: again
    assert set(names[:3]) == found.bindings.keys()
    other = topic_reader.waiting_of(names)["tp"]  # versions are unique across sets
    assert other.version not in (first, subs.version)


def test_a_split_that_starts_the_set_over_still_answers_every_subscription_asked(
    written: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registering the subscriptions asked may reach MAX_BINDINGS midway, and the set
    starts over without those registered first: each still gets its rows."""
    topic = written.state.catalog.topic("tp")
    keys = list(dict.fromkeys(bind(topic, p).key for p in BINDINGS))
    names = [subscription_name("tp", k) for k in keys]
    assert len(names) >= 4
    monkeypatch.setattr(bindings, "MAX_BINDINGS", len(names) - 2)
    found = topic_reader._binding_set(written.state, topic)
    schema = found.schema
    answered = 0
    for result, want in _results_and_own_splits(written, topic, names, schema):
        answered += len(want)
        for _ in range(2):  # the set full already the second time
            got = found.split(result, set(names))
            assert set(got) == set(want)
            assert all(got[n].equals(want[n]) for n in want)
    assert answered >= 2  # subscriptions with rows were asked for


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("tp", r"binding key '' of topic 'tp' is not a JSON object of parameter values"),
        ('tp?{"tbname":"d1"', r"binding key '\{\"tbname\":\"d1\"' of topic 'tp' is not a JSON"),
        ('tp?{"nope":1}', r"topic 'tp' has no parameter 'nope': its parameters are tbname"),
        ('tp?{"location":"x","tbname":["d1"]} ', r"is not canonical; its binding's key is"),
    ],
)
def test_a_binding_set_refuses_a_subscription_without_a_valid_binding(
    written: Engine, name: str, error: str
) -> None:
    """A subscription the shared pass cannot bind fails the pass (each poll then reads
    for itself and answers its own error) and is not kept."""
    topic = written.state.catalog.topic("tp")
    found = topic_reader._binding_set(written.state, topic)
    with pytest.raises(ConfigError, match=error):
        found.split(pa.table({"ts": pa.array([], pa.int64())}), {name})
    assert name not in found.bindings


def _literal_topic(name: str, binding: Binding) -> str:
    params = binding.as_params()
    tables = ", ".join(f"'{t}'" for t in params["tbname"])
    return (
        f"CREATE TOPIC {name} AS SELECT ts, current, voltage, location FROM meters "
        f"WHERE tbname IN ({tables}) AND location = '{params['location']}' AND voltage > 1"
    )


def test_the_backfill_refuses_a_parameterized_topic(written: Engine) -> None:
    with pytest.raises(BackfillUnsupported, match=r"topic 'tp' has parameters \(tbname, loc"):
        prepare(written.state.data_dir, "tp")
