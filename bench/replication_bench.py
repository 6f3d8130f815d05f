"""What replicating a vgroup's WAL to three replicas would cost (docs/replication.md).

Five kinds of sequential write of one 1,000-row data entry, interleaved in rounds:

1. `local`: the leader's own WAL append at WAL_LEVEL 2 (write + fsync): the baseline;
2. `rtt`: a loopback gRPC unary call to a follower process carrying the entry's bytes,
   answered at once (no disk);
3. `remote`: the same call, answered once the follower appended + fsynced the entry
   into a scratch WAL of its own (what one follower costs, without the leader's fsync);
4. `quorum`: the leader appends + fsyncs locally while sending the entry to 2 follower
   processes, each of which appends + fsyncs it into its own WAL at the same version and
   answers; acknowledged once 2 of the 3 replicas are durable (a Raft majority);
5. `all3`: the same, acknowledged once all 3 are durable (Kafka's acks=all, full ISR).

At the end the followers' WALs must hold exactly the leader's records (same versions,
same header and body bytes), and a follower must refuse an entry from an older epoch.
No .proto is involved: the followers serve raw bytes through a generic handler.

`--json` prints one JSON object on stdout (progress goes to stderr), otherwise a table;
`--quick` is a smoke run of a few seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import SimpleQueue
from typing import TYPE_CHECKING

import grpc
import harness
import pyarrow as pa
from harness import Report

from sqltopic.wal import EntryType, Wal, WalEntry, WalOptions, data_entry, open_readonly

# One entry = one 1,000-row write of the meters super table, the unit of the ingest
# benchmarks (docs/performance.md §5).
ROWS_PER_ENTRY = 1000
# Three replicas per vgroup (issue 16); a majority of them acknowledges a write.
REPLICAS = 3
QUORUM = REPLICAS // 2 + 1
SERVICE = "sqltopic.bench.Replica"
APPEND_METHOD = f"/{SERVICE}/Append"
ECHO_METHOD = f"/{SERVICE}/Echo"
SCRATCH_METHOD = f"/{SERVICE}/Scratch"
# A replication message: epoch, previous version, version, ingest_us, entry type; then
# the body. The follower writes the leader's ingest_us, so its records are the same bytes.
MESSAGE_HEADER = struct.Struct("<qqqqB")
# An answer: the follower's epoch and its last durable version.
ANSWER = struct.Struct("<qq")
# Command-line word that makes this script a follower process instead of the benchmark.
FOLLOWER_MODE = "--follower"
# The first line a follower prints: this word, then the port it bound (port 0 asked).
READY_WORD = "ready"
# Deadline of every call: far above a slow fsync on this VM (tens of ms), so a call that
# times out means a stuck follower, not a slow disk.
CALL_TIMEOUT_S = 30.0
# Unmeasured writes at start: they create segments and warm the channels and the code.
WARMUP_WRITES = 20
# The leader's epoch; the fencing check sends one below it, which must be refused.
EPOCH = 1

# The kinds of write, in the order of the first round (the order rotates every round).
KINDS = ("local", "rtt", "remote", "quorum", "all3")


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much work each phase does."""

    rounds: int  # rounds; each runs every kind once, the order rotated by one each round
    writes: int  # sequential writes of each kind per round


FULL = Sizes(rounds=5, writes=400)  # 2,000 samples a kind; about 30 s on this VM
QUICK = Sizes(rounds=2, writes=40)

NOTES = {
    "method": (
        "Kinds interleaved in rounds, order rotated each round; latencies over all samples "
        "of a kind; writes/s = writes / wall time of the kind's phases."
    ),
    "wal_level": "2 everywhere: an acknowledgement means fsynced on every replica counted.",
    "quorum_note": (
        "The leader's own append runs in parallel with the two sends (Raft allows the "
        "leader to count itself once durable, like any replica)."
    ),
}

log = harness.logger("replication_bench")
if TYPE_CHECKING:  # grpc's classes are generic only in its type stubs
    # A unary call of raw bytes (no serializers: a generic handler, no .proto).
    Call = grpc.UnaryUnaryMultiCallable[bytes, bytes]


def meters_batch(rows: int) -> pa.RecordBatch:
    """`rows` rows of the meters schema (ts, current, voltage, phase)."""
    ts = pa.array(range(1_700_000_000_000, 1_700_000_000_000 + rows), pa.int64())
    return pa.RecordBatch.from_pydict(
        {
            "ts": ts.cast(pa.timestamp("ms")),
            "current": pa.array([10.3] * rows, pa.float32()),
            "voltage": pa.array([219 + i % 10 for i in range(rows)], pa.int32()),
            "phase": pa.array([0.31] * rows, pa.float32()),
        }
    )


def now_us() -> int:
    return time.time_ns() // 1000


