"""The cluster's costs measured so far (issue 16; docs/cluster.md): DDL through an mnode
with 1 and 2 dnodes against the all-in-one server, and how long a SIGKILLed dnode takes
to show offline and, restarted, to serve its vgroups again.

Every process runs on this machine's cores (loopback), so this measures overhead, not
scaling. The issue's ingest, consume and latency figures need writes and polls through
the dnodes, which are not built yet: the report says so under `not_measured`.

    python bench/cluster_bench.py [--json] [--quick]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import harness
from harness import Report

from sqltopic.cli.spawn import ServerChild
from sqltopic.client import Connection, connect

ROOT_PASSWORD = "cluster-bench-root-1"
SECRET = "cluster-bench-secret-0123456789"
VGROUPS = 4
# A condition polled this often while the figure is the time until it holds: a tenth of
# the dnode's heartbeat period, so it adds at most that much to the figure.
POLL_S = 0.1
# A dnode that is not offline (or ready again) by then is broken, not slow.
DEADLINE_S = 60.0


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    statements: int  # CREATE TABLE statements per round and side
    rounds: int  # rounds per side, the sides alternating
    kills: int  # SIGKILL-and-restart cycles of a dnode


FULL = Sizes(statements=500, rounds=3, kills=3)
QUICK = Sizes(statements=40, rounds=1, kills=1)

log = harness.logger("cluster_bench")


# --- the processes -----------------------------------------------------------------------


@dataclass
class Cluster:
    mnode: ServerChild
    dnodes: list[ServerChild]
    root: Path


def _env() -> dict[str, str]:
    return {**os.environ, "SQLTOPIC_CLUSTER_SECRET": SECRET}


def start_dnode(root: Path, name: str, mnode: str, port: int = 0) -> ServerChild:
    dnode = ServerChild(root / name, port, ROOT_PASSWORD, ("--mnode", mnode), "dnode", _env())
    dnode.start()
    return dnode


@contextlib.contextmanager
def cluster(root: Path, dnodes: int) -> Iterator[Cluster]:
    """An mnode and `dnodes` admitted dnodes, all ready."""
    with ServerChild(root / "mnode", 0, ROOT_PASSWORD, (), "mnode", _env()) as mnode:
        mnode.start()
        made = Cluster(mnode, [], root)
        try:
            for i in range(dnodes):
                made.dnodes.append(start_dnode(root, f"dnode{i + 1}", mnode.address))
            with _connect(mnode.address) as conn:
                for dnode in made.dnodes:
                    conn.execute(f"CREATE DNODE '{dnode.address}'")
                _until(lambda: {r[2] for r in conn.execute("SHOW DNODES").rows} == {"ready"})
            yield made
        finally:
            for dnode in made.dnodes:
                dnode.stop()


def _connect(address: str) -> contextlib.AbstractContextManager[Connection]:
    return connect(address, password=ROOT_PASSWORD)


def _until(condition: Callable[[], bool]) -> float:
    """Seconds until `condition` holds (looked at every POLL_S), or RuntimeError."""
    began = time.perf_counter()
    while not condition():
        if time.perf_counter() - began > DEADLINE_S:
            raise RuntimeError(f"not within {DEADLINE_S:.0f} s")
        time.sleep(POLL_S)
    return time.perf_counter() - began


# --- DDL ----------------------------------------------------------------------------------


def ddl_round(address: str, db: str, statements: int) -> float:
    """CREATE TABLE statements per second, one after another on one connection."""
    with _connect(address) as conn:
        conn.execute(
            f"CREATE DATABASE {db} VGROUPS {VGROUPS};"
            f"CREATE STABLE {db}.meters (ts TIMESTAMP, v INT) TAGS (t INT)"
        )
        began = time.perf_counter()
        for i in range(statements):
            conn.execute(f"CREATE TABLE {db}.d{i} USING {db}.meters TAGS ({i})")
        return statements / (time.perf_counter() - began)


def run_ddl(root: Path, sizes: Sizes) -> Report:
    rates: dict[str, list[float]] = {"all_in_one": [], "cluster_1": [], "cluster_2": []}
    for r in range(sizes.rounds):
        with ServerChild(root / f"server{r}", 0, ROOT_PASSWORD) as server:
            server.start()
            rates["all_in_one"].append(ddl_round(server.address, "a", sizes.statements))
        for dnodes in (1, 2):
            with cluster(root / f"cluster{dnodes}-{r}", dnodes) as made:
                rate = ddl_round(made.mnode.address, "c", sizes.statements)
                rates[f"cluster_{dnodes}"].append(rate)
        log(f"DDL round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rates.items()))
    report: Report = {f"ddl_per_s_{k}": harness.median_rate(v) for k, v in rates.items()}
    base = report["ddl_per_s_all_in_one"]
    for dnodes in (1, 2):
        rate = report[f"ddl_per_s_cluster_{dnodes}"]
        report[f"ratio_ddl_cluster_{dnodes}"] = round(rate / base, 3)
    return report


# --- a dnode's failure ----------------------------------------------------------------------


def run_failure(root: Path, sizes: Sizes) -> Report:
    """SIGKILL a dnode hosting half the vgroups: until they show offline; restart it on
    its directory and port: until they are ready again (SHOW VGROUPS)."""
    offline: list[float] = []
    ready: list[float] = []
    with cluster(root / "failure", 2) as made, _connect(made.mnode.address) as conn:
        conn.execute(f"CREATE DATABASE f VGROUPS {VGROUPS}")
        victim = made.dnodes[1]

        def statuses() -> set[str]:
            rows = conn.execute("SHOW f.VGROUPS").rows
            return {str(r[4]) for r in rows if r[3] == victim.address}

        _until(lambda: statuses() == {"ready"})
        for _ in range(sizes.kills):
            victim.kill()
            offline.append(_until(lambda: statuses() == {"offline"}))
            began = time.perf_counter()
            port = int(victim.address.rsplit(":", 1)[1])  # the same endpoint as before
            victim = start_dnode(made.root, "dnode2", made.mnode.address, port)
            made.dnodes[1] = victim
            _until(lambda: statuses() == {"ready"})
            ready.append(time.perf_counter() - began)
            log(f"offline after {offline[-1]:.2f} s, ready {ready[-1]:.2f} s after the restart")
    return {
        "dnode_offline_s": round(statistics.median(offline), 2),
        "dnode_restart_ready_s": round(statistics.median(ready), 2),
    }


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    del seed  # nothing random here
    seconds: dict[str, float] = {}
    report: Report = {}
    with harness.phase(log, "ddl", seconds):
        report |= run_ddl(root, sizes)
    with harness.phase(log, "failure", seconds):
        report |= run_failure(root, sizes)
    report["not_measured"] = (
        "ingest, consume, produce-to-consume latency and restart-to-first-delivery: writes "
        "and polls do not go through the dnodes yet (docs/cluster.md, 'What works today')"
    )
    report["meta"] = machine_meta(root, sizes) | {"phase_seconds": seconds}
    return report


def machine_meta(root: Path, sizes: Sizes) -> Report:
    status = harness.command(["git", "status", "--porcelain", "../server", "../sql"])
    return harness.machine_meta(
        root,
        libraries={"grpcio": grpc.__version__},
        status={"server_git_status": "; ".join(s.strip() for s in status.splitlines()) or "clean"},
        settings={"vgroups": VGROUPS, "poll_s": POLL_S},
        sizes=sizes,
        quick=sizes == QUICK,
    )


if __name__ == "__main__":
    sys.exit(
        harness.main(
            None,
            name="cluster_bench",
            doc=__doc__,
            run=run,
            full=FULL,
            quick=QUICK,
            quick_help="a smoke run (~1 min)",
            seed_help="unused",
        )
    )
