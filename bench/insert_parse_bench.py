"""Benchmark of INSERT parsing and conversion (`sqltopic.sql.insert`, `sqltopic.sql.values`).

Statements of 1,000 rows on the meters schema (ts TIMESTAMP, current FLOAT, voltage INT,
phase FLOAT), database precision ms, in four variants:

1. `integer_ts`: timestamps as integer milliseconds, one table;
2. `datetime_ts`: timestamps as quoted date-times ('2018-10-03 14:38:15.000');
3. `now_ts`: `NOW + n a` timestamps (the TMQ examples' form: the value-by-value path);
4. `multi_table`: ten `dNNNN USING meters TAGS (...)` parts of 100 rows each.

For each: parse only, convert only (`to_arrow` of every part), and parse + convert, as
rows per second (the best of several rounds). The goal is parse + convert at
400,000 rows/s or more, headroom for the end-to-end goal of 200,000 rows/s with the WAL
append.

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smoke run of a second or two.
"""

from __future__ import annotations

import platform
import random
import sys
import time
from collections.abc import Callable

import harness
from harness import Report

from sqltopic.sql.insert import Insert, parse_insert
from sqltopic.sql.model import Column
from sqltopic.sql.statements import Pos
from sqltopic.sql.types import ColumnType
from sqltopic.sql.values import to_arrow

# Rows per INSERT statement, as the brief measures sqlglot and DuckDB (~17k rows/s).
ROWS_PER_STATEMENT = 1_000
# Parts of the multi-table variant; ROWS_PER_STATEMENT rows spread over them.
TABLES_PER_STATEMENT = 10
# Goal for parse + convert, in rows per second.
GOAL_ROWS_PER_S = 400_000
# The first timestamp: the data-model doc's first sample row.
START_MS = 1_538_548_685_000
# A fixed clock for NOW, so that rounds convert the same values.
NOW_US = 1_700_000_000_000_000
METERS = (
    Column("ts", ColumnType("TIMESTAMP")),
    Column("current", ColumnType("FLOAT")),
    Column("voltage", ColumnType("INT")),
    Column("phase", ColumnType("FLOAT")),
)


def _timestamp(kind: str, row: int) -> str:
    ms = START_MS + row
    if kind == "integer_ts":
        return str(ms)
    if kind == "now_ts":
        return f"NOW + {row}a"
    seconds, millis = divmod(ms, 1000)
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))
    return f"'{clock}.{millis:03d}'"


def _tuples(kind: str, first: int, count: int, rng: random.Random) -> str:
    return " ".join(
        f"({_timestamp(kind, row)}, {rng.uniform(8, 15):.5f}, {rng.randint(200, 240)}, "
        f"{rng.uniform(0, 1):.5f})"
        for row in range(first, first + count)
    )


def make_statement(kind: str, seed: int) -> str:
    """One INSERT of ROWS_PER_STATEMENT rows in the given variant."""
    rng = random.Random(seed)
    if kind != "multi_table":
        return f"INSERT INTO d1001 VALUES {_tuples(kind, 0, ROWS_PER_STATEMENT, rng)}"
    per_table = ROWS_PER_STATEMENT // TABLES_PER_STATEMENT
    parts = [
        f"d{1001 + t} USING meters TAGS ('California.SanFrancisco', {t}) VALUES "
        f"{_tuples('integer_ts', t * per_table, per_table, rng)}"
        for t in range(TABLES_PER_STATEMENT)
    ]
    return "INSERT INTO " + "\n  ".join(parts)


def parse(sql: str) -> Insert:
    return parse_insert(sql, Pos(1, 1))


def convert(insert: Insert) -> int:
    rows = 0
    for part in insert.parts:
        batch = to_arrow(part.rows, METERS, "ms", NOW_US, table=part.table.name)
        rows += batch.num_rows
    return rows


def best_rate(work: Callable[[], int], seconds: float, rounds: int) -> float:
    """Rows per second of `work` (which returns the rows it did), best of `rounds`."""
    best = 0.0
    for _ in range(rounds):
        rows, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            rows += work()
        best = max(best, rows / elapsed)
    return best


def run_variant(kind: str, seconds: float, rounds: int) -> Report:
    statements = [make_statement(kind, seed) for seed in range(8)]
    parsed = [parse(sql) for sql in statements]
    if any(convert(p) != ROWS_PER_STATEMENT for p in parsed):
        raise RuntimeError(f"{kind}: a statement did not convert to {ROWS_PER_STATEMENT} rows")

    def parse_only() -> int:
        for sql in statements:
            parse(sql)
        return ROWS_PER_STATEMENT * len(statements)

    def convert_only() -> int:
        return sum(convert(p) for p in parsed)

    def both() -> int:
        return sum(convert(parse(sql)) for sql in statements)

    report: Report = {
        "parse_rows_per_s": round(best_rate(parse_only, seconds, rounds)),
        "convert_rows_per_s": round(best_rate(convert_only, seconds, rounds)),
        "parse_convert_rows_per_s": round(best_rate(both, seconds, rounds)),
    }
    report["meets_goal"] = report["parse_convert_rows_per_s"] >= GOAL_ROWS_PER_S
    return report


VARIANTS = ("integer_ts", "datetime_ts", "now_ts", "multi_table")
log = harness.logger("insert_parse_bench")


def main(argv: list[str] | None = None) -> int:
    args = harness.arguments(__doc__, "a smoke run").parse_args(argv)
    seconds, rounds = (0.05, 1) if args.quick else (0.5, 5)
    report: Report = {
        "rows_per_statement": ROWS_PER_STATEMENT,
        "goal_rows_per_s": GOAL_ROWS_PER_S,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    for kind in VARIANTS:
        log(f"running {kind}...")
        report[kind] = run_variant(kind, seconds, rounds)
    harness.emit(report, args.json, _print_table, indent=2)
    return 0


def _print_table(report: Report) -> None:
    print(f"{'variant':<14}{'parse':>14}{'convert':>14}{'parse+convert':>16}  goal met")
    for kind in VARIANTS:
        r = report[kind]
        print(
            f"{kind:<14}{r['parse_rows_per_s']:>14,}{r['convert_rows_per_s']:>14,}"
            f"{r['parse_convert_rows_per_s']:>16,}  {'yes' if r['meets_goal'] else 'NO'}"
        )
    print(f"(rows/s; goal {GOAL_ROWS_PER_S:,} rows/s for parse+convert)")


if __name__ == "__main__":
    sys.exit(main())
