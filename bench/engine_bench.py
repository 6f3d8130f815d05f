"""End-to-end benchmark of the embedded engine (`sqltopic.server.core.engine.Engine`).

1. INSERT: 1,000-row statements through `Engine.execute` (text built beforehand), into
   pre-created children of `meters`, database WAL_LEVEL 1: one table per statement with
   integer ms timestamps, ten tables per statement, and quoted date-time timestamps;
2. Arrow writes: 10,000-row tables through `Engine.write`, into a child table, through
   the super table with `tbname` (one and ten tables per write, tag columns included),
   and through the super table creating ten new children per write;
3. a backlog of 10,000,000 rows (10,000-row writes over 100 children and 4 vgroups) read
   from version 0 to the end of every vgroup by query topics
   `SELECT ts, current, voltage, location FROM meters WHERE voltage > X` keeping 1 %,
   50 % and 100 % of the rows, against DuckDB running the same SELECT over the same
   rows held in memory as one Arrow table;
4. the same backlog read by a topic calling TDengine's scalar functions (TO_ISO8601,
   TIMETRUNCATE, GREATEST, SUBSTRING, ROUND) against a topic projecting the same columns
   plainly, both keeping 50 %.

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smaller run (a 1,000,000-row backlog).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import harness
import pyarrow as pa
import pyarrow.compute as pc
from harness import Report

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import TopicBlock

# Rows per INSERT statement and per Arrow write, as the brief measures them.
ROWS_PER_STATEMENT = 1_000
ROWS_PER_WRITE = 10_000
# Parts of the multi-table INSERT and tables of the multi-table Arrow write.
TABLES_PER_STATEMENT = 10
TABLES_PER_WRITE = 10
# Child tables of each database: enough that every one of the 4 vgroups holds some.
CHILDREN = 100
VGROUPS = 4
# The first timestamp: the data-model doc's first sample row.
START_MS = 1_538_548_685_000
# TDengine's demo locations; child i gets LOCATIONS[i % len] and groupid i % 10.
LOCATIONS = (
    "California.SanFrancisco", "California.LosAngeles", "California.SanDiego",
    "California.SanJose", "California.PaloAlto", "California.Campbell",
    "California.MountainView", "California.Sunnyvale", "California.SantaClara",
    "California.Cupertino",
)  # fmt: skip
GROUPS = 10
# Voltage is uniform over the integers [200, 300): `voltage > X` keeps (299 - X) %.
VOLTAGE_LOW = 200
VOLTAGE_SPAN = 100
# Selectivity in percent -> X of `voltage > X`.
SELECTIVITIES = {1: 298, 50: 249, 100: 199}
# The headline read size of one `read_topic` call, and the consumer-default-ish one.
MAX_ROWS = 1_000_000
MAX_ROWS_SMALL = 100_000
# A consumer's max.poll.rows is unlimited by default: a read then stops at the reader's own
# entry and byte bounds (server/core/topic_reader.py READ_ENTRIES, READ_BYTES).
MAX_ROWS_UNLIMITED = 2**62
TOPIC_SQL = "SELECT ts, current, voltage, location FROM meters WHERE voltage > {x}"
DIRECT_SQL = "SELECT ts, current, voltage, location FROM backlog WHERE voltage > {x}"
# TDengine's scalar functions in a topic (issue 13) against the same columns projected
# plainly, both keeping 50 %: what the functions cost on the read path.
FUNCTIONS_SQL = (
    "SELECT ts, to_iso8601(ts), timetruncate(ts, 1s), greatest(current, phase), "
    "substring(location, 1, 10), round(current * voltage, 1) FROM meters WHERE voltage > 249"
)
PLAIN_SQL = (
    "SELECT ts, ts AS t2, ts AS t3, current, location, phase FROM meters WHERE voltage > 249"
)
# Goals: INSERT and Arrow-write rows/s, and topic/DuckDB-direct rows-scanned ratio.
INSERT_GOAL_ROWS_S = 200_000
WRITE_GOAL_ROWS_S = 2_000_000
RATIO_GOAL = 0.25
SCHEMA_SQL = (
    "CREATE DATABASE {db} VGROUPS {vgroups} WAL_LEVEL 1; USE {db}; "
    "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
    "TAGS (location VARCHAR(64), groupid INT)"
)
# Two databases: INSERTs and Arrow writes go to INGEST_DB (dropped after them), the
# topic backlog to TOPIC_DB, so that the topics read exactly the rows generated for them.
INGEST_DB = "ingest"
TOPIC_DB = "power"


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    backlog_rows: int  # rows the topics read, written ROWS_PER_WRITE at a time
    insert_statements: int  # statements per INSERT round
    insert_rounds: int  # rounds per INSERT variant
    writes: int  # Arrow writes per round
    create_writes: int  # Arrow writes per round of the creating variant (10 tables each)
    write_rounds: int  # rounds per Arrow-write variant
    topic_rounds: int  # alternating topic/DuckDB rounds per selectivity and read size


# 10M rows: a topic pass takes 0.2-0.6 s, a DuckDB one 0.01-0.4 s (noisy: it allocates
# its output afresh), hence 7 rounds; INSERT text takes ~3 s to build. The whole run
# takes about 40 s on 2 cores.
FULL = Sizes(
    backlog_rows=10_000_000, insert_statements=100, insert_rounds=5, writes=100,
    create_writes=10, write_rounds=5, topic_rounds=7,
)  # fmt: skip
QUICK = Sizes(
    backlog_rows=1_000_000, insert_statements=20, insert_rounds=3, writes=20,
    create_writes=5, write_rounds=3, topic_rounds=2,
)  # fmt: skip

NOTES = {
    "method": (
        "Rates are medians of rounds; topic and DuckDB rounds alternate, order swapped "
        "every round. One Engine(background=True), databases VGROUPS 4 WAL_LEVEL 1."
    ),
    "insert_note": (
        "Engine.execute of prebuilt 1,000-row statements into existing children, "
        "statement i into table d(i % 100): integer ms, quoted 'YYYY-MM-DD HH:MM:SS.fff', "
        "and 10 tables x 100 rows per statement."
    ),
    "write_note": (
        "Engine.write of prebuilt 10,000-row Arrow tables (ts timestamp[ms], float32, "
        "int32, float32): into a child; through meters with tbname, location, groupid, "
        "one existing table per write or 10 interleaved (row i -> table i % 10); and "
        "10 new tables per write (creation: exclusive lock, catalog commit)."
    ),
    "topic_note": (
        "rows_s = backlog rows (scanned, not delivered) / seconds to read every vgroup "
        "from version 0 until read_topic returns no new version, one read_topic call "
        "after another with no row limit (max.poll.rows' default: a read stops at the "
        "reader's entry and byte bounds); _max1m and _max100k keys: max_rows 1,000,000 and "
        "100,000. One unmeasured warm-up call per topic. Delivered rows verified against "
        "the in-memory table."
    ),
    "duckdb_note": (
        "A separate DuckDB connection (default threads) runs the same SELECT over one "
        "registered Arrow table (combine_chunks, location dictionary-encoded) and "
        "materializes .to_arrow_table(); also over the same rows in 10,000-row chunks "
        "(the WAL entries' shape), as _chunked10k keys, for context."
    ),
}


log = harness.logger("engine_bench")


# --- data ------------------------------------------------------------------------------


def create_schema(engine: Engine, db: str) -> None:
    """Database `db` with meters and CHILDREN children d0.. (tags from their number)."""
    engine.execute(SCHEMA_SQL.format(db=db, vgroups=VGROUPS))
    engine.execute(
        "; ".join(
            f"CREATE TABLE d{i} USING meters TAGS ('{LOCATIONS[i % len(LOCATIONS)]}', {i % GROUPS})"
            for i in range(CHILDREN)
        )
    )


def meters_table(first_ms: int, rows: int, seed: int) -> pa.Table:
    """`rows` meters rows from `first_ms` on, 1 ms apart; voltage uniform, see VOLTAGE_*."""
    volts = pc.floor(pc.multiply(pc.random(rows, initializer=seed), VOLTAGE_SPAN))
    return pa.table({
        "ts": pa.array(range(first_ms, first_ms + rows), pa.int64()).cast(pa.timestamp("ms")),
        "current": pc.multiply(pc.random(rows, initializer=seed + 1), 20).cast(pa.float32()),
        "voltage": pc.add(volts.cast(pa.int32()), VOLTAGE_LOW),
        "phase": pc.random(rows, initializer=seed + 2).cast(pa.float32()),
    })  # fmt: skip


def with_tags(data: pa.Table, names: list[str], numbers: list[int]) -> pa.Table:
    """`data` with tbname, location and groupid columns: row i goes to table names[i %
    len], whose tags are those of child number numbers[i % len]."""
    index = pa.array([i % len(names) for i in range(data.num_rows)], pa.int32())
    locations = [LOCATIONS[n % len(LOCATIONS)] for n in numbers]
    groups = pa.array([n % GROUPS for n in numbers], pa.int32())
    return (
        data.append_column("tbname", pc.take(pa.array(names, pa.string()), index))
        .append_column("location", pc.take(pa.array(locations, pa.string()), index))
        .append_column("groupid", pc.take(groups, index))
    )


# --- INSERT ----------------------------------------------------------------------------

INSERT_VARIANTS = ("integer_ts", "multi_table", "datetime_ts")


def timestamp_text(kind: str, ms: int) -> str:
    if kind != "datetime_ts":
        return str(ms)
    seconds, millis = divmod(ms, 1000)
    return f"'{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(seconds))}.{millis:03d}'"


def tuples(kind: str, first_ms: int, count: int, rng: random.Random) -> str:
    return " ".join(
        f"({timestamp_text(kind, first_ms + r)}, {rng.randint(50, 150) / 10}, "
        f"{rng.randint(VOLTAGE_LOW, VOLTAGE_LOW + VOLTAGE_SPAN - 1)}, "
        f"{rng.randint(0, 100) / 100})"
        for r in range(count)
    )


def statement(kind: str, number: int, rng: random.Random) -> str:
    """INSERT number `number` of a variant: ROWS_PER_STATEMENT rows, later timestamps
    for later statements."""
    first_ms = START_MS + number * ROWS_PER_STATEMENT
    if kind != "multi_table":
        rows = tuples(kind, first_ms, ROWS_PER_STATEMENT, rng)
        return f"INSERT INTO d{number % CHILDREN} VALUES {rows}"
    per_table = ROWS_PER_STATEMENT // TABLES_PER_STATEMENT
    parts = [
        f"d{(number * TABLES_PER_STATEMENT + t) % CHILDREN} VALUES "
        f"{tuples(kind, first_ms + t * per_table, per_table, rng)}"
        for t in range(TABLES_PER_STATEMENT)
    ]
    return "INSERT INTO " + " ".join(parts)


def insert_round(engine: Engine, statements: list[str]) -> float:
    """Rows/s of executing `statements`; checks the rows each reports."""
    start = time.perf_counter()
    for sql in statements:
        if engine.execute(sql).affected_rows != ROWS_PER_STATEMENT:
            raise RuntimeError(f"an INSERT did not write {ROWS_PER_STATEMENT} rows")
    return len(statements) * ROWS_PER_STATEMENT / (time.perf_counter() - start)


def run_inserts(engine: Engine, sizes: Sizes, rng: random.Random) -> tuple[Report, Report]:
    engine.execute(f"USE {INGEST_DB}")
    keys: Report = {}
    meta: Report = {"insert_statement_chars": {}}
    for kind in INSERT_VARIANTS:
        count = sizes.insert_statements * sizes.insert_rounds
        statements = [statement(kind, n, rng) for n in range(count)]
        meta["insert_statement_chars"][kind] = round(statistics.fmean(map(len, statements)))
        insert_round(engine, statements[:2])  # unmeasured warm-up: patterns, caches
        rates = [
            insert_round(engine, statements[r :: sizes.insert_rounds])
            for r in range(sizes.insert_rounds)
        ]
        key = "insert_sql_rows_s" + ("" if kind == "integer_ts" else f"_{kind}")
        keys[key] = harness.median_rate(rates)
        keys[f"{key}_goal_met"] = keys[key] >= INSERT_GOAL_ROWS_S
        meta[f"{key}_rounds"] = [round(r) for r in rates]
        log(f"INSERT {kind}: {keys[key]:,} rows/s")
    return keys, meta


# --- Arrow writes ----------------------------------------------------------------------


def write_round(engine: Engine, writes: list[tuple[str, pa.Table]]) -> float:
    """Rows/s of `Engine.write` of every (target, table); checks the rows written."""
    rows: int = sum(table.num_rows for _, table in writes)
    start = time.perf_counter()
    written = 0
    for target, table in writes:
        written += engine.write(target, table)
    seconds = time.perf_counter() - start
    if written != rows:
        raise RuntimeError(f"wrote {written} rows of {rows}")
    return rows / seconds


def write_plans() -> dict[str, Callable[[int, int], tuple[str, pa.Table]]]:
    """Per variant: (round, write number) -> (target, table). Tables are built up front
    by the caller's loop; the few distinct data tables are reused."""
    data = [meters_table(START_MS + i * ROWS_PER_WRITE, ROWS_PER_WRITE, i) for i in range(8)]
    one = [with_tags(d, [f"d{i}"], [i]) for i, d in enumerate(data)]
    tens = [[i * TABLES_PER_WRITE + t for t in range(TABLES_PER_WRITE)] for i in range(len(data))]
    ten = [with_tags(d, [f"d{c}" for c in cs], cs) for d, cs in zip(data, tens, strict=True)]

    def child(r: int, n: int) -> tuple[str, pa.Table]:
        return f"{INGEST_DB}.d{n % CHILDREN}", data[n % len(data)]

    def stable_one(r: int, n: int) -> tuple[str, pa.Table]:
        return f"{INGEST_DB}.meters", one[n % len(one)]

    def stable_ten(r: int, n: int) -> tuple[str, pa.Table]:
        return f"{INGEST_DB}.meters", ten[n % len(ten)]

    def stable_create(r: int, n: int) -> tuple[str, pa.Table]:
        names = [f"n{r}_{n}_{t}" for t in range(TABLES_PER_WRITE)]
        return f"{INGEST_DB}.meters", with_tags(
            data[n % len(data)], names, list(range(TABLES_PER_WRITE))
        )

    return {
        "write_arrow_rows_s": child,
        "write_arrow_rows_s_stable": stable_one,
        "write_arrow_rows_s_stable_10tables": stable_ten,
        "write_arrow_rows_s_stable_create10": stable_create,
    }


