"""The Redis Streams peer of bench/server_bench.py: a `redis-server` process on loopback,
a minimal RESP client over one socket (pipelined commands; no dependency on a Redis
library), and the peer's three measurements: XADD ingest, XREADGROUP consume with the
filter applied client-side (Redis cannot filter a stream), and produce-to-consume
latency through a blocked XREAD.

The client is as fast as Python allows, so that the ratios do not flatter sqltopic:
commands are RESP bytes built column-wise by Arrow before the clock starts, and a read
reply is split once and decoded column-wise (every entry of these streams has the same
fields, which the decoder checks).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import harness
import pyarrow as pa
import pyarrow.compute as pc

REDIS_SERVER = "redis-server"
# Redis starts in milliseconds; the deadline only covers a loaded CI machine.
START_DEADLINE_S = 10.0
# SHUTDOWN NOSAVE returns at once; an AOF fsync in flight may take a moment.
STOP_DEADLINE_S = 10.0
# One pipelined batch or one large read reply; a hung server still fails the bench.
SOCKET_TIMEOUT_S = 120.0
# Bytes per recv: a 10,000-entry read reply is ~2 MB.
RECV_BYTES = 1 << 20
# Entries per XREADGROUP call while draining a backlog (one reply of a few MB).
READ_COUNT = 10_000
# How long one blocked XREAD waits before it is issued again (latency run).
BLOCK_MS = 1_000
# A producer's warm-up entries carry this send time and are not samples.
WARMUP_SENT_NS = -1

Fsync = Literal["always", "everysec", "no"]
Reply = bytes | int | list["Reply"] | None


class RedisError(RuntimeError):
    """An error reply from Redis, or a reply the decoder did not expect."""


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_version() -> str:
    """`redis-server`'s version, or "unknown"."""
    out = harness.command([REDIS_SERVER, "--version"])
    return next((w[2:] for w in out.split() if w.startswith("v=")), out)


@contextlib.contextmanager
def redis_server(directory: Path, fsync: Fsync) -> Iterator[int]:
    """A `redis-server` on a free loopback port with its AOF in `directory` (appendfsync
    `fsync`, no RDB snapshots); yields the port and shuts the server down at the end."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", fsync, "--dir", str(directory)]
    args += ["--daemonize", "no", "--logfile", str(directory / "redis.log")]
    args += ["--auto-aof-rewrite-percentage", "0"]  # no background rewrite mid-measurement
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        _wait_ready(port, proc)
        yield port
    finally:
        with contextlib.suppress(OSError), Resp(port) as client:
            client.send(encode("SHUTDOWN", "NOSAVE"))
        try:
            proc.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        if proc.poll() is not None:
            raise RedisError(f"{REDIS_SERVER} exited with status {proc.returncode}")
        try:
            with Resp(port) as client:
                if client.call("PING") == b"PONG":
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RedisError(f"{REDIS_SERVER} on port {port} not ready in {START_DEADLINE_S} s")
        time.sleep(0.02)


def encode(*args: str | bytes | int) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Resp:
    """One connection to Redis: `call` for one command, `send` + `expect_ids` for a
    pipelined batch of XADDs, `stream_reply` for a large read reply. An error reply
    raises RedisError; the connection is not to be used after that."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.lines = 0  # b"\n" in buf: every RESP line ends with one

    def __enter__(self) -> Resp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def call(self, *args: str | bytes | int) -> Reply:
        self.send(encode(*args))
        return self.reply()

    def _fill(self, lines: int) -> None:
        """Receive until the buffer holds at least `lines` lines."""
        while self.lines < lines:
            data = self.sock.recv(RECV_BYTES)
            if not data:
                raise RedisError("connection closed by redis-server")
            self.buf += data
            self.lines += data.count(b"\n")

    def _take(self) -> bytes:
        """The buffer's content, emptied."""
        data = bytes(self.buf)
        self.buf.clear()
        self.lines = 0
        return data

    def reply(self) -> Reply:
        """One reply of any shape (for small replies: it parses line by line)."""
        while True:
            data = bytes(self.buf)
            if data.startswith(b"-") and b"\r\n" in data:  # an error: consume it, raise
                self._take()
                raise RedisError(data[1:].split(b"\r\n", 1)[0].decode())
            try:
                value, end = _parse(data, 0)
            except IndexError:  # incomplete: receive more
                self._fill(self.lines + 1)
                continue
            del self.buf[:end]
            self.lines -= data[:end].count(b"\n")
            return value

    def expect_ids(self, count: int) -> None:
        """Consume the replies of `count` pipelined XADDs: one bulk-string ID each, i.e.
        two lines; an error reply is one line starting with '-'."""
        while self.lines < 2 * count:
            if self.buf.startswith(b"-") or b"\n-" in self.buf:
                break
            self._fill(self.lines + 1)
        lines = self.lines
        data = self._take()
        if data.startswith(b"-") or b"\n-" in data:
            start = 0 if data.startswith(b"-") else data.index(b"\n-") + 1
            raise RedisError(data[start + 1 :].split(b"\r\n", 1)[0].decode())
        if lines != 2 * count:
            raise RedisError(f"expected {count} XADD replies, got {lines} lines")

    def stream_reply(self, fields: int) -> list[bytes] | None:
        """The lines of a one-stream XREAD/XREADGROUP reply whose entries all have `fields`
        fields, from the first entry on (4 + 4 * fields lines each), or None for a null
        reply (nothing new)."""
        self._fill(1)
        if self.buf.startswith(b"-"):
            self.reply()  # raises the error it carries
        if self.buf.startswith(b"*-1\r\n"):
            del self.buf[:5]
            self.lines -= 1
            return None
        self._fill(5)  # *1, *2, $len, stream name, *entries
        head = bytes(self.buf[: _nth_newline(self.buf, 5)])
        entries = int(head.split(b"\r\n")[4][1:])
        self._fill(5 + entries * (4 + 4 * fields))
        lines = self._take().split(b"\r\n")
        if len(lines) != 6 + entries * (4 + 4 * fields):
            raise RedisError("a stream reply does not have the expected shape")
        return lines[5:-1]


