"""server/common/turns.py: items handed out in order, the event loop's other work
running between every PER_TURN of them."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sqltopic.server.common.turns import PER_TURN, in_turns
from tests.server.support import count_turns


@pytest.mark.parametrize(
    ("count", "per_turn", "turns"),
    [(0, PER_TURN, 0), (1, PER_TURN, 1), (PER_TURN, PER_TURN, 1), (PER_TURN + 1, PER_TURN, 2),
     (3 * PER_TURN + 7, PER_TURN, 4), (10, 3, 4)],
)  # fmt: skip
def test_items_come_in_order_per_turn_at_most_in_as_many_turns_as_needed(
    count: int, per_turn: int, turns: int
) -> None:
    turn = [0]

    async def run() -> list[tuple[int, int]]:
        ticker = asyncio.create_task(count_turns(turn))
        await asyncio.sleep(0)  # the ticker counts from here
        try:
            return [(item, turn[0]) async for item in in_turns(range(count), per_turn)]
        finally:
            ticker.cancel()

    got = asyncio.run(run())
    assert [item for item, _ in got] == list(range(count))
    per = Counter(at for _, at in got)
    assert len(per) == turns
    assert all(n <= per_turn for n in per.values())