def run_writes(engine: Engine, sizes: Sizes) -> tuple[Report, Report]:
    keys: Report = {}
    meta: Report = {}
    for key, plan in write_plans().items():
        count = sizes.create_writes if key.endswith("create10") else sizes.writes
        rounds = [[plan(r, n) for n in range(count)] for r in range(sizes.write_rounds + 1)]
        write_round(engine, rounds[0][:2])  # unmeasured warm-up
        rates = [write_round(engine, writes) for writes in rounds[1:]]
        keys[key] = harness.median_rate(rates)
        if not key.endswith("create10"):  # creating tables is reported, not a goal
            keys[f"{key}_goal_met"] = keys[key] >= WRITE_GOAL_ROWS_S
        meta[f"{key}_rounds"] = [round(r) for r in rates]
        log(f"{key}: {keys[key]:,} rows/s")
    return keys, meta


# --- topics ----------------------------------------------------------------------------


def build_backlog(engine: Engine, rows: int) -> tuple[pa.Table, Report]:
    """Write `rows` rows to TOPIC_DB's children, ROWS_PER_WRITE per write, write k into
    child k % CHILDREN; returns the same rows with their tags as one in-memory table."""
    chunks = []
    seconds = 0.0  # in Engine.write only
    for k in range(rows // ROWS_PER_WRITE):
        child = k % CHILDREN
        data = meters_table(START_MS + k * ROWS_PER_WRITE, ROWS_PER_WRITE, 3 * k + 1000)
        start = time.perf_counter()
        engine.write(f"{TOPIC_DB}.d{child}", data)
        seconds += time.perf_counter() - start
        location = pa.DictionaryArray.from_arrays(
            pa.repeat(pa.scalar(0, pa.int32()), ROWS_PER_WRITE),
            pa.array([LOCATIONS[child % len(LOCATIONS)]]),
        )
        groupid = pa.repeat(pa.scalar(child % GROUPS, pa.int32()), ROWS_PER_WRITE)
        chunks.append(data.append_column("location", location).append_column("groupid", groupid))
    state = engine.state
    per_vgroup = {}
    for vgroup in state.catalog.database(TOPIC_DB).vgroups:
        reader = state.vnode(vgroup).reader()
        per_vgroup[str(vgroup)] = reader.last_version - reader.first_version + 1
    meta = {
        "backlog_write_rows_s": round(rows / seconds),
        "backlog_wal_entries_per_vgroup": per_vgroup,
    }
    return pa.concat_tables(chunks), meta


def read_all(engine: Engine, topic: str, max_rows: int) -> tuple[int, int, float]:
    """Rows delivered, read_topic calls and seconds to read every vgroup of TOPIC_DB from
    version 0 until a call returns no new version."""
    state = engine.state
    delivered = calls = 0
    start = time.perf_counter()
    for vgroup in state.catalog.database(TOPIC_DB).vgroups:
        version = 0
        while True:
            items, after = engine.read_topic(topic, vgroup, version, max_rows)
            calls += 1
            delivered += sum(i.data.num_rows for i in items if isinstance(i, TopicBlock))
            if after == version:
                break
            version = after
        if version != state.vnode(vgroup).wal.next_version:
            raise RuntimeError(f"vgroup {vgroup}: reading stopped at {version}")
    return delivered, calls, time.perf_counter() - start


def topic_pass(engine: Engine, topic: str, max_rows: int) -> tuple[int, float]:
    """Rows delivered and seconds of `read_all`."""
    delivered, _, seconds = read_all(engine, topic, max_rows)
    return delivered, seconds


def direct(con: duckdb.DuckDBPyConnection, relation: pa.Table, sql: str) -> tuple[int, float]:
    """Rows out and seconds of `sql` over `relation` registered as `backlog`."""
    con.register("backlog", relation)
    try:
        start = time.perf_counter()
        rows = con.sql(sql).to_arrow_table().num_rows
        return rows, time.perf_counter() - start
    finally:
        con.unregister("backlog")


def alternate(
    sides: dict[str, Callable[[], tuple[int, float]]], rounds: int, rows: int, expected: int
) -> dict[str, list[float]]:
    """Rows/s (`rows` scanned) of each side per round, in the given order in even rounds
    and reversed in odd ones; every side must deliver `expected` rows."""
    rates: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for n in range(rounds):
        for name in reversed(order) if n % 2 else order:
            out, seconds = sides[name]()
            if out != expected:
                raise RuntimeError(f"{name}: {out} rows delivered, expected {expected}")
            rates[name].append(rows / seconds)
    return rates


def run_selectivity(
    engine: Engine, con: duckdb.DuckDBPyConnection, backlog: dict[str, pa.Table],
    percent: int, rounds: int,
) -> tuple[Report, Report]:  # fmt: skip
    x = SELECTIVITIES[percent]
    topic, direct_sql = f"bench_sel{percent}", DIRECT_SQL.format(x=x)
    engine.execute(f"CREATE TOPIC {topic} AS {TOPIC_SQL.format(x=x)}")
    engine.read_topic(topic, engine.state.catalog.database(TOPIC_DB).vgroups[0], 0, 1)
    sides: dict[str, Callable[[], tuple[int, float]]] = {
        "topic": lambda: topic_pass(engine, topic, MAX_ROWS_UNLIMITED),
        "topic_max1m": lambda: topic_pass(engine, topic, MAX_ROWS),
        "topic_max100k": lambda: topic_pass(engine, topic, MAX_ROWS_SMALL),
        "duckdb": lambda: direct(con, backlog["one"], direct_sql),
        "duckdb_chunked10k": lambda: direct(con, backlog["chunked"], direct_sql),
    }
    expected = pc.sum(pc.greater(backlog["one"].column("voltage"), x)).as_py()
    rates = alternate(sides, rounds, backlog["one"].num_rows, expected)
    sel = f"sel{percent}"
    median = {name: harness.median_rate(rates[name]) for name in sides}
    topic_rate, duck_rate = median["topic"], median["duckdb"]
    keys: Report = {
        f"topic_rows_s_{sel}": topic_rate,
        f"topic_rows_s_{sel}_max1m": median["topic_max1m"],
        f"topic_rows_s_{sel}_max100k": median["topic_max100k"],
        f"duckdb_direct_rows_s_{sel}": duck_rate,
        f"duckdb_direct_rows_s_{sel}_chunked10k": median["duckdb_chunked10k"],
        f"topic_ratio_{sel}": round(topic_rate / duck_rate, 4),
        f"topic_ratio_{sel}_max1m": round(median["topic_max1m"] / duck_rate, 4),
        f"topic_ratio_{sel}_max100k": round(median["topic_max100k"] / duck_rate, 4),
        f"topic_ratio_{sel}_vs_chunked10k": round(topic_rate / median["duckdb_chunked10k"], 4),
        f"topic_ratio_{sel}_goal_met": topic_rate / duck_rate >= RATIO_GOAL,
    }
    meta: Report = {f"{sel}_{name}_rounds": [round(r) for r in v] for name, v in rates.items()}
    meta[f"{sel}_rows_delivered"] = expected
    meta[f"{sel}_topic_sql"] = TOPIC_SQL.format(x=x)
    log(f"{percent} %: topic {topic_rate:,} rows/s, DuckDB {duck_rate:,} rows/s")
    return keys, meta


def run_functions(engine: Engine, backlog: pa.Table, rounds: int) -> tuple[Report, Report]:
    """FUNCTIONS_SQL against PLAIN_SQL as topics over the backlog, rounds alternating."""
    engine.execute(f"CREATE TOPIC bench_functions AS {FUNCTIONS_SQL}")
    engine.execute(f"CREATE TOPIC bench_plain AS {PLAIN_SQL}")
    for topic in ("bench_functions", "bench_plain"):  # warm-up: compile, first plans
        engine.read_topic(topic, engine.state.catalog.database(TOPIC_DB).vgroups[0], 0, 1)
    sides: dict[str, Callable[[], tuple[int, float]]] = {
        "functions": lambda: topic_pass(engine, "bench_functions", MAX_ROWS_UNLIMITED),
        "plain": lambda: topic_pass(engine, "bench_plain", MAX_ROWS_UNLIMITED),
    }
    expected = pc.sum(pc.greater(backlog.column("voltage"), 249)).as_py()
    rates = alternate(sides, rounds, backlog.num_rows, expected)
    functions, plain = (harness.median_rate(rates[name]) for name in ("functions", "plain"))
    log(f"functions: topic {functions:,} rows/s, plain projection {plain:,} rows/s")
    keys: Report = {
        "topic_functions_rows_s": functions,
        "topic_plain_rows_s": plain,
        "topic_functions_ratio_vs_plain": round(functions / plain, 4),
    }
    meta: Report = {f"functions_{k}_rounds": [round(r) for r in v] for k, v in rates.items()}
    return keys, meta | {"functions_sql": FUNCTIONS_SQL, "plain_sql": PLAIN_SQL}


def run_topics(engine: Engine, sizes: Sizes, seconds: dict[str, float]) -> tuple[Report, Report]:
    with harness.phase(log, "backlog", seconds):
        table, meta = build_backlog(engine, sizes.backlog_rows)
        backlog = {"one": table.combine_chunks(), "chunked": table}
    engine.execute(f"USE {TOPIC_DB}")
    keys: Report = {}
    con = duckdb.connect()
    try:
        for percent in SELECTIVITIES:
            with harness.phase(log, f"topic_sel{percent}", seconds):
                more_keys, more_meta = run_selectivity(
                    engine, con, backlog, percent, sizes.topic_rounds
                )
            keys |= more_keys
            meta |= more_meta
    finally:
        con.close()
    with harness.phase(log, "topic_functions", seconds):
        more_keys, more_meta = run_functions(engine, backlog["one"], sizes.topic_rounds)
    keys |= more_keys
    meta |= more_meta
    calls = {
        str(m): read_all(engine, "bench_sel1", m)[1]
        for m in (MAX_ROWS, MAX_ROWS_SMALL, MAX_ROWS_UNLIMITED)
    }
    meta["read_topic_calls_per_pass"] = calls
    return keys, meta | {"backlog_rows": sizes.backlog_rows}


# --- the run ---------------------------------------------------------------------------


def machine_meta(root: Path, sizes: Sizes) -> Report:
    status = harness.command(["git", "status", "--porcelain", "../server", "../sql", "../wal"])
    return harness.machine_meta(
        root,
        libraries={"pyarrow": pa.__version__, "duckdb": duckdb.__version__},
        status={
            "engine_git_status": "; ".join(line.strip() for line in status.splitlines()) or "clean"
        },
        settings={},
        sizes=sizes,
        quick=sizes == QUICK,
    )


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    seconds: dict[str, float] = {}
    report: Report = {}
    meta = machine_meta(root, sizes) | NOTES
    with Engine(root / "data", background=True) as engine:
        with harness.phase(log, "setup", seconds):
            create_schema(engine, INGEST_DB)
            create_schema(engine, TOPIC_DB)
        with harness.phase(log, "insert", seconds):
            keys, more = run_inserts(engine, sizes, random.Random(seed))
        report |= keys
        meta |= more
        with harness.phase(log, "write", seconds):
            keys, more = run_writes(engine, sizes)
            engine.execute(f"DROP DATABASE {INGEST_DB}")
        report |= keys
        meta |= more
        keys, more = run_topics(engine, sizes, seconds)
        report |= keys
        meta |= more
    goals = [v for k, v in report.items() if k.endswith("_goal_met")]
    report |= {
        "all_goals_met": all(goals),
        "insert_goal_rows_s": INSERT_GOAL_ROWS_S,
        "write_goal_rows_s": WRITE_GOAL_ROWS_S,
        "ratio_goal": RATIO_GOAL,
    }
    return report | {"meta": meta | {"phase_seconds": seconds}}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="engine_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="a 1,000,000-row backlog",
        seed_help="seed of the INSERT values",
        max_rss=True,
    )


if __name__ == "__main__":
    sys.exit(main())