def _nth_newline(buf: bytearray, n: int) -> int:
    """Index just after the `n`-th newline of `buf`."""
    at = -1
    for _ in range(n):
        at = buf.index(b"\n", at + 1)
    return at + 1


def _parse(data: bytes, at: int) -> tuple[Reply, int]:
    """(reply, index after it) of the RESP2 reply at `data[at:]`; IndexError when the
    data ends first."""
    end = data.find(b"\r\n", at)
    if end < 0:
        raise IndexError(at)
    kind, body = data[at : at + 1], data[at + 1 : end]
    if kind in (b"+", b"-"):
        if kind == b"-":
            raise RedisError(body.decode())
        return body, end + 2
    if kind == b":":
        return int(body), end + 2
    size = int(body)
    if size < 0:
        return None, end + 2
    if kind == b"$":
        if len(data) < end + 4 + size:
            raise IndexError(at)
        return data[end + 2 : end + 2 + size], end + 4 + size
    items: list[Reply] = []
    at = end + 2
    for _ in range(size):
        item, at = _parse(data, at)
        items.append(item)
    return items, at


# --- commands built column-wise ----------------------------------------------------------


def xadd_commands(stream: str, table: pa.Table) -> bytes:
    """Pipelined `XADD stream * column value ...`, one per row of `table`, every value as
    text (integers and timestamps as integers, floats in their shortest form)."""
    head = f"*{3 + 2 * table.num_columns}\r\n$4\r\nXADD\r\n${len(stream)}\r\n{stream}\r\n"
    pieces: list[pa.Array | str] = [head + "$1\r\n*\r\n"]
    for column, field in zip(table.columns, table.schema, strict=True):
        values = column.combine_chunks()
        if pa.types.is_timestamp(field.type):
            values = values.cast(pa.int64())
        text = values.cast(pa.string())
        size = pc.binary_length(text).cast(pa.string())
        pieces += [f"${len(field.name)}\r\n{field.name}\r\n$", size, "\r\n", text, "\r\n"]
    joined = pc.binary_join_element_wise(*pieces, "")
    # A string array's values are one buffer, in row order: the commands, back to back.
    offsets = pa.Array.from_buffers(
        pa.int32(), len(joined) + 1, [None, joined.buffers()[1]], offset=joined.offset
    )
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return bytes(joined.buffers()[2].to_pybytes()[start:end])


def xadd_round(client: Resp, batches: Sequence[tuple[bytes, int]]) -> float:
    """Rows/s of sending each (pipelined XADDs, rows) batch and reading its replies,
    one batch after the other."""
    rows = sum(count for _, count in batches)
    start = time.perf_counter()
    for data, count in batches:
        client.send(data)
        client.expect_ids(count)
    return rows / (time.perf_counter() - start)


