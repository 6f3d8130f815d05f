"""A vnode's last poll times (SHOW SUBSCRIPTIONS' last_poll): the latest per pair, and
the oldest pairs dropped first past the bound."""

from __future__ import annotations

from sqltopic.server.vnode.poll_times import POLL_TIMES_KEPT, PollTimes


def test_the_latest_poll_of_each_pair_is_kept() -> None:
    times = PollTimes()
    times.note("t", "g", 10)
    times.note("t", "h", 11)
    times.note("t", "g", 12)
    assert (times.last("t", "g"), times.last("t", "h"), times.last("u", "g")) == (12, 11, None)


def test_past_the_bound_the_pairs_polled_longest_ago_go_first() -> None:
    times = PollTimes(kept=3)
    for i, group in enumerate("abc"):
        times.note("t", group, i)
    times.note("t", "a", 5)  # polled again: now the newest
    times.note("t", "d", 6)  # one too many: b (polled longest ago) goes
    assert [times.last("t", g) for g in "abcd"] == [5, None, 2, 6]
    assert POLL_TIMES_KEPT >= 10_000
