"""Routing a write on a cluster (client/routing.py): each table's vgroup by the documented
hash, the same as the server's, and a write's rows split by the endpoint hosting them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from sqltopic.client.routing import (
    HERE,
    ROUTE_ATTEMPTS,
    ROUTE_RETRY_S,
    ReadRoutes,
    Routes,
    database_of,
    outcomes_of,
    write_flow,
)
from sqltopic.errors import InvalidValueError, ServerUnavailable, VgroupUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.server.core.routing import vgroup_for
from sqltopic.sql.model import Database

VGROUPS = (11, 12, 13, 14)
ENDPOINTS = ("a:1", "b:1", "a:1", "c:1")  # vgroup 11 and 13 on one dnode
ROUTES = Routes(7, True, {"power": tuple(zip(VGROUPS, ENDPOINTS, strict=True))})
DB = Database("power", VGROUPS, "ms", {}, 0)


def _endpoint(table: str) -> str:
    return ENDPOINTS[VGROUPS.index(vgroup_for(DB, table))]


@pytest.mark.parametrize(
    ("target", "database", "expected"),
    [
        ("power.meters", None, "power"),
        ("meters", "power", "power"),
        ("POWER.meters", "other", "power"),
        ("meters", "Power", "power"),
        ("meters", None, None),
    ],
)
def test_the_database_of_a_write(target: str, database: str | None, expected: str | None) -> None:
    assert database_of(target, database) == expected


def test_a_table_s_rows_go_to_its_vgroup_s_dnode_as_the_server_places_it() -> None:
    for name in [f"d{i}" for i in range(50)] + ["Upper", "ünï"]:
        data = pa.table({"ts": [1], "v": [2]})
        assert ROUTES.split("power", f"power.{name}", data) == {_endpoint(name.lower()): data}


def test_a_write_through_a_super_table_is_split_by_dnode_keeping_row_order() -> None:
    names = [f"d{i % 40}" for i in range(200)]
    data = pa.table({"TBNAME": [n.upper() for n in names], "v": list(range(200))})
    parts = ROUTES.split("power", "meters", data)
    assert parts is not None
    assert sum(p.num_rows for p in parts.values()) == 200
    for endpoint, part in parts.items():
        rows = part.column("v").to_pylist()
        assert rows == sorted(rows)  # the write's order within each part
        assert {_endpoint(names[v]) for v in rows} == {endpoint}
    assert set(parts) == {_endpoint(n) for n in names}


def test_a_write_all_for_one_dnode_is_sent_whole() -> None:
    one = next(n for n in (f"d{i}" for i in range(100)) if _endpoint(n) == "c:1")
    data = pa.table({"tbname": [one] * 3, "v": [1, 2, 3]})
    parts = ROUTES.split("power", "meters", data)
    assert parts == {"c:1": data}
    assert parts["c:1"] is data


def test_names_the_server_would_refuse_still_go_to_a_dnode_that_says_why() -> None:
    for column in (pa.array(["d1", None]), pa.array([1, 2])):
        data = pa.table({"tbname": column, "v": [1, 2]})
        parts = ROUTES.split("power", "meters", data)
        assert parts is not None
        assert sum(p.num_rows for p in parts.values()) == 2


def test_unknown_databases_and_servers_without_routes() -> None:
    data = pa.table({"v": [1]})
    assert ROUTES.split("other", "t", data) is None  # read the routes again
    assert Routes().split("power", "t", data) == {HERE: data}  # not a cluster: send here
    vgroups = [
        pb.VgroupRoute(vgroup=v, dnode=1, endpoint=e)
        for v, e in zip(VGROUPS, ENDPOINTS, strict=True)
    ]
    answer = pb.RoutesResponse(
        epoch=3, routed=True, databases=[pb.DatabaseRoutes(database="power", vgroups=vgroups)]
    )
    assert Routes.of(answer) == Routes(3, True, ROUTES.databases)


def _drive(flow: Any, answer: Callable[[Any], Any]) -> tuple[int | None, list[Any]]:
    """Run a write flow, answering a ReadRoutes with `answer(step)` and each part of a
    SendParts with `answer(part)` (an exception raised is that part's outcome, as the
    connections gather them); the rows it returned (None if it raised VgroupUnavailable)
    and the steps it took."""
    steps: list[Any] = []
    try:
        step = next(flow)
        while True:
            steps.append(step)
            if isinstance(step, ReadRoutes):
                step = flow.send(answer(step))
                continue
            results: list[int | BaseException] = []
            for part in step.parts:
                try:
                    results.append(answer(part))
                except Exception as exc:  # the part's outcome
                    results.append(exc)
            step = flow.send(outcomes_of(results))
    except StopIteration as done:
        return int(done.value), steps
    except VgroupUnavailable:
        return None, steps


def test_the_parts_of_a_write_go_out_together_one_per_endpoint() -> None:
    names = [f"d{i}" for i in range(40)]
    data = pa.table({"tbname": names, "v": list(range(40))})
    written, steps = _drive(write_flow(ROUTES, "power", "meters", data), lambda p: p.data.num_rows)
    assert written == 40
    assert len(steps) == 1  # one step: every part under way at once
    parts = steps[0].parts
    assert sorted(p.endpoint for p in parts) == ["a:1", "b:1", "c:1"]
    for part in parts:
        assert part.data.column("tbname").to_pylist() == [
            n for n in names if _endpoint(n) == part.endpoint
        ]


def test_a_part_refused_as_stale_goes_again_alone_after_the_routes_are_read() -> None:
    names = [f"d{i}" for i in range(40)]
    data = pa.table({"tbname": names, "v": list(range(40))})
    moved = Routes(8, True, {"power": tuple((v, "z:1") for v in VGROUPS)})
    sent: list[tuple[str, int]] = []

    def answer(step: Any) -> Any:
        if isinstance(step, ReadRoutes):
            return moved
        if step.endpoint in ("b:1", "c:1"):  # the vgroups b and c hosted moved to z
            raise VgroupUnavailable(f"vgroup 12 is not hosted by the dnode at {step.endpoint}")
        sent.append((step.endpoint, step.data.num_rows))
        return step.data.num_rows

    written, steps = _drive(write_flow(ROUTES, "power", "meters", data), answer)
    assert written == 40
    moved_rows = [n for n in names if _endpoint(n) in ("b:1", "c:1")]
    assert ("z:1", len(moved_rows)) in sent  # b's and c's parts went again as one, to z
    again = steps[-1].parts[0].data.column("tbname").to_pylist()
    assert again == [n for n in moved_rows if _endpoint(n) == "b:1"] + [
        n for n in moved_rows if _endpoint(n) == "c:1"
    ]  # each table's rows in their order
    assert sum(rows for _e, rows in sent) == 40  # no row written twice
    assert [s.pause_s for s in steps if isinstance(s, ReadRoutes)] == [ROUTE_RETRY_S]


def test_a_part_still_refused_after_every_attempt_raises() -> None:
    data = pa.table({"v": [1]})

    def answer(step: Any) -> Any:
        if isinstance(step, ReadRoutes):
            return ROUTES
        raise VgroupUnavailable("catching up")

    written, steps = _drive(write_flow(ROUTES, "power", "t", data), answer)
    assert written is None
    pauses = [s.pause_s for s in steps if isinstance(s, ReadRoutes)]
    assert pauses == [ROUTE_RETRY_S * n for n in range(1, ROUTE_ATTEMPTS)]


def test_an_error_other_than_stale_routes_is_raised_once_every_part_was_answered() -> None:
    refused = InvalidValueError("column v: not an INT")
    stale = VgroupUnavailable("stale")
    assert outcomes_of([3, stale, 4]) == [3, stale, 4]
    with pytest.raises(InvalidValueError) as raised:
        outcomes_of([3, stale, refused, ServerUnavailable("later")])
    assert raised.value is refused
