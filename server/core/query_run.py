"""One ad hoc query running in DuckDB, from its start to its last batch: its cursor and
Arrow reader, its bounds (result bytes, time) and the ways it stops early.

A run reads DuckDB's result a batch at a time (`next_batch`), never all of it at once
unless asked (`read_all`, under the result cap). `close()`, from any thread, ends it: a
DuckDB call in flight on a worker is interrupted, and the cursor is released when that
call returns. The time limit interrupts it the same way, from the watchdog thread.
DuckDB forgets an interrupt that lands before its query starts, so an interrupt is
repeated until the call in flight returns.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

import duckdb
import pyarrow as pa

from sqltopic.errors import QueryTimeout, SqlError, TooLarge
from sqltopic.server.common.limits import GIB, KIB, MIB, Limits
from sqltopic.server.common.result_types import conform, tdengine_schema

log = logging.getLogger("sqltopic.server")

T = TypeVar("T")
Stop = Literal["timeout", "closed"]

# Rows per Arrow batch DuckDB hands over: enough that a batch's fixed costs (a hop to a
# worker, an IPC message) vanish, few enough that the server holds little of a result at
# once (~0.5 MiB of one BIGINT column; a few MiB for typical rows).
BATCH_ROWS = 65_536
# How often an interrupt is repeated while the DuckDB call it targets still runs.
INTERRUPT_RETRY_S = 0.05
# Quoted text a query's error message keeps of each quotation (DuckDB quotes values and
# names of the query), and the message's whole length: enough to recognise the culprit,
# never a megabyte statement echoed back.
QUOTE_CHARS = 80
MESSAGE_CHARS = 300
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# DuckDB's messages that an Arrow reader passes on as a plain Arrow error.
_INTERRUPTED = "INTERRUPT Error"
_OUT_OF_MEMORY = "Out of Memory Error"
# Failures of a query that ran out of memory: DuckDB's limit, or Python's and Arrow's.
_NO_MEMORY = (duckdb.OutOfMemoryException, MemoryError, pa.ArrowMemoryError)


@dataclass(frozen=True)
class ResultCap:
    """The Arrow bytes (batch buffers) a result may hold, and the refusal past them."""

    max_bytes: int
    message: str

    @classmethod
    def of(cls, limits: Limits) -> ResultCap:
        return cls(
            limits.max_result_bytes,
            f"the query's result passed --max-result-bytes ({size(limits.max_result_bytes)} "
            "of Arrow per query): narrow it (WHERE, LIMIT, fewer columns), or read the rows "
            "with a topic",
        )


class QueryRun:
    """An ad hoc query's run: `start`, then `next_batch` until None (or `read_all`),
    and `close` in any case. `close` may come from another thread at any time."""

    def __init__(self, limits: Limits, cap: ResultCap | None = None) -> None:
        self._limits = limits
        self._cap = cap or ResultCap.of(limits)
        self._lock = threading.Lock()
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._names: list[str] = []
        self._reader: pa.RecordBatchReader | None = None
        self._schema: pa.Schema | None = None
        self._typed: pa.Schema | None = None  # TDengine's types for DuckDB's, if they differ
        self._first: pa.RecordBatch | None = None  # read at the start to choose them
        self._stop: Stop | None = None
        self._busy = False  # a DuckDB call of this run is in flight
        self._done = False  # the result was read to its end, or failed
        self._bytes = 0
        self._where: tuple[str, int, int] | None = None

    def place(self, sql: str, line: int, column: int) -> None:
        """The statement a query failure is reported at (SqlError's sql, line, column)."""
        self._where = (sql, line, column)

    @property
    def in_flight(self) -> bool:
        """Whether a DuckDB call of this run is running on some thread now."""
        return self._busy

    @property
    def schema(self) -> pa.Schema:
        """The result's schema (known once started)."""
        if self._schema is None:
            raise RuntimeError("the run has not started")
        return self._schema

    def start(
        self, cursor: duckdb.DuckDBPyConnection, sql: str, relations: Mapping[str, pa.Table]
    ) -> None:
        """Run `sql` on `cursor` (this run's from now on) with `relations` registered;
        the time limit counts from here."""
        with self._lock:
            self._cursor = cursor
            stop = self._stop
        if stop is not None:
            log.info("ad hoc query stopped before it started: %s", _STOP_REASONS[stop])
            self._release()
            raise self._stopped(stop)
        _WATCHDOG.call_at(time.monotonic() + self._limits.query_timeout_ms / 1000, self._expire)

        def begin() -> pa.Schema:
            for name, table in relations.items():
                self._names.append(name)
                cursor.register(name, table)
            self._reader = cursor.sql(sql).to_arrow_reader(BATCH_ROWS)
            return self._reader.schema

        duck_schema = self._duck(begin)
        if any(pa.types.is_decimal(f.type) for f in duck_schema):
            # TDengine's types for DuckDB's decimals depend on the values: read them first
            self._first = self._duck(self._read_next)
            self._typed = tdengine_schema(duck_schema, self._first)
        self._schema = self._typed or duck_schema

    def next_batch(self) -> pa.RecordBatch | None:
        """The next batch of rows, None after the last; TooLarge past the result cap."""
        batch = self._duck(self._read_next)
        if batch is None:
            self._done = True
            return None
        if self._typed is not None:
            batch = conform(batch, self._typed)
        self._bytes += batch.nbytes
        if self._bytes > self._cap.max_bytes:
            self._done = True
            raise TooLarge(self._cap.message)
        return batch

    def read_all(self) -> pa.Table:
        """Every remaining row at once, under the result cap."""
        batches = []
        while (batch := self.next_batch()) is not None:
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=self.schema)

    def close(self) -> None:
        """End the run: interrupt a DuckDB call in flight (its cursor is released when it
        returns), else release the cursor now. Idempotent."""
        self._halt("closed")

    def _read_next(self) -> pa.RecordBatch | None:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        reader = self._reader  # set while the run is neither stopped nor released
        if reader is None:
            raise RuntimeError("the run has not started")
        try:
            return reader.read_next_batch()
        except StopIteration:
            return None

    # --- stopping --------------------------------------------------------------------

    def _expire(self) -> None:
        self._halt("timeout")

    def _halt(self, stop: Stop) -> None:
        with self._lock:
            if self._stop is not None:
                return
            self._stop = stop
            busy, early = self._busy, self._cursor is not None and not self._done
        if busy:
            self._interrupt()  # logged when the call returns, its worker free
            return
        if early:
            log.info("ad hoc query stopped between batches: %s", _STOP_REASONS[stop])
        self._release()

    def _interrupt(self) -> None:
        """Interrupt the call in flight, and again shortly after until it has returned."""
        with self._lock:
            if not self._busy or self._cursor is None:
                return
            self._cursor.interrupt()
        _WATCHDOG.call_at(time.monotonic() + INTERRUPT_RETRY_S, self._interrupt)

    def _release(self) -> None:
        with self._lock:
            cursor, reader, names = self._cursor, self._reader, self._names
            self._cursor, self._reader, self._names = None, None, []
        if reader is not None:
            reader.close()
        if cursor is not None:
            for name in names:
                cursor.unregister(name)
            cursor.close()

    # --- DuckDB calls ------------------------------------------------------------------

    def _duck(self, call: Callable[[], T]) -> T:
        """`call` (DuckDB work on this run's cursor) as an interruptible call, its
        failures as the errors a client is told."""
        with self._lock:
            stop = self._stop
            self._busy = stop is None
        if stop is not None:
            raise self._stopped(stop)
        try:
            return call()
        except Exception as exc:
            self._done = True
            raise self._failure(exc) from None
        finally:
            with self._lock:
                self._busy = False
                stop = self._stop
            if stop is not None:
                log.info("ad hoc query interrupted, its worker free: %s", _STOP_REASONS[stop])
                self._release()

    def _stopped(self, stop: Stop) -> Exception:
        if stop == "timeout":
            ms = self._limits.query_timeout_ms
            return QueryTimeout(
                f"the query ran longer than --query-timeout-ms ({ms} ms) and was stopped: "
                "narrow it (a WHERE on ts, fewer rows joined), or read the rows with a "
                "topic or the Spark backfill"
            )
        return _Cancelled()

    def _failure(self, exc: Exception) -> Exception:
        text = str(exc)
        stop = self._stop
        interrupted = isinstance(exc, duckdb.InterruptException) or _INTERRUPTED in text
        # only a stop this run asked for: a query's own error() can say "INTERRUPT Error"
        if interrupted and stop is not None:
            return self._stopped(stop)
        if isinstance(exc, _NO_MEMORY) or _OUT_OF_MEMORY in text:
            mem = size(self._limits.query_memory_bytes)
            return TooLarge(
                f"the query needs more memory than --query-memory-bytes ({mem}, shared by "
                "the server's ad hoc queries): narrow it (WHERE, fewer groups or joined "
                "rows, fewer columns), or read the rows with a topic"
            )
        if isinstance(exc, duckdb.Error | pa.ArrowException) or _arrow_io(exc):
            err = SqlError(f"query failed: {brief(text)}")
            return err.at(*self._where) if self._where is not None else err
        return exc


