"""The engine as its services see it: the coordinator it builds and owns, the reads and
checks it offers in place of its state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sqltopic.errors import NoPermission, TopicNotFound, WalLockedError
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.coordinator import Coordinator
from sqltopic.server.mnode.coordinator_store import CoordinatorStore


class RecordingStore(CoordinatorStore):
    closed = 0

    def close(self) -> None:
        RecordingStore.closed += 1
        super().close()


def _setup(engine: Engine) -> None:
    engine.execute(
        "CREATE DATABASE db VGROUPS 3; USE db;"
        "CREATE STABLE m (ts TIMESTAMP, v INT) TAGS (site INT);"
        "CREATE TOPIC t AS SELECT ts, v FROM m WHERE v > 1;"
        "CREATE USER alice PASS 'alice-pw-1'"
    )


def test_the_engine_builds_its_coordinator_and_closes_its_store(tmp_path: Path) -> None:
    built: list[Coordinator] = []

    def factory(vgroups_of: Callable[[str], list[int]]) -> Coordinator:
        built.append(Coordinator(vgroups_of, store=RecordingStore(tmp_path)))
        return built[0]

    before = RecordingStore.closed
    with Engine(tmp_path, background=False, coordination=factory) as engine:
        _setup(engine)
        assert engine.coordinator is built[0]
        # the lookup it was given answers from the catalog as it is now
        assert sorted(built[0].vgroups_of("t")) == sorted(engine.topic_vgroups("t")[1])
        assert len(built[0].vgroups_of("t")) == 3
        with pytest.raises(TopicNotFound):
            built[0].vgroups_of("missing")
    assert RecordingStore.closed == before + 1


def test_a_failing_coordinator_leaves_the_directory_free(tmp_path: Path) -> None:
    def factory(vgroups_of: Callable[[str], list[int]]) -> Coordinator:
        raise OSError("mnode.sqlite: disk full")

    with pytest.raises(OSError, match="disk full"):
        Engine(tmp_path, background=False, coordination=factory)
    with Engine(tmp_path, background=False) as engine:  # not WalLockedError
        assert engine.coordinator is None
    Engine(tmp_path, background=False).close()


def test_a_second_engine_on_the_directory_is_refused(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False), pytest.raises(WalLockedError):
        Engine(tmp_path, background=False)


def test_subscribe_rights_through_the_facade(tmp_path: Path) -> None:
    with Engine(tmp_path, background=False) as engine:
        _setup(engine)
        engine.check_subscribe("root", "t")
        assert engine.may_subscribe("root", "t")
        assert not engine.may_subscribe("alice", "t")
        assert not engine.may_subscribe("root", "missing")
        with pytest.raises(TopicNotFound):  # alice may not even read db: the name is hidden
            engine.check_subscribe("alice", "t")
        with pytest.raises(NoPermission):
            engine.check_subscribe("alice", "t", hide=False)
        engine.execute("GRANT SUBSCRIBE ON t TO alice")
        engine.check_subscribe("alice", "t")
        assert engine.users()("alice") is not None
        assert engine.users()("bob") is None
        assert engine.catalog.topic("t").db == "db"
        assert engine.limits is engine.state.limits
