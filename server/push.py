"""Push for long polls: an asyncio task waits, without a thread, until a vnode's WAL
makes a version readable. The WAL's notifier calls listeners in the writer's thread;
the listener hands the news to the event loop with `call_soon_threadsafe`."""

from __future__ import annotations

import asyncio
import contextlib

from sqltopic.wal.notify import VersionNotifier


async def wait_for_version(
    notifier: VersionNotifier, version: int, timeout: float, *stops: asyncio.Event
) -> bool:
    """True once `version` is readable (the next version passed it); False when
    `timeout` seconds pass or one of `stops` is set first."""
    if notifier.next_version > version:
        return True
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def listener(next_version: int) -> None:
        if next_version > version:
            loop.call_soon_threadsafe(arrived.set)

    remove = notifier.add_listener(listener)
    try:
        if notifier.next_version > version:  # landed between the check and the listener
            return True
        waiters = [asyncio.ensure_future(e.wait()) for e in (arrived, *stops)]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
        return arrived.is_set()
    finally:
        remove()
