"""Differential tests of topic reads: what `read_topic` delivers from version 0, over every
vgroup, equals DuckDB running the same SELECT over the same rows loaded directly.

The dataset (tests/server/dataset.py) is written once per module through every write
path into four vgroups. The reference is DuckDB over a plain table of the rows with their
tags, `tbname`, WAL order (`__seq`) and vgroup; each case gives the topic's SELECT and its
minimal DuckDB translation (TDengine's LOG, LENGTH, CHAR_LENGTH, CONCAT; TRY where the
topic turns a failing expression into NULL). Rows must match as multisets, and within
each vgroup in WAL order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from sqltopic.server.core import topic_reader
from sqltopic.server.core.topic_reader import TopicBlock
from tests.server.dataset import (
    DATA_COLUMNS,
    DATA_NAMES,
    DB,
    NORMAL,
    NORMAL_NAMES,
    TAG_NAMES,
    Loaded,
)
from tests.server.support import (
    block_rows,
    blocks,
    metas,
    norm_rows,
    read_all,
    read_vgroups,
    rows,
    tabled_rows,
    vgroups_of,
)


def test_dataset_spreads_over_every_vgroup(loaded: Loaded) -> None:
    used = set(loaded.data.vgroup_of.values())
    assert used == set(vgroups_of(loaded.engine, DB))


# --- query topics ---------------------------------------------------------------------

_ALL = ", ".join(DATA_NAMES)


@dataclass(frozen=True)
class Case:
    id: str
    select: str  # the topic's SELECT list
    where: str | None = None
    table: str = "meters"
    ref_select: str | None = None  # DuckDB's form of the SELECT list, if it differs
    ref_where: str | None = None


CASES = [
    Case("star", "*", ref_select=", ".join([*DATA_NAMES, *TAG_NAMES])),
    Case("every_type", f"{_ALL}, tbname, location, groupid, region"),
    Case("numeric_filter", "ts, i, f, d", "i > 0 AND f < 50.5 OR d BETWEEN -10 AND 10"),
    Case("bool_unsigned", "ts, b, uti, ubi", "b = true AND uti > 100 OR ubi > 1000000"),
    Case("small_ints", "ts, ti, si, usi", "ti < 0 OR usi >= 60000 OR si = 32767"),
    Case("strings", "ts, vc, bn, nc", "nc = '北京' OR bn LIKE 'b%' OR vc = 'it''s'"),
    Case("nulls", "ts, vc, nc, i", "vc IS NULL OR (nc IS NOT NULL AND i IS NULL)"),
    Case(
        "timestamps",
        "ts, i",
        "ts > '2018-10-03 06:38:30.000' AND ts <= 1538548735000",
        ref_where="ts > TIMESTAMP '2018-10-03 06:38:30' AND ts <= epoch_ms(1538548735000)",
    ),
    Case(
        "arithmetic",
        "ts, i + ti AS s1, bi - si AS s2, d * 2 AS s3, f / 2 AS s4, ui + 1 AS s5, "
        "ubi + uti AS s6, i % 7 AS s7, -si AS s8, i * 1000 AS s9, d * 1.5 AS s10, "
        "(i + 1) * (ti - 2) AS s11, usi - 1 AS s12",
        ref_select="ts, TRY(i + ti) AS s1, TRY(bi - si) AS s2, TRY(d * 2) AS s3, "
        "TRY(f / 2) AS s4, TRY(ui + 1) AS s5, TRY(ubi + uti) AS s6, TRY(i % 7) AS s7, "
        "TRY(-si) AS s8, TRY(i * 1000) AS s9, TRY(d * 1.5::DOUBLE) AS s10, "
        "TRY((i + 1) * (ti - 2)) AS s11, TRY(usi - 1) AS s12",
    ),
    Case(
        "arithmetic_filter",
        "ts, i, ti",
        "i * 2 + ti > 100 AND ti <> 0",
        ref_where="TRY(i * 2 + ti > 100 AND ti <> 0)",
    ),
    Case(
        "math_functions",
        "ts, abs(i) AS a1, abs(f) AS a2, round(d) AS r1, round(f) AS r2, sqrt(abs(d)) AS q, "
        "log(abs(d) + 1) AS lg, log(abs(f) + 1, 2) AS lg2",
        ref_select="ts, TRY(abs(i)) AS a1, TRY(abs(f)) AS a2, TRY(round(d)) AS r1, "
        "TRY(round(f)) AS r2, TRY(sqrt(abs(d))) AS q, TRY(ln(abs(d) + 1)) AS lg, "
        "TRY(log(2, abs(f) + 1)) AS lg2",
    ),
    Case(
        "string_functions",
        "ts, lower(vc) AS lo, upper(nc) AS up, concat(vc, bn) AS cc, "
        "concat(vc, '-', nc) AS cc3, length(nc) AS lb, char_length(nc) AS lc, "
        "length(vc) AS lv, char_length(bn) AS lbn",
        ref_select="ts, lower(vc) AS lo, upper(nc) AS up, vc || bn AS cc, "
        # LENGTH of an NCHAR: 4 bytes a character (UCS-4), of a VARCHAR its UTF-8 bytes
        "vc || '-' || nc AS cc3, 4 * length(nc) AS lb, length(nc) AS lc, strlen(vc) AS lv, "
        "length(bn) AS lbn",
    ),
    Case(
        "string_function_filter",
        "ts, nc",
        "char_length(nc) = 2 AND length(nc) = 8",
        ref_where="length(nc) = 2",
    ),
    Case(
        "case",
        "ts, CASE WHEN i > 100 THEN 'big' WHEN i IS NULL THEN 'none' ELSE 'small' END AS sz, "
        "CASE WHEN b THEN 1 ELSE 0 END AS bb, "
        "CASE groupid WHEN 2 THEN location ELSE tbname END AS who, "
        "coalesce(vc, nc, 'none') AS c",
    ),
    Case(
        "tags_filter", "ts, tbname, location, groupid, region, i", "groupid = 2 OR location = 'SF'"
    ),
    Case(
        "tbname_filter",
        "tbname, ts, f",
        "tbname IN ('d1', 'd6', 'd9') AND region IS NOT NULL",
    ),
    Case("string_vs_number", "ts, vc", "vc > 5", ref_where="TRY_CAST(vc AS DOUBLE) > 5"),
    Case(
        "null_functions",
        "ts, coalesce(i, -1) AS c1, nullif(ti, 0) AS nz, ifnull(nc, 'x') AS ifn, i + NULL AS n1",
        ref_select="ts, coalesce(i, -1) AS c1, nullif(ti, 0) AS nz, ifnull(nc, 'x') AS ifn, "
        "TRY(i + NULL) AS n1",
    ),
    Case(
        "casts",
        "ts, CAST(i AS BIGINT) AS ci, CAST(f AS DOUBLE) AS cd, CAST(ti AS VARCHAR(8)) AS cs, "
        "CAST(uti AS BINARY(4)) AS cb",
        ref_select="ts, TRY(CAST(i AS BIGINT)) AS ci, TRY(CAST(f AS DOUBLE)) AS cd, "
        "TRY(CAST(ti AS VARCHAR)) AS cs, TRY(CAST(uti AS VARCHAR)) AS cb",
    ),
    Case(
        "tdengine_functions",  # docs/sql.md §9.1.1; the meanings: tests/sql/test_functions_*
        "ts, greatest(i, ti) AS g, least(d, f) AS l, substring(vc, -2, 1) AS s, "
        "timetruncate(ts, 1s) AS tt, timediff(ts, 1538548685000, 1s) AS df, "
        "to_iso8601(ts) AS iso",
        "ts < now AND ts > now - 36500d AND ascii(nc) > 0",
        ref_select="ts, "
        "CASE WHEN i IS NULL OR ti IS NULL THEN NULL ELSE greatest(i, ti) END AS g, "
        "CASE WHEN d IS NULL OR f IS NULL THEN NULL ELSE least(d, f) END AS l, "
        "substring(vc, greatest(length(vc) - 2, 0) + 1, 1) AS s, "
        "epoch_ms(epoch_ms(ts) // 1000 * 1000) AS tt, "
        "(epoch_ms(ts) - 1538548685000) // 1000 AS df, "
        "strftime(ts, '%Y-%m-%dT%H:%M:%S.%g') || '+0000' AS iso",
        ref_where="ts < now() AND ts > now() - INTERVAL 36500 DAY AND ascii(nc) > 0",
    ),
    Case("child_star", "*", table="d1", ref_select=_ALL),
    Case("child_tags", "ts, i, location, tbname, region", "i IS NOT NULL", table="d0"),
    Case("child_filter", "ts, d, vc", "d > 0", table="d3"),
    Case("normal_star", "*", table=NORMAL, ref_select=", ".join(NORMAL_NAMES)),
    Case(
        "normal_expressions",
        "ts, c1 * 2 AS c, upper(c3) AS u, c2",
        "c2 > 0 OR c3 = 'beta'",
        table=NORMAL,
        ref_select="ts, TRY(c1 * 2) AS c, upper(c3) AS u, c2",
    ),
]


def _reference(loaded: Loaded, case: Case) -> dict[int, list[tuple[Any, ...]]]:
    """The reference rows per vgroup, in WAL order."""
    table = NORMAL if case.table == NORMAL else "meters"
    conds = [f"({case.ref_where or case.where})"] if case.where else []
    if case.table not in ("meters", NORMAL):
        conds.append(f"tbname = '{case.table}'")
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    sql = f"SELECT __vgroup, __seq, {case.ref_select or case.select} FROM {table}{where}"
    result = loaded.ref.sql(sql).fetchall()
    out: dict[int, list[tuple[Any, ...]]] = {v: [] for v in vgroups_of(loaded.engine, DB)}
    for row in sorted(result, key=lambda r: r[1]):
        out[row[0]].append(tuple(row[2:]))
    return out


def _reference_names(loaded: Loaded, case: Case) -> list[str]:
    table = NORMAL if case.table == NORMAL else "meters"
    sql = f"SELECT {case.ref_select or case.select} FROM {table} LIMIT 0"
    return [d[0] for d in loaded.ref.sql(sql).description]


# The ways a query topic's read is evaluated (server/core/topic_reader.py `_evaluate`), forced
# on the dataset's small reads: as configured (pyarrow for simple topics), DuckDB alone,
# and DuckDB over parts of the batch on several threads.
PATHS: dict[str, dict[str, object]] = {
    "configured": {},
    "duckdb": {"ARROW_EVAL_MAX_ROWS": -1},
    "duckdb_split": {
        "ARROW_EVAL_MAX_ROWS": -1, "SPLIT_MIN_ROWS": 1, "SPLIT_MAX_KEPT": 2.0, "SPLIT_PARTS": 3,
    },
}  # fmt: skip


@pytest.fixture(params=list(PATHS))
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    for constant, value in PATHS[name].items():
        monkeypatch.setattr(topic_reader, constant, value)
    return name


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_query_topic_equals_duckdb(loaded: Loaded, case: Case, path: str) -> None:
    engine = loaded.engine
    topic = f"q_{case.id}_{path}"
    where = f" WHERE {case.where}" if case.where else ""
    engine.execute(f"CREATE TOPIC {topic} AS SELECT {case.select} FROM {DB}.{case.table}{where}")
    expected = _reference(loaded, case)
    got = read_vgroups(engine, topic, DB)

    assert not any(metas(items) for items in got.values()), "a query topic delivers no meta"
    names = _reference_names(loaded, case)
    for items in got.values():
        for block in blocks(items):
            assert block.data.column_names == names
    delivered = {v: norm_rows(block_rows(items)) for v, items in got.items()}
    wanted = {v: norm_rows(rows_) for v, rows_ in expected.items()}
    all_delivered = Counter(r for rs in delivered.values() for r in rs)
    all_wanted = Counter(r for rs in wanted.values() for r in rs)
    assert all_delivered == all_wanted, (
        f"missing {list((all_wanted - all_delivered).elements())[:5]}, "
        f"extra {list((all_delivered - all_wanted).elements())[:5]}"
    )
    for vgroup, want in wanted.items():
        assert delivered[vgroup] == want, f"vgroup {vgroup}: rows not in WAL order"
    assert sum(all_wanted.values()) > 0, "the case selects no rows: it tests nothing"


def test_query_topic_of_every_type_keeps_column_types(loaded: Loaded) -> None:
    loaded.engine.execute(f"CREATE TOPIC types_star AS SELECT * FROM {DB}.d0")
    found = [
        b
        for v in vgroups_of(loaded.engine, DB)
        for b in blocks(read_all(loaded.engine, "types_star", v))
    ]
    assert found
    for block in found:
        assert [(f.name, f.type) for f in block.data.schema] == [(n, t) for n, _, t in DATA_COLUMNS]


@pytest.mark.parametrize("max_rows", [1, 3, 100_000])
def test_page_size_does_not_change_what_is_read(loaded: Loaded, max_rows: int) -> None:
    engine = loaded.engine
    engine.execute(f"CREATE TOPIC IF NOT EXISTS pages AS SELECT ts, i, tbname FROM {DB}.meters")
    for vgroup in vgroups_of(engine, DB):
        paged = read_all(engine, "pages", vgroup, max_rows=max_rows)
        whole, _ = engine.read_topic("pages", vgroup, 0, 10**9)
        assert [r for b in blocks(paged) for r in rows(b.data)] == [
            r for b in blocks(whole) for r in rows(b.data)
        ]


def test_blocks_carry_versions_in_order(loaded: Loaded) -> None:
    engine = loaded.engine
    engine.execute(f"CREATE TOPIC IF NOT EXISTS versions AS SELECT ts, i FROM {DB}.meters")
    for vgroup in vgroups_of(engine, DB):
        last = 0
        for block in blocks(read_all(engine, "versions", vgroup, max_rows=2)):
            assert isinstance(block, TopicBlock)
            assert last < block.first_version <= block.last_version
            last = block.last_version


# --- stable topics --------------------------------------------------------------------

STABLE_FILTERS = [
    ("all", None, "true"),
    ("location", "location = 'SF'", "location = 'SF'"),
    ("in_and_null", "groupid IN (1, 3) AND region IS NOT NULL", None),
    ("tbname_or_function", "tbname = 'd6' OR lower(location) = 'la'", None),
    ("null_tag", "location IS NULL OR groupid IS NULL", None),
    ("none_match", "groupid > 100", None),
]


@pytest.mark.parametrize(
    ("name", "where", "ref_where"), STABLE_FILTERS, ids=[f[0] for f in STABLE_FILTERS]
)
def test_stable_topic_delivers_data_columns_of_matching_children(
    loaded: Loaded, name: str, where: str | None, ref_where: str | None
) -> None:
    engine = loaded.engine
    topic = f"s_{name}"
    cond = f" WHERE {where}" if where else ""
    engine.execute(f"CREATE TOPIC {topic} AS STABLE {DB}.meters{cond}")
    sql = (
        f"SELECT __vgroup, __seq, tbname, {_ALL} FROM meters "
        f"WHERE {ref_where or where} ORDER BY __seq"
    )
    expected: dict[int, list[tuple[Any, ...]]] = {v: [] for v in vgroups_of(engine, DB)}
    for row in loaded.ref.sql(sql).fetchall():
        expected[row[0]].append(tuple(row[2:]))
    for vgroup, items in read_vgroups(engine, topic, DB).items():
        assert not metas(items)
        for block in blocks(items):
            assert block.data.column_names == DATA_NAMES, "stable topics carry no tags"
        assert norm_rows(tabled_rows(items)) == norm_rows(expected[vgroup]), f"vgroup {vgroup}"
    if name == "none_match":
        assert not any(expected.values())


# --- database topics ------------------------------------------------------------------


def test_database_topic_delivers_every_tables_rows_in_wal_order(loaded: Loaded) -> None:
    engine = loaded.engine
    engine.execute(f"CREATE TOPIC whole AS DATABASE {DB}")
    for vgroup, items in read_vgroups(engine, "whole", DB).items():
        assert not metas(items)
        for block in blocks(items):
            names = NORMAL_NAMES if block.table_name == NORMAL else DATA_NAMES
            assert block.data.column_names == names
        assert norm_rows(tabled_rows(items)) == norm_rows(loaded.data.rows_in_vgroup(vgroup))


def test_database_topic_with_meta_adds_every_create_in_wal_order(loaded: Loaded) -> None:
    engine = loaded.engine
    engine.execute(f"CREATE TOPIC whole_meta WITH META AS DATABASE {DB}")
    for vgroup, items in read_vgroups(engine, "whole_meta", DB).items():
        assert norm_rows(tabled_rows(items)) == norm_rows(loaded.data.rows_in_vgroup(vgroup))
        events = [m.event for m in metas(items)]
        created = [e["tableName"] for e in events if e["tableType"] != "super"]
        in_vgroup = sorted(t for t, v in loaded.data.vgroup_of.items() if v == vgroup)
        assert sorted(created) == in_vgroup
        assert events[0]["tableName"] == "meters", "the super table is created first"
        versions = [m.version for m in metas(items)]
        assert versions == sorted(versions)