class IngestClock:
    """A WAL clock that returns the ingest time of the entry being appended, so that a
    follower's record header carries the leader's `ingest_us` byte for byte."""

    def __init__(self) -> None:
        self.us = now_us()

    def __call__(self) -> int:
        return self.us


# --- the follower process ---------------------------------------------------------------


class Follower:
    """A replica's WAL behind three methods: Append (with the epoch and log-matching
    checks of docs/replication.md), Echo (the bare round trip) and Scratch (an append
    without checks into a second WAL, so that the replica's own WAL stays the leader's)."""

    def __init__(self, directory: Path) -> None:
        self.clock = IngestClock()
        self.wal = Wal.open(directory, WalOptions(level=2), clock=self.clock, background=False)
        scratch = directory.with_name(f"{directory.name}-scratch")
        self.scratch = Wal.open(scratch, WalOptions(level=2), background=False)
        self.epoch = 0
        self.lock = threading.Lock()

    def append(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        epoch, prev, version, ingest_us, entry_type = MESSAGE_HEADER.unpack_from(request)
        with self.lock:
            if epoch < self.epoch:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"epoch {epoch} < {self.epoch}")
            if prev != self.wal.last_version:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"last {self.wal.last_version}")
            self.epoch, self.clock.us = epoch, ingest_us
            body = memoryview(request)[MESSAGE_HEADER.size :]
            self.wal.append([WalEntry(EntryType(entry_type), body, version)])
            return ANSWER.pack(self.epoch, version)

    def echo(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return ANSWER.pack(self.epoch, len(request))

    def scratch_append(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        body = memoryview(request)[MESSAGE_HEADER.size :]
        version = self.scratch.append([WalEntry(EntryType.DATA, body)])[0]
        return ANSWER.pack(self.epoch, version)


def serve_follower(directory: Path) -> int:
    """Serve a follower on a free loopback port until stdin closes, then close the WAL."""
    follower = Follower(directory)
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Append": grpc.unary_unary_rpc_method_handler(follower.append),
        "Echo": grpc.unary_unary_rpc_method_handler(follower.echo),
        "Scratch": grpc.unary_unary_rpc_method_handler(follower.scratch_append),
    }
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"{READY_WORD} {port}", flush=True)
    sys.stdin.read()  # the leader closes our stdin when it is done
    server.stop(grace=None).wait()
    follower.wal.close()
    follower.scratch.close()
    return 0