class _Cancelled(Exception):
    """The run was closed before its end: its caller has gone (never reaches a client)."""


_STOP_REASONS: dict[Stop, str] = {
    "timeout": "it ran longer than --query-timeout-ms",
    "closed": "its call ended first (cancelled by the client, or past its deadline)",
}


def _arrow_io(exc: Exception) -> bool:
    """Whether `exc` is DuckDB's failure passed on by an Arrow reader (an OSError of no
    system call: not a descriptor shortage, which the RPC boundary reports)."""
    return isinstance(exc, OSError) and exc.errno is None


def brief(text: str) -> str:
    """DuckDB's message, bounded: its first line, each quotation cut to QUOTE_CHARS and
    the whole to MESSAGE_CHARS, a cut marked with "…"."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    cut = _QUOTED.sub(lambda m: _cut(m.group()[1:-1], QUOTE_CHARS).join(m.group()[0] * 2), first)
    return _cut(cut, MESSAGE_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def size(n: int) -> str:
    """A byte count as the options take it: 2 GiB, 64 MiB, 1048576 bytes."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} bytes"


class _Watchdog:
    """One daemon thread calling each action at its time (the query time limits, the
    repeated interrupts). An action holds its run weakly: a finished run is not kept
    alive until its time comes."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, weakref.WeakMethod[Callable[[], None]]]] = []
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call_at(self, when: float, action: Callable[[], None]) -> None:
        entry = (when, next(self._order), weakref.WeakMethod(action))
        with self._cond:
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="query-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                _, _, ref = heapq.heappop(self._heap)
            action = ref()
            if action is not None:
                try:
                    action()
                except Exception:  # a failed interrupt must not stop the watchdog
                    log.exception("stopping an ad hoc query failed")


_WATCHDOG = _Watchdog()
