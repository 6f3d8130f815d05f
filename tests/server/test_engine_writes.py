"""The write path: INSERT in all its forms and Arrow writes land in the right tables;
a write with any bad value writes nothing (no rows in any WAL, no tables created)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.errors import InvalidValueError, NotFoundError, SqlError
from sqltopic.server.core.engine import Engine
from tests.conftest import FakeClock
from tests.server.support import blocks, read_vgroups, table_names, vgroups_of

W_DDL = """
CREATE DATABASE w VGROUPS 4;
USE w;
CREATE STABLE st (ts TIMESTAMP, v INT, s VARCHAR(4), n NCHAR(2), t TINYINT)
    TAGS (g INT, name VARCHAR(6));
CREATE TABLE a USING st TAGS (1, 'a');
CREATE TABLE f USING st TAGS (2, 'f');
CREATE TABLE c USING st TAGS (3, 'c');
CREATE TABLE n2 USING st TAGS (4, 'n2');
CREATE TABLE ntb (ts TIMESTAMP, x DOUBLE);
CREATE TOPIC everything WITH META AS DATABASE w;
"""
# existing children a, f, c, n2 lie in four different vgroups; h, new1 and x2 do not exist


@pytest.fixture
def w(engine: Engine) -> Engine:
    engine.execute(W_DDL)
    return engine


@dataclass(frozen=True)
class Snapshot:
    tables: list[str]
    last_versions: dict[int, int]
    rows: int
    items: int


def snapshot(engine: Engine) -> Snapshot:
    vnodes = engine.state.vnodes
    return Snapshot(
        tables=table_names(engine, "w"),
        last_versions={v: vnodes[v].wal.last_version for v in vgroups_of(engine, "w")},
        rows=engine.execute("SELECT count(*) FROM w.st").rows[0][0]
        + engine.execute("SELECT count(*) FROM w.ntb").rows[0][0],
        items=sum(len(items) for items in read_vgroups(engine, "everything", "w").values()),
    )


def test_existing_children_span_every_vgroup(w: Engine) -> None:
    shown = {r[0]: r[5] for r in w.execute("SHOW TABLES").rows}
    assert len({shown[t] for t in ("a", "f", "c", "n2")}) == 4


# --- INSERT -------------------------------------------------------------------------


def test_multi_table_insert(w: Engine) -> None:
    result = w.execute(
        "INSERT INTO a VALUES (1, 10, 'x', 'y', 1) (2, 11, NULL, NULL, NULL) "
        "f VALUES (3, 12, 'z', '北京', -128) ntb VALUES (4, 1.5)"
    )
    assert result.affected_rows == 4
    got = w.execute("SELECT tbname, v, s, n, t FROM st ORDER BY ts").rows
    assert got == [
        ("a", 10, "x", "y", 1),
        ("a", 11, None, None, None),
        ("f", 12, "z", "北京", -128),
    ]
    assert w.execute("SELECT x FROM ntb").rows == [(1.5,)]


def test_insert_column_lists_fill_the_rest_with_null(w: Engine) -> None:
    w.execute("INSERT INTO a (ts, s) VALUES (1, 'x') f (n, ts) VALUES ('nn', 2)")
    got = w.execute("SELECT tbname, v, s, n, t FROM st ORDER BY ts").rows
    assert got == [("a", None, "x", None, None), ("f", None, None, "nn", None)]


def test_timestamp_forms(w: Engine, clock: FakeClock) -> None:
    now_ms = clock.now_us // 1000
    w.execute(
        "INSERT INTO a (ts, v) VALUES (1538548685000, 1) ('2018-10-03 14:38:06.000', 2) "
        "('2018-10-03T14:38:07.5+08:00', 3) (NOW, 4) (NOW + 1s, 5) (now() - 1h, 6)"
    )
    got = {v: ts for ts, v in w.execute("SELECT ts, v FROM a").rows}

    def ms(value: int) -> datetime:
        return datetime.fromtimestamp(value / 1000, tz=UTC).replace(tzinfo=None)

    assert got == {
        1: ms(1538548685000),
        2: datetime(2018, 10, 3, 14, 38, 6),
        3: datetime(2018, 10, 3, 6, 38, 7, 500_000),
        4: ms(now_ms),
        5: ms(now_ms + 1000),
        6: ms(now_ms - 3_600_000),
    }


def test_microsecond_database(engine: Engine) -> None:
    engine.execute("""
        CREATE DATABASE us PRECISION 'us'; USE us;
        CREATE TABLE t (ts TIMESTAMP, v INT);
        INSERT INTO t VALUES (1538548685000001, 1) ('2018-10-03 06:38:05.000002', 2);
    """)
    result = engine.execute("SELECT ts FROM t ORDER BY v")
    assert result.to_arrow().schema.field("ts").type == pa.timestamp("us")
    assert [r[0].microsecond for r in result.rows] == [1, 2]


def test_insert_using_creates_once_and_keeps_first_tags(w: Engine) -> None:
    w.execute("INSERT INTO new1 USING st TAGS (5, 'one') VALUES (1, 1, 'a', 'b', 1)")
    w.execute("INSERT INTO new1 USING st (name) TAGS ('two') VALUES (2, 2, 'a', 'b', 1)")
    assert w.execute("SELECT v, g, name FROM new1 ORDER BY ts").rows == [
        (1, 5, "one"),
        (2, 5, "one"),
    ]
    assert "new1" in table_names(w)


def test_insert_through_the_stable(w: Engine) -> None:
    result = w.execute(
        "INSERT INTO st (tbname, ts, v, name) VALUES ('h', 1, 1, 'hh') ('a', 2, 2, 'zz') "
        "('H', 3, 3, 'other')"
    )
    assert result.affected_rows == 3
    got = w.execute("SELECT tbname, v, g, name FROM st ORDER BY ts").rows
    assert got == [("h", 1, None, "hh"), ("a", 2, 1, "a"), ("h", 3, None, "hh")]


@pytest.mark.parametrize(
    ("sql", "error", "match"),
    [
        ("INSERT INTO st (ts, v) VALUES (1, 1)", SqlError, "tbname"),
        ("INSERT INTO st (tbname, ts, v) VALUES ('nosuch', 1, 1)", NotFoundError, "nosuch"),
        ("INSERT INTO a (v) VALUES (1)", SqlError, "timestamp"),
        ("INSERT INTO a (ts, v, v) VALUES (1, 1, 1)", SqlError, "twice"),
        ("INSERT INTO a VALUES (1, 1, 'x')", InvalidValueError, "3 values"),
    ],
)
def test_malformed_inserts_are_refused(
    w: Engine, sql: str, error: type[SqlError], match: str
) -> None:
    before = snapshot(w)
    with pytest.raises(error, match=match):
        w.execute(sql)
    assert snapshot(w) == before


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO a USING other TAGS (1) VALUES (1, 2, 'x', 'y', 3)",
        "INSERT INTO ntb USING other TAGS (1) VALUES (1, 2.5)",
    ],
)
def test_insert_using_another_stable_is_refused(w: Engine, sql: str) -> None:
    w.execute("CREATE STABLE other (ts TIMESTAMP, x DOUBLE) TAGS (t INT)")
    before = snapshot(w)
    with pytest.raises(SqlError, match="other"):
        w.execute(sql)
    assert snapshot(w) == before


def test_writes_through_a_stable_refuse_another_stables_table(w: Engine) -> None:
    w.execute("CREATE STABLE other (ts TIMESTAMP, x DOUBLE) TAGS (t INT)")
    before = snapshot(w)
    with pytest.raises(SqlError, match="not a child table of other"):
        w.execute("INSERT INTO other (tbname, ts, x) VALUES ('a', 1, 2.5)")
    with pytest.raises(SqlError, match="not a child table of other"):
        w.write("other", pa.table({"tbname": ["ntb"], "ts": _ts(1), "x": [2.5]}))
    assert snapshot(w) == before


def test_varchar_counts_bytes_and_nchar_characters(w: Engine) -> None:
    w.execute("INSERT INTO a (ts, s, n) VALUES (1, 'Zür', '北京')")
    w.write("a", pa.table({"ts": _ts(2), "s": ["Zür"], "n": ["北京"]}))
    with pytest.raises(InvalidValueError, match="Züri"):
        w.execute("INSERT INTO a (ts, s) VALUES (3, 'Züri')")
    with pytest.raises(InvalidValueError, match="Züri"):
        w.write("a", pa.table({"ts": _ts(3), "s": ["Züri"]}))
    with pytest.raises(InvalidValueError, match="北京x"):
        w.write("a", pa.table({"ts": _ts(3), "n": ["北京x"]}))
    assert w.execute("SELECT s, n FROM a").rows == [("Zür", "北京"), ("Zür", "北京")]


def test_arrow_types_that_convert(w: Engine) -> None:
    data = pa.table({
        "ts": pa.array([1, 2], pa.timestamp("ms", tz="Asia/Shanghai")),
        "v": pa.array([1, 2], pa.int8()),
        "s": pa.array(["x", "y"]).dictionary_encode(),
        "n": pa.array([b"n", None], pa.binary()),
    })  # fmt: skip
    assert w.write("a", data) == 2
    assert w.execute("SELECT ts, v, s, n FROM a ORDER BY ts").rows == [
        (datetime(1970, 1, 1, 0, 0, 0, 1000), 1, "x", "n"),
        (datetime(1970, 1, 1, 0, 0, 0, 2000), 2, "y", None),
    ]
    with pytest.raises(InvalidValueError, match="ts"):
        w.write("a", pa.table({"ts": pa.array([1500], pa.timestamp("us"))}))


# --- atomicity ----------------------------------------------------------------------

BAD_INSERTS = [
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', 'y', 1) f VALUES (2, 'abc', 'x', 'y', 1) "
        "c VALUES (3, 3, 'x', 'y', 1)",
        InvalidValueError,
        "abc",
        id="wrong_type",
    ),
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', 'y', 1) c VALUES (3, 3, 'toolong', 'y', 1)",
        InvalidValueError,
        "toolong",
        id="too_long_varchar",
    ),
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', '北京', 1) n2 VALUES (3, 3, 'x', '北京x', 1)",
        InvalidValueError,
        "北京x",
        id="too_long_nchar",
    ),
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', 'y', 1) f VALUES (2, 2, 'x', 'y', 300)",
        InvalidValueError,
        "300",
        id="out_of_range",
    ),
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', 'y', 1) n2 VALUES (NULL, 2, 'x', 'y', 1)",
        InvalidValueError,
        "NULL",
        id="null_timestamp",
    ),
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', 'y', 1) nosuch VALUES (2, 2, 'x', 'y', 1) "
        "c VALUES (3, 3, 'x', 'y', 1)",
        NotFoundError,
        "nosuch",
        id="unknown_table_in_the_middle",
    ),
    pytest.param(
        "INSERT INTO new1 USING st TAGS (5, 'n') VALUES (1, 1, 'a', 'b', 1) "
        "a VALUES (2, 'bad', 'a', 'b', 1)",
        InvalidValueError,
        "bad",
        id="auto_create_then_bad_value",
    ),
    pytest.param(
        "INSERT INTO new1 USING st TAGS (5, 'n') VALUES (1, 1, 'a', 'b', 1) "
        "nosuch VALUES (2, 2, 'a', 'b', 1)",
        NotFoundError,
        "nosuch",
        id="auto_create_then_unknown_table",
    ),
    pytest.param(
        "INSERT INTO a VALUES (1, 1, 'x', 'y', 1) "
        "x2 USING st TAGS ('notint', 'x') VALUES (2, 2, 'a', 'b', 1)",
        InvalidValueError,
        "notint",
        id="bad_tag_value",
    ),
    pytest.param(
        "INSERT INTO new1 USING st TAGS (1, 'ok') VALUES (1, 1, 'a', 'b', 1) "
        "x2 USING st TAGS (1, 'toolongname') VALUES (2, 2, 'a', 'b', 1)",
        InvalidValueError,
        "toolongname",
        id="too_long_tag",
    ),
    pytest.param(
        "INSERT INTO st (tbname, ts, v, g) VALUES ('h', 1, 1, 7) ('a', 2, 'bad', 1)",
        InvalidValueError,
        "bad",
        id="through_stable_bad_value",
    ),
    pytest.param(
        "INSERT INTO st (tbname, ts, v, g) VALUES ('h', 1, 1, 7) (NULL, 2, 2, 1)",
        InvalidValueError,
        "tbname",
        id="through_stable_null_tbname",
    ),
]


@pytest.mark.parametrize(("sql", "error", "value"), BAD_INSERTS)
def test_insert_with_a_bad_value_writes_nothing(
    w: Engine, sql: str, error: type[SqlError], value: str
) -> None:
    w.execute("INSERT INTO a VALUES (0, 0, 'pre', 'p', 0)")
    before = snapshot(w)
    with pytest.raises(error) as info:
        w.execute(sql)
    assert value in str(info.value), "the error names the value"
    assert snapshot(w) == before
    for name in ("new1", "x2", "h"):
        assert name not in table_names(w)


def test_each_statement_is_atomic_on_its_own(w: Engine) -> None:
    with pytest.raises(InvalidValueError):
        w.execute(
            "INSERT INTO a VALUES (1, 1, 'x', 'y', 1); INSERT INTO f VALUES (2, 'bad', 'x', 'y', 1)"
        )
    assert w.execute("SELECT tbname, v FROM st").rows == [("a", 1)]


def test_the_table_can_be_created_after_a_failed_auto_create(w: Engine) -> None:
    with pytest.raises(InvalidValueError):
        w.execute(
            "INSERT INTO new1 USING st TAGS (5, 'n') VALUES (1, 1, 'a', 'b', 1) "
            "a VALUES (2, 'bad', 'a', 'b', 1)"
        )
    w.execute("INSERT INTO new1 USING st TAGS (6, 'm') VALUES (1, 1, 'a', 'b', 1)")
    assert w.execute("SELECT g, name, v FROM new1").rows == [(6, "m", 1)]


# --- Arrow writes -------------------------------------------------------------------


def _ts(*values: int | None) -> pa.Array:
    return pa.array(values, pa.timestamp("ms"))


def test_arrow_write_into_a_child_and_a_normal_table(w: Engine) -> None:
    n = w.write(
        "a", pa.table({"ts": _ts(1, 2), "V": pa.array([1, 2], pa.int32()), "s": ["x", None]})
    )
    assert n == 2
    batch = pa.record_batch({"x": [0.5], "ts": pa.array([3], pa.int64())})
    assert w.write("w.ntb", batch) == 1
    assert w.execute("SELECT v, s, n, t FROM a ORDER BY ts").rows == [
        (1, "x", None, None),
        (2, None, None, None),
    ]
    assert w.execute("SELECT * FROM ntb").rows == [(datetime(1970, 1, 1, 0, 0, 0, 3000), 0.5)]


def test_arrow_write_through_the_stable_creates_children(w: Engine) -> None:
    data = pa.table({
        "tbname": ["h", "a", "new1", "h"],
        "ts": _ts(1, 2, 3, 4),
        "v": pa.array([1, 2, 3, 4], pa.int32()),
        "g": pa.array([7, 99, None, 8], pa.int32()),
        "name": ["hh", "zz", "nn", "h2"],
    })  # fmt: skip
    assert w.write("st", data) == 4
    got = w.execute("SELECT tbname, v, g, name FROM st ORDER BY ts").rows
    assert got == [("h", 1, 7, "hh"), ("a", 2, 1, "a"), ("new1", 3, None, "nn"), ("h", 4, 7, "hh")]
    assert {"h", "new1"} <= set(table_names(w))


def test_empty_arrow_write_appends_nothing(w: Engine) -> None:
    before = snapshot(w)
    assert w.write("a", pa.table({"ts": _ts()})) == 0
    assert snapshot(w) == before


ArrowCase = Callable[[], pa.Table]

BAD_ARROW: list[Any] = [
    pytest.param(
        "st",
        lambda: pa.table({"tbname": ["h", "a"], "ts": _ts(1, 2), "s": ["ok", "toolong"]}),
        InvalidValueError,
        "toolong",
        id="too_long_string",
    ),
    pytest.param(
        "st",
        lambda: pa.table({"tbname": ["new1", "a"], "ts": _ts(1, None), "g": [1, 1]}),
        InvalidValueError,
        "NULL",
        id="null_timestamp",
    ),
    pytest.param(
        "st",
        lambda: pa.table({"tbname": ["h", "a"], "ts": _ts(1, 2), "v": ["1", "x"]}),
        InvalidValueError,
        "'x'",
        id="wrong_type",
    ),
    pytest.param(
        "st",
        lambda: pa.table({"tbname": ["h", "a"], "ts": _ts(1, 2), "t": [1, 1000]}),
        InvalidValueError,
        "1000",
        id="out_of_range",
    ),
    pytest.param(
        "st",
        lambda: pa.table({"tbname": ["h", None], "ts": _ts(1, 2), "g": [1, 1]}),
        InvalidValueError,
        "tbname",
        id="null_tbname",
    ),
    pytest.param(
        "st",
        lambda: pa.table({"tbname": ["h", "a"], "ts": _ts(1, 2), "nosuch": [1, 2], "g": [1, 1]}),
        NotFoundError,
        "nosuch",
        id="unknown_column",
    ),
    pytest.param(
        "a",
        lambda: pa.table({"ts": _ts(1, 2), "n": ["ok", "toolong"]}),
        InvalidValueError,
        "toolong",
        id="child_too_long",
    ),
    pytest.param(
        "a", lambda: pa.table({"v": [1]}), SqlError, "timestamp", id="child_without_timestamp"
    ),
    pytest.param(
        "nosuch", lambda: pa.table({"ts": _ts(1)}), NotFoundError, "nosuch", id="unknown_table"
    ),
]


@pytest.mark.parametrize(("target", "make", "error", "value"), BAD_ARROW)
def test_arrow_write_with_a_bad_value_writes_nothing(
    w: Engine, target: str, make: ArrowCase, error: type[SqlError], value: str
) -> None:
    before = snapshot(w)
    with pytest.raises(error) as info:
        w.write(target, make())
    assert value in str(info.value)
    assert snapshot(w) == before
    for name in ("new1", "h"):
        assert name not in table_names(w)


def test_arrow_write_through_the_stable_needs_tbname(w: Engine) -> None:
    before = snapshot(w)
    with pytest.raises(SqlError, match="tbname"):
        w.write("st", pa.table({"ts": _ts(1), "v": pa.array([1], pa.int32())}))
    assert snapshot(w) == before


def test_arrow_write_with_a_column_twice_is_refused(w: Engine) -> None:
    before = snapshot(w)
    with pytest.raises(SqlError, match="ts"):
        w.write("a", pa.table({"ts": _ts(1), "TS": _ts(2)}))
    assert snapshot(w) == before


def test_written_rows_reach_the_database_topic(w: Engine) -> None:
    w.execute("INSERT INTO a VALUES (1, 1, 'x', 'y', 1) ntb VALUES (2, 2.5)")
    w.write("st", pa.table({"tbname": ["h"], "ts": _ts(3), "g": [1]}))
    got = {
        b.table_name: b.data.num_rows
        for items in read_vgroups(w, "everything", "w").values()
        for b in blocks(items)
    }
    assert got == {"a": 1, "ntb": 1, "h": 1}