@contextlib.contextmanager
def follower_process(directory: Path) -> Iterator[grpc.Channel]:
    """A follower process over `directory`, and a channel to it; stopped at the end."""
    args = [sys.executable, __file__, FOLLOWER_MODE, str(directory)]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        word, _, port = proc.stdout.readline().partition(" ")
        if word != READY_WORD:
            raise RuntimeError(f"follower over {directory} did not start")
        with grpc.insecure_channel(f"127.0.0.1:{port.strip()}") as channel:
            yield channel
        proc.stdin.close()
        if proc.wait(timeout=CALL_TIMEOUT_S) != 0:
            raise RuntimeError(f"follower over {directory} exited with {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- the leader ------------------------------------------------------------------------


class Pending:
    """One write in flight: done once `need` replicas said it is durable."""

    def __init__(self, need: int) -> None:
        self.need = need
        self.acks = 0
        self.lock = threading.Lock()
        self.quorum = threading.Event()
        self.all = threading.Event()
        self.leader_rank = 0  # 1 + how many replicas were durable before the leader

    def ack(self, leader: bool) -> None:
        with self.lock:
            self.acks += 1
            if leader:
                self.leader_rank = self.acks
            if self.acks >= self.need:
                self.quorum.set()
            if self.acks == REPLICAS:
                self.all.set()


class Replicator:
    """The leader of one vgroup: one sender thread per replica (itself included), each
    taking the writes in version order from its own queue, as a Raft leader's per-follower
    pipeline does."""

    def __init__(self, wal: Wal, clock: IngestClock, channels: list[grpc.Channel]) -> None:
        self.wal, self.clock = wal, clock
        self.stubs: list[Call] = [c.unary_unary(APPEND_METHOD) for c in channels]
        self.queues: list[SimpleQueue[tuple[bytes, Pending] | None]] = [
            SimpleQueue() for _ in range(REPLICAS)
        ]
        self.threads = [threading.Thread(target=self.leader_loop, daemon=True)]
        self.threads += [
            threading.Thread(target=self.follower_loop, args=(i,), daemon=True)
            for i in range(1, REPLICAS)
        ]
        self.failure: BaseException | None = None
        self.next_version = wal.next_version  # the leader assigns the versions
        self.sent: list[Pending] = []  # every write, for the drain and the leader's rank
        for thread in self.threads:
            thread.start()

    def write(self, body: bytes, need: int) -> Pending:
        """Hand the next version to every replica's queue; wait on the result's events."""
        version, self.next_version = self.next_version, self.next_version + 1
        header = MESSAGE_HEADER.pack(EPOCH, version - 1, version, now_us(), EntryType.DATA)
        pending = Pending(need)
        for queue in self.queues:
            queue.put((header + body, pending))
        self.sent.append(pending)
        return pending

    def leader_loop(self) -> None:
        self.run_queue(0, self.append_locally)

    def follower_loop(self, index: int) -> None:
        stub = self.stubs[index - 1]
        self.run_queue(index, lambda message: stub(message, timeout=CALL_TIMEOUT_S))

    def append_locally(self, message: bytes) -> bytes:
        _, _, version, ingest_us, entry_type = MESSAGE_HEADER.unpack_from(message)
        self.clock.us = ingest_us
        body = memoryview(message)[MESSAGE_HEADER.size :]
        self.wal.append([WalEntry(EntryType(entry_type), body, version)])
        return b""

    def run_queue(self, index: int, send: Callable[[bytes], object]) -> None:
        queue = self.queues[index]
        while (item := queue.get()) is not None:
            message, pending = item
            try:
                send(message)
            except BaseException as exc:  # reported by the writer, which then stops
                self.failure = exc
                pending.quorum.set()
                pending.all.set()
                return
            pending.ack(leader=index == 0)

    def close(self) -> None:
        for queue in self.queues:
            queue.put(None)
        for thread in self.threads:
            thread.join()


# --- the measurements ------------------------------------------------------------------


@dataclass(slots=True)
class Samples:
    """Latencies (µs) and wall time of one kind of write, over all its rounds."""

    latencies_us: list[float]
    seconds: float = 0.0
    round_p50s: list[float] = dataclasses.field(default_factory=list)

    def percentile(self, p: int) -> float:
        return statistics.quantiles(self.latencies_us, n=100, method="inclusive")[p - 1]


def timed_phase(samples: Samples, writes: int, one: Callable[[], object]) -> None:
    """`writes` sequential calls of `one`, each timed into `samples`."""
    first = len(samples.latencies_us)
    began = time.perf_counter()
    for _ in range(writes):
        start = time.perf_counter_ns()
        one()
        samples.latencies_us.append((time.perf_counter_ns() - start) / 1000)
    samples.seconds += time.perf_counter() - began
    samples.round_p50s.append(round(statistics.median(samples.latencies_us[first:]), 1))


def replicated_write(replicator: Replicator, body: bytes, need: int) -> Callable[[], object]:
    """One write acknowledged by `need` replicas; the others finish in the background."""

    def one() -> None:
        pending = replicator.write(body, need)
        (pending.all if need == REPLICAS else pending.quorum).wait()
        if replicator.failure is not None:
            raise RuntimeError("a replica failed") from replicator.failure

    return one


def drain(replicator: Replicator) -> None:
    """Wait, untimed, until every replica holds every write sent so far."""
    if replicator.sent and not replicator.sent[-1].all.wait(CALL_TIMEOUT_S):
        raise RuntimeError("a replica did not catch up")
    if replicator.failure is not None:
        raise RuntimeError("a replica failed") from replicator.failure


def measure(
    root: Path, channels: list[grpc.Channel], sizes: Sizes
) -> tuple[dict[str, Samples], Report]:
    """Every kind of write, `sizes.rounds` rounds of `sizes.writes` each; the samples and
    facts about the run."""
    entry = data_entry(meters_batch(ROWS_PER_ENTRY))
    body = bytes(memoryview(entry.body))
    echo: Call = channels[0].unary_unary(ECHO_METHOD)
    scratch: Call = channels[0].unary_unary(SCRATCH_METHOD)
    message = MESSAGE_HEADER.pack(EPOCH, 0, 1, now_us(), EntryType.DATA) + body
    leader_clock = IngestClock()
    samples = {kind: Samples([]) for kind in KINDS}
    with (
        Wal.open(root / "local", WalOptions(level=2), background=False) as local,
        Wal.open(root / "leader", WalOptions(level=2), clock=leader_clock, background=False) as lw,
    ):
        replicator = Replicator(lw, leader_clock, channels)
        try:
            phases: dict[str, Callable[[], object]] = {
                "local": lambda: local.append([entry]),
                "rtt": lambda: echo(message, timeout=CALL_TIMEOUT_S),
                "remote": lambda: scratch(message, timeout=CALL_TIMEOUT_S),
                "quorum": replicated_write(replicator, body, QUORUM),
                "all3": replicated_write(replicator, body, REPLICAS),
            }
            for one in phases.values():  # unmeasured warm-up
                timed_phase(Samples([]), WARMUP_WRITES, one)
            quorum_first = len(replicator.sent)
            for n in range(sizes.rounds):
                for kind in KINDS[n % len(KINDS) :] + KINDS[: n % len(KINDS)]:
                    first = len(replicator.sent)
                    timed_phase(samples[kind], sizes.writes, phases[kind])
                    drain(replicator)
                    if kind == "quorum":
                        quorum_first = first
                log(
                    f"round {n}: "
                    + ", ".join(f"{k} {samples[k].round_p50s[-1]:.0f} us" for k in KINDS)
                )
            ranks = [
                p.leader_rank for p in replicator.sent[quorum_first : quorum_first + sizes.writes]
            ]
        finally:
            replicator.close()
    facts = {
        "entry_body_bytes": len(body),
        "message_bytes": len(message),
        "replicated_writes": len(replicator.sent),
        "quorum_leader_last_share": round(ranks.count(REPLICAS) / max(len(ranks), 1), 3),
    }
    return samples, facts


def stale_epoch_refused(channel: grpc.Channel) -> bool:
    """Whether a follower refuses an entry from an epoch older than the one it follows."""
    stale = MESSAGE_HEADER.pack(EPOCH - 1, 0, 1, now_us(), EntryType.DATA)
    append: Call = channel.unary_unary(APPEND_METHOD)
    try:
        append(stale, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        return bool(exc.code() == grpc.StatusCode.FAILED_PRECONDITION)
    return False


def wal_contents(directory: Path) -> tuple[int, int, str]:
    """Entries, last version and a digest of the records of a closed WAL: its .log files
    joined in version order, which depends only on the records (no file header; records
    never span files), not on where segments begin."""
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.log")):
        digest.update(path.read_bytes())
    reader = open_readonly(directory)
    entries = sum(len(batch) for batch in reader.batches(reader.first_version))
    return entries, reader.last_version, digest.hexdigest()


def figures(samples: dict[str, Samples]) -> Report:
    """Latency percentiles per kind, writes/s and the ratios against `local`."""
    report: Report = {}
    for kind, s in samples.items():
        report[f"{kind}_us_p50"] = round(s.percentile(50), 1)
        report[f"{kind}_us_p99"] = round(s.percentile(99), 1)
        report[f"{kind}_writes_s"] = round(len(s.latencies_us) / s.seconds)
    report["quorum_rows_s"] = report["quorum_writes_s"] * ROWS_PER_ENTRY
    for kind in ("remote", "quorum", "all3"):
        for p in ("p50", "p99"):
            report[f"{kind}_vs_local_{p}"] = round(
                report[f"{kind}_us_{p}"] / report[f"local_us_{p}"], 2
            )
        report[f"{kind}_vs_local_writes_s"] = round(
            report[f"{kind}_writes_s"] / report["local_writes_s"], 3
        )
    return report


def machine_meta(root: Path, sizes: Sizes) -> Report:
    return harness.machine_meta(
        root,
        libraries={"grpcio": grpc.__version__, "pyarrow": pa.__version__},
        status={
            "wal_git_status": harness.command(["git", "status", "--porcelain", "../wal"]) or "clean"
        },
        settings={"rows_per_entry": ROWS_PER_ENTRY, "replicas": REPLICAS, "quorum": QUORUM},
        sizes=sizes,
        quick=sizes == QUICK,
    )


def run(root: Path, sizes: Sizes, seed: int) -> Report:
    del seed  # nothing here is random
    followers = [root / f"follower{i}" for i in range(1, REPLICAS)]
    with contextlib.ExitStack() as stack:
        channels = [stack.enter_context(follower_process(d)) for d in followers]
        samples, facts = measure(root, channels, sizes)
        refused = stale_epoch_refused(channels[0])
    leader = wal_contents(root / "leader")  # the followers have exited and closed theirs
    copies = [wal_contents(d) for d in followers]
    identical = all(copy == leader for copy in copies)
    log(f"leader {leader[0]} entries, followers identical {identical}, stale refused {refused}")
    meta = machine_meta(root, sizes) | NOTES | facts
    meta |= {
        "leader_entries": leader[0],
        "follower_entries": [copy[0] for copy in copies],
        "follower_last_versions": [copy[1] for copy in copies],
        "stale_epoch_refused": refused,
        "round_p50s_us": {kind: s.round_p50s for kind, s in samples.items()},
    }
    return figures(samples) | {"followers_identical": identical, "meta": meta}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == [FOLLOWER_MODE]:
        return serve_follower(Path(args[1]))
    return harness.main(
        argv,
        name="replication_bench",
        doc=__doc__,
        run=run,
        full=FULL,
        quick=QUICK,
        quick_help="a smaller, few-second run",
        seed_help="unused: nothing is random",
    )


if __name__ == "__main__":
    sys.exit(main())
