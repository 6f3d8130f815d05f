"""Long runs of work on the event loop, served in turns.

A client process's consumers beat together and commit together to share calls, so such
work arrives as one burst of hundreds of items. Done at once, a burst holds the event
loop, and with it every write, shared pass and stream, for tens of milliseconds
(docs/performance.md §9.14). `in_turns` hands the items out in order and lets the loop
run its other ready work between every `PER_TURN` of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar

T = TypeVar("T")

# Items handled before the event loop gets a turn: a burst of 250 beats or commits held
# the loop for 15-40 ms at once; 32 at a time holds it for a few.
PER_TURN = 32


async def in_turns(items: Iterable[T], per_turn: int = PER_TURN) -> AsyncIterator[T]:
    """`items` in order, the event loop running its other ready work (I/O, other
    tasks) between every `per_turn` of them."""
    for done, item in enumerate(items):
        if done and done % per_turn == 0:
            await asyncio.sleep(0)
        yield item
