"""Where a poll's read runs (server/rpc/vnode_service.py `_soon`): on the event loop when
little WAL is pending and no DDL holds the engine's lock, else on a worker thread."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from sqltopic.server.common.limits import Limits
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.rpc import vnode_service
from sqltopic.server.rpc.slots import Slots
from sqltopic.server.rpc.vnode_service import Executors, VnodeService
from sqltopic.wal import WalReader

# Bound on waiting for a helper thread's step (never reached when the code works).
STEP_TIMEOUT_S = 10.0


class Probe:
    """A read stand-in that records the threads it ran on; it takes the engine's shared
    lock as a real read does."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.threads: list[int] = []
        self.attempted = threading.Condition()

    def __call__(self) -> str:
        with self.attempted:
            self.threads.append(threading.get_ident())
            self.attempted.notify_all()
        with self.engine.state.lock.shared():
            return "read"


def run_soon(engine: Engine, probe: Probe, position: int, reader: WalReader) -> str:
    async def main() -> str:
        with ThreadPoolExecutor(2) as executor:
            service = VnodeService(
                engine, Sessions("pw"), Coordinator(lambda _: []),
                Executors(executor, executor), asyncio.Event(), Slots(Limits()),
            )  # fmt: skip
            return await service._soon(position, reader, probe)

    return asyncio.run(main())


def wrote(power: Engine, rows: int) -> WalReader:
    """A reader of d0's vnode after writing `rows` rows to d0 (one entry)."""
    values = ", ".join(f"({1_700_000_000_000 + n}, 1.0, {n}, 0.5)" for n in range(rows))
    power.execute(f"INSERT INTO d0 USING meters TAGS ('x', 1) VALUES {values}")
    return power.state.vnode(power.state.catalog.table("power", "d0").vgroup).reader()


def test_a_small_read_runs_on_the_event_loop(power: Engine) -> None:
    reader = wrote(power, 3)
    probe = Probe(power)
    loop_thread = threading.get_ident()  # asyncio.run runs the loop on this thread
    assert run_soon(power, probe, reader.first_version, reader) == "read"
    assert probe.threads == [loop_thread]


def test_a_large_read_runs_on_a_worker(power: Engine) -> None:
    reader = wrote(power, 4000)
    assert reader.pending_bytes(reader.first_version) > vnode_service.INLINE_READ_BYTES
    probe = Probe(power)
    assert run_soon(power, probe, reader.first_version, reader) == "read"
    assert len(probe.threads) == 1
    assert probe.threads[0] != threading.get_ident()


def test_a_read_that_would_wait_for_ddl_moves_to_a_worker(power: Engine) -> None:
    """The loop's attempt meets DDL holding the lock and gives up at once; a worker
    tries again and waits its turn (the DDL ends once the worker has started)."""
    reader = wrote(power, 3)
    probe = Probe(power)
    held = threading.Event()

    def ddl() -> None:
        with power.state.lock.exclusive():
            held.set()
            with probe.attempted:
                probe.attempted.wait_for(lambda: len(probe.threads) >= 2, STEP_TIMEOUT_S)

    thread = threading.Thread(target=ddl)
    thread.start()
    assert held.wait(STEP_TIMEOUT_S)
    try:
        assert run_soon(power, probe, reader.first_version, reader) == "read"
    finally:
        thread.join(STEP_TIMEOUT_S)
    loop_thread = threading.get_ident()
    assert probe.threads[0] == loop_thread
    assert probe.threads[1] != loop_thread
    assert len(probe.threads) == 2
