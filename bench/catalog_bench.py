"""Benchmark of what catalog changes cost the shared pass with many topics subscribed.

In process (an `Engine` on a temp dir, no network): a database of VGROUPS 4 and 1,000
child tables, N device-set topics (fanout_bench's: each `WHERE tbname IN` ten of the
devices), and writes of 1,000 rows over 10 children, each followed by the shared pass of
every vgroup (`read_topics` for every topic waiting, what the vnode does when a write
wakes its followers). Reported per N, in milliseconds of the pass:

* `first_pass_ms_n<N>`: the pass of the first write after the N CREATE TOPICs;
* `new_child_pass_ms_n<N>`: the pass of the first write after a CREATE TABLE of a new
  child (what a device appearing costs every topic; the median of several);
* `steady_pass_ms_n<N>`: the median pass with no catalog change, the baseline;
* `ratio_first_pass_n<N>`, `ratio_new_child_pass_n<N>`: the two over the baseline;
* `create_topic_ms_n<N>`: the mean CREATE TOPIC.

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smoke run of a few seconds.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import fanout_bench as fan
import harness
from harness import Report

from sqltopic.server.core.engine import Engine
from sqltopic.server.core.topic_reader import waiting_of


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    topics: tuple[int, ...]  # the N of each phase
    steady_writes: int  # writes whose passes make the baseline
    new_children: int  # CREATE TABLEs, each followed by a write and its pass


FULL = Sizes(topics=(100, 1_000), steady_writes=40, new_children=5)
QUICK = Sizes(topics=(20,), steady_writes=5, new_children=2)

log = harness.logger("catalog_bench")


class Passes:
    """One engine with N topics: writes, and the shared pass after each, timed."""

    def __init__(self, root: Path, topics: int, seed: int) -> None:
        self.engine = Engine(root)
        self.engine.execute(f"CREATE DATABASE {fan.DB} VGROUPS {fan.VGROUPS} PRECISION 'us'")
        self.engine.execute(
            f"CREATE STABLE {fan.DB}.meters (ts TIMESTAMP, current FLOAT, voltage INT, "
            "phase FLOAT) TAGS (groupid INT, location VARCHAR(24))"
        )
        self.engine.execute(
            "; ".join(
                f"CREATE TABLE {fan.DB}.d{i} USING {fan.DB}.meters TAGS ({i % 10}, 'x')"
                for i in range(fan.DEVICES)
            )
        )
        specs = fan.topic_specs(topics, random.Random(seed))
        began = time.perf_counter()
        for spec in specs:
            self.engine.execute(spec.sql())
        self.create_topic_ms = (time.perf_counter() - began) * 1e3 / topics
        self.waiting = waiting_of([spec.name for spec in specs])
        self.vgroups = sorted(self.engine.state.catalog.database(fan.DB).vgroups)
        self.writes = 0

    def write_and_pass(self) -> float:
        """A write of the next children, then every vgroup's pass; the pass's ms."""
        state = self.engine.state
        starts = {v: state.vnode(v).wal.next_version for v in self.vgroups}
        rows = fan.batch(fan.write_children(self.writes), 1_000_000 + self.writes * 1_000)
        self.engine.write(f"{fan.DB}.meters", rows)
        self.writes += 1
        began = time.perf_counter()
        for vgroup in self.vgroups:
            self.engine.read_topics(self.waiting, vgroup, starts[vgroup])
        return (time.perf_counter() - began) * 1e3

    def new_child(self, k: int) -> None:
        self.engine.execute(f"CREATE TABLE {fan.DB}.new{k} USING {fan.DB}.meters TAGS (1, 'y')")

    def close(self) -> None:
        self.engine.close()


def run_topics(root: Path, topics: int, sizes: Sizes, seed: int) -> Report:
    passes = Passes(root / f"n{topics}", topics, seed)
    try:
        first = passes.write_and_pass()
        passes.write_and_pass()  # the first write's own consequences settle
        steady = statistics.median(passes.write_and_pass() for _ in range(sizes.steady_writes))
        after_child: list[float] = []
        for k in range(sizes.new_children):
            passes.new_child(k)
            after_child.append(passes.write_and_pass())
            passes.write_and_pass()
        new_child = statistics.median(after_child)
        create_ms = passes.create_topic_ms
    finally:
        passes.close()
    log(f"n{topics}: first pass {first:.1f} ms, after a new child {new_child:.1f} ms, "
        f"steady {steady:.2f} ms")  # fmt: skip
    return {
        f"create_topic_ms_n{topics}": round(create_ms, 2),
        f"first_pass_ms_n{topics}": round(first, 2),
        f"new_child_pass_ms_n{topics}": round(new_child, 2),
        f"steady_pass_ms_n{topics}": round(steady, 3),
        f"ratio_first_pass_n{topics}": round(first / steady, 1),
        f"ratio_new_child_pass_n{topics}": round(new_child / steady, 1),
    }


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    report: Report = {}
    for topics in sizes.topics:
        report |= run_topics(root, topics, sizes, seed)
    meta = harness.machine_meta(
        root,
        libraries={},
        status={"git_status": harness.command(["git", "status", "--porcelain"]) or "clean"},
        settings={
            "devices": fan.DEVICES, "vgroups": fan.VGROUPS, "rows_per_write": fan.ROWS_PER_WRITE,
            "children_per_write": fan.CHILDREN_PER_WRITE,
            "devices_per_topic": fan.DEVICES_PER_TOPIC,
        },
        sizes=sizes,
        quick=sizes == QUICK,
    )  # fmt: skip
    return report | {"meta": meta}


def main(argv: list[str] | None = None) -> int:
    return harness.main(
        argv,
        name="catalog_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="20 topics, a few writes",
        seed_help="seed of the topics' device sets",
    )


if __name__ == "__main__":
    sys.exit(main())
