"""The console's JSON: what the page shows, built for one logged-in user.

Everything but the history comes from the SQL a user could run, run with that user's
rights (SHOW DATABASES, VGROUPS, TOPICS, CONSUMERS, SUBSCRIPTIONS), so the console shows
no more than `sqltopic sql` would. The recent rebalances and the lag history are the
server's; a user sees those of the topics they may consume, and of the subscriptions
their SHOW SUBSCRIPTIONS lists. docs/operations.md §9.5 describes the answer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqltopic.server.common.result import Session
from sqltopic.server.console.lag_history import LAG_SAMPLE_INTERVAL_S, LagHistory, SeriesKey
from sqltopic.server.core.engine import Engine
from sqltopic.server.mnode.auth import ROOT_USER
from sqltopic.server.mnode.rebalances import Rebalance
from sqltopic.sql.topic.params import topic_of

# Rows of one list in an answer at most: a page stays a few MB however many groups.
MAX_CONSOLE_ROWS = 10_000
# The statements behind the lists, by the answer's key.
LISTS = {
    "databases": "SHOW DATABASES",
    "vgroups": "SHOW VGROUPS",
    "topics": "SHOW TOPICS",
    "consumers": "SHOW CONSUMERS",
    "subscriptions": "SHOW SUBSCRIPTIONS",
}
Json = dict[str, Any]


@dataclass(frozen=True)
class ConsoleApi:
    """The answers, from the engine (statements, the coordinator's rebalances) and the
    lag history; `now_ms` is the server's wall clock."""

    engine: Engine
    history: LagHistory
    now_ms: Callable[[], int]

    def me(self, session: Session) -> Json:
        return {"user": session.user, "superuser": self._superuser(session.user)}

    def overview(self, session: Session) -> Json:
        """Every list, the recent rebalances and the lag history, as `session`'s user
        sees them."""
        fresh = Session(user=session.user)  # no USE of the login's other calls
        me = self.me(session)
        answer: Json = {
            "user": me,
            "now": _iso(self.now_ms()),
            "refresh_ms": int(LAG_SAMPLE_INTERVAL_S * 1000),
        }
        truncated: list[str] = []
        for key, sql in LISTS.items():
            rows = self.engine.execute(sql, fresh).table.to_pylist()
            if len(rows) > MAX_CONSOLE_ROWS:
                truncated.append(key)
            answer[key] = [_row(r) for r in rows[:MAX_CONSOLE_ROWS]]
        answer["truncated"] = truncated
        answer["rebalances"] = self._rebalances(session.user, me["superuser"])
        answer["lag"] = self._lag(answer["subscriptions"])
        return answer

    def _superuser(self, user: str) -> bool:
        record = self.engine.users()(user)
        return user == ROOT_USER or (record is not None and record.superuser)

    def _rebalances(self, user: str, superuser: bool) -> list[Json]:
        coordinator = self.engine.coordinator
        if coordinator is None:
            return []
        return [
            _rebalance(r) for r in coordinator.rebalances.recent()
            if superuser or self.engine.may_subscribe(user, topic_of(r.topic))
        ]  # fmt: skip

    def _lag(self, subscriptions: list[Json]) -> Json:
        """The history of the subscriptions the user's SHOW SUBSCRIPTIONS listed."""
        shown: set[SeriesKey] = {
            (s["topic_name"], s["consumer_group"], s["vgroup_id"]) for s in subscriptions
        }
        times, series = self.history.read(lambda key: key in shown)
        return {
            "interval_ms": int(LAG_SAMPLE_INTERVAL_S * 1000),
            "times": times,
            "series": [
                {"topic": s.topic, "group": s.group, "vgroup": s.vgroup, "lag_ms": s.values}
                for s in series
            ],
            "not_charted": self.history.dropped,
        }


def _rebalance(r: Rebalance) -> Json:
    return {
        "time": _iso(r.time_us // 1000),
        "topic": r.topic,
        "group": r.group,
        "cause": r.cause,
        "consumer_id": str(r.consumer_id),
        "consumers": r.consumers,
        "assigned": [{"consumer_id": str(c), "vgroups": list(v)} for c, v in r.assigned],
    }


def _row(row: dict[str, Any]) -> Json:
    """A statement's row as JSON: times as ISO 8601 in UTC."""
    return {k: _value(v) for k, v in row.items()}


def _value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return value


def _iso(ms: int) -> str:
    return _value(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))  # type: ignore[no-any-return]
