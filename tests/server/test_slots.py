"""Open calls counted per session and per user (server/rpc/slots.py): refused beyond either
limit before any work, released however the call ends."""

from __future__ import annotations

import pytest

from sqltopic.errors import LimitExceeded
from sqltopic.server.common.limits import Limits
from sqltopic.server.rpc.slots import Slots


def test_each_limit_refuses_the_call_beyond_it() -> None:
    slots = Slots(Limits(max_streams_per_session=2, max_streams_per_user=3))
    with slots.hold("s1", "alice", "Poll"), slots.hold("s1", "alice", "Poll"):
        with (
            pytest.raises(LimitExceeded, match="--max-streams-per-session is 2"),
            slots.hold("s1", "alice", "Execute"),
        ):
            pass
        with slots.hold("s2", "alice", "Poll"):
            with (
                pytest.raises(LimitExceeded, match="user alice already has 3"),
                slots.hold("s3", "alice", "Fetch"),
            ):
                pass
            with slots.hold("s3", "bob", "Fetch"):  # another user is not counted
                assert slots.open("bob") == 1
        assert slots.open("alice") == 2
    assert slots.open() == 0


def test_a_slot_is_freed_when_its_call_fails() -> None:
    slots = Slots(Limits(max_streams_per_session=1))
    with pytest.raises(RuntimeError), slots.hold("s", "u", "Write"):
        raise RuntimeError("the call failed")
    with slots.hold("s", "u", "Write"):
        assert slots.open("u") == 1