# --- reads -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamShape:
    """The fields of every entry of a stream, and how to type the ones a reader keeps."""

    fields: tuple[str, ...]
    types: dict[str, pa.DataType]

    @property
    def step(self) -> int:
        return 4 + 4 * len(self.fields)

    def decode(self, lines: list[bytes]) -> pa.Table:
        """The kept fields of the entries in `lines` (from `Resp.stream_reply`) as a typed
        table, after checking that every entry has exactly these fields."""
        step = self.step
        if set(lines[0::step]) != {b"*2"} or set(lines[3::step]) != {b"*%d" % (step // 2 - 2)}:
            raise RedisError("stream entries do not have the expected number of fields")
        columns = {}
        for k, name in enumerate(self.fields):
            if set(lines[4 + 4 * k + 1 :: step]) != {name.encode()}:
                raise RedisError(f"field {k} of some stream entry is not {name}")
            if name in self.types:
                text = pa.array(lines[4 + 4 * k + 3 :: step], pa.string())
                columns[name] = text.cast(self.types[name])
        columns["id"] = pa.array(lines[2::step], pa.string())
        return pa.table(columns)


def drain_group(
    port: int, stream: str, group: str, shape: StreamShape, keep: str, above: int
) -> tuple[int, int, float]:
    """(entries read, rows delivered, seconds) of a new consumer group reading `stream`
    from its start with XREADGROUP ... NOACK, one read ahead, keeping the rows whose
    `keep` field is greater than `above` (client-side filter), until a read returns
    nothing."""
    read = encode(
        "XREADGROUP", "GROUP", group, "c1", "COUNT", READ_COUNT, "NOACK", "STREAMS", stream, ">"
    )
    entries = delivered = 0
    with Resp(port) as client:
        client.call("XGROUP", "CREATE", stream, group, "0")
        start = time.perf_counter()
        client.send(read)
        while True:
            lines = client.stream_reply(len(shape.fields))
            if lines is None:
                break
            client.send(read)  # Redis prepares the next reply while this one is decoded
            table = shape.decode(lines)
            entries += table.num_rows
            delivered += table.filter(pc.greater(table[keep], above)).num_rows
        seconds = time.perf_counter() - start
    return entries, delivered, seconds


# --- latency ---------------------------------------------------------------------------

LATENCY_STREAM = "probe"


def paced(count: int, period_s: float, send: Callable[[int], object]) -> None:
    """`send(i)` for i in range(count), call i at `period_s` * i after the first or as
    soon as possible after: behind schedule, calls follow at once until it is met."""
    began = time.perf_counter()
    for i in range(count):
        delay = began + i * period_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)


def produce(port: int, samples: int, warmup: int, period_s: float) -> None:
    """Producer process of the latency run: `warmup` unmeasured XADDs, then `samples`
    XADDs paced `period_s` apart, each carrying its send time (time.time_ns) and waiting
    for its reply."""
    with Resp(port) as client:
        for _ in range(warmup):
            client.call("XADD", LATENCY_STREAM, "*", "sent_ns", WARMUP_SENT_NS)
        paced(
            samples,
            period_s,
            lambda _: client.call("XADD", LATENCY_STREAM, "*", "sent_ns", time.time_ns()),
        )


def start_id(port: int) -> bytes:
    """The ID of a marker entry added to the latency stream: reads start after it."""
    with Resp(port) as client:
        marker = client.call("XADD", LATENCY_STREAM, "*", "sent_ns", WARMUP_SENT_NS)
    if not isinstance(marker, bytes):
        raise RedisError(f"XADD returned {marker!r}")
    return marker


def receive(port: int, after: bytes, samples: int, deadline_s: float) -> list[tuple[int, int]]:
    """(send, receive) times in ns of the next `samples` measured entries after ID
    `after`, read by a blocked XREAD; received = when the reply is parsed."""
    shape = StreamShape(("sent_ns",), {"sent_ns": pa.int64()})
    times: list[tuple[int, int]] = []
    deadline = time.monotonic() + deadline_s
    with Resp(port) as client:
        while len(times) < samples:
            if time.monotonic() > deadline:
                raise RedisError(f"{len(times)} of {samples} latency samples in time")
            client.send(encode("XREAD", "BLOCK", BLOCK_MS, "STREAMS", LATENCY_STREAM, after))
            lines = client.stream_reply(1)
            now = time.time_ns()
            if lines is None:
                continue
            table = shape.decode(lines)
            after = table["id"][-1].as_py().encode()
            times += [(s, now) for s in table["sent_ns"].to_pylist() if s != WARMUP_SENT_NS]
    return times[:samples]
