"""The consumer's membership as flows: login, subscribe, unsubscribe, close, the
heartbeat, and following the mnode's assignment (refresh, rejoin after removal).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqltopic.client.connection import LOGOUT_TIMEOUT_S
from sqltopic.client.effects import Flow, Rpc, Wake
from sqltopic.client.message import TopicPartition
from sqltopic.client.rebalance import Rebalancing
from sqltopic.client.state import (
    ASSIGNMENT_RECHECK_S,
    Held,
    Key,
    one,
    topic_names,
    with_params,
)
from sqltopic.errors import ConsumerFenced, Error, NoPermission, NotFoundError, TopicDropped
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

log = logging.getLogger("sqltopic.consumer")


class Membership(Rebalancing):
    """Flows of the group membership."""

    def subscribe(
        self, topics: Sequence[str], params: Mapping[str, Any] | None = None
    ) -> Flow[None]:
        self.check_open()
        self.check_not_in_callback("subscribe")
        names = with_params(topic_names(topics), params)
        if not names:
            yield from self.unsubscribe()
            return
        # a new subscription starts every vgroup anew (from the committed offsets): as
        # Kafka's eager rebalance, all are revoked first, then assigned from poll
        yield from self._let_go("revoke", list(self.held))
        yield from self._auto_commit(changed_only=False)
        yield from self._join(names)
        self.raise_callback_error()

    def unsubscribe(self) -> Flow[None]:
        self.check_open()
        self.check_not_in_callback("unsubscribe")
        yield from self._let_go("revoke", list(self.held))
        if self.consumer_id and self.topics:
            yield from self._auto_commit(changed_only=False)
            request = pb.UnsubscribeRequest(consumer_id=self.consumer_id, progress=self.progress())
            answer: pb.UnsubscribeResponse = yield from self._rpc("mnode", "Unsubscribe", request)
            self.epoch = answer.epoch
        yield from self._drop(list(self.held))
        self.topics = []
        self.topic_errors.clear()
        self.raise_callback_error()

    def close(self) -> Flow[None]:
        """Commit (with auto-commit), leave the group, log out; errors are only logged, so
        close always finishes."""
        if self.closed:
            return
        self.check_not_in_callback("close")
        yield from self._let_go("revoke", list(self.held))
        if self.consumer_id:
            yield from self._auto_commit(changed_only=False)
            request = pb.CloseRequest(consumer_id=self.consumer_id, progress=self.progress())
            leave = self._rpc("mnode", "CloseConsumer", request)
            yield from self._quietly("leaving the group", leave)
        self.closed = True
        yield from self._drop(list(self.held))
        for endpoint in [*self.tokens, ""]:  # the dnodes' sessions, then the mnode's
            logout = Rpc(
                "session", "Logout", pb.LogoutRequest(), endpoint, self.metadata_at(endpoint),
                LOGOUT_TIMEOUT_S,
            )  # fmt: skip
            yield from self._quietly("logging out", one(logout))
        self.tokens.clear()
        self.raise_callback_error()

    def heartbeat(self) -> Flow[None]:
        """One Heartbeat; wakes a waiting poll when the answer changes what it must do."""
        if not self.consumer_id or self.closed:
            return
        if (yield from self._beat()):
            yield Wake()

    def _beat(self) -> Flow[bool]:
        """Send a Heartbeat; True when its answer changed what a poll must do."""
        polled, self.polled = self.polled, False
        request, current = self._heartbeat_request(polled)
        self.reported = None  # until answered: a beat that fails lists every vgroup next
        try:
            answer: pb.HeartbeatResponse = yield from self._rpc("mnode", "Heartbeat", request)
        except ConsumerFenced:
            # our epoch is stale or we are gone: the refresh tells which (rejoin if gone)
            self.polled = self.polled or polled
            self.need_refresh = True
            return True
        except Error:
            self.polled = self.polled or polled  # report the poll with the next heartbeat
            raise
        if answer.takes_progress_changes and not answer.wants_full_progress:
            self.reported = current
        return self._on_heartbeat(answer)

    def _heartbeat_request(
        self, polled: bool
    ) -> tuple[pb.HeartbeatRequest, dict[Key, tuple[int | None, int]]]:
        """The heartbeat, and the progress it reports. It lists only the vgroups whose
        progress changed when the mnode took our last one and we hold the same vgroups
        (most entries do not change between two beats: a consumer of 40 bindings over 4
        vgroups holds 160), else every vgroup."""
        current = {key: (h.position, h.rows) for key, h in self.held.items()}
        reported = self.reported
        request = pb.HeartbeatRequest(consumer_id=self.consumer_id, epoch=self.epoch, polled=polled)
        if reported is not None and reported.keys() == current.keys():
            changed = [key for key, now in current.items() if reported[key] != now]
            request.progress.extend(self.progress(changed))
            request.progress_changed_only = True
        else:
            request.progress.extend(self.progress())
        return request, current

    def _on_heartbeat(self, answer: pb.HeartbeatResponse) -> bool:
        if answer.status == pb.CONSUMER_STATUS_REMOVED:
            self.need_rejoin = True
        elif answer.refresh_assignment:
            self.need_refresh = True
        flagged = {
            state.topic: _topic_error(state)
            for state in answer.topics
            if state.dropped or state.no_privilege
        }
        changed = {t: type(e) for t, e in flagged.items()} != {
            t: type(e) for t, e in self.topic_errors.items()
        }
        self.topic_errors = flagged
        return changed or self.need_rejoin or self.need_refresh

    def _membership(self, refresh: bool = False) -> Flow[None]:
        """What the heartbeat, a refused call or the clock asked for: log in again, rejoin,
        fetch the assignment (always with `refresh`)."""
        if self.need_login:
            yield from self.login()
        if self.need_rejoin and self.topics:
            yield from self._rejoin()
        rechecking = self.status == pb.CONSUMER_STATUS_REBALANCING
        if refresh or self.need_refresh or (rechecking and self.clock() >= self._recheck_at):
            yield from self._refresh()
        if self.need_rejoin and self.topics:  # the refresh found us removed
            yield from self._rejoin()

    def _join(self, names: list[str]) -> Flow[None]:
        """Subscribe (joining anew, or with our id to change topics or rejoin), then
        fetch the assignment from scratch."""
        request = self._subscribe_request(names)
        answer: pb.SubscribeResponse = yield from self._rpc("mnode", "Subscribe", request)
        self.consumer_id = answer.consumer_id
        # a server from before group types names no offsets group: vgroup groups only
        self.offsets_group = answer.offsets_group or self.config.group_id
        # the server's names of the subscriptions (a binding's canonical key); a server
        # from before parameterized topics sends none
        self.topics = list(answer.subscriptions) or names
        self.status = answer.status
        if answer.heartbeat_interval_ms > 0:
            self.heartbeat_s = answer.heartbeat_interval_ms / 1000
        self.epoch = 0
        self.reported = None  # a new member: its first heartbeat lists every vgroup
        self.need_rejoin = False
        self.topic_errors.clear()
        yield from self._refresh()

    def _rejoin(self) -> Flow[None]:
        """The mnode forgot us: drop every position and resume from committed offsets."""
        log.info("consumer %s was removed by the server; joining again", self.consumer_id)
        yield from self._let_go("lost", list(self.held))
        yield from self._drop(list(self.held))
        yield from self._join(self.topics)

    def _refresh(self) -> Flow[None]:
        self.need_refresh = False
        self._recheck_at = self.clock() + ASSIGNMENT_RECHECK_S
        request = pb.GetAssignmentRequest(consumer_id=self.consumer_id, known_epoch=self.epoch)
        try:
            answer: pb.GetAssignmentResponse = yield from self._rpc(
                "mnode", "GetAssignment", request
            )
        except (ConsumerFenced, NotFoundError):
            self.need_rejoin = True
            return
        except Error:
            self.need_refresh = True  # still to do
            raise
        if answer.status == pb.CONSUMER_STATUS_REMOVED:
            self.need_rejoin = True
            return
        self.status = answer.status
        let_go = False
        if not answer.unchanged:
            let_go = yield from self._apply(answer.assignments, answer.epoch)
        self.epoch = answer.epoch
        if let_go:
            # The mnode hands a revoked vgroup on once its holder commits it or reports
            # progress without it. Report now: an uncommitted vgroup (manual commits, or
            # nothing read yet) would otherwise wait for the next heartbeat.
            yield from self._quietly("reporting released vgroups", self._beat(), logging.INFO)

    def _apply(self, assignments: Iterable[pb.Assignment], epoch: int) -> Flow[bool]:
        """Keep the positions of vgroups still held, commit (on_revoke, auto-commit) and
        drop the others, start the new ones unset. True if a vgroup was let go."""
        new = {(a.topic, a.vgroup): a for a in assignments}
        # a vgroup granted again after the assignment we knew went through other hands:
        # our position there is stale (someone else may have committed beyond it)
        regained = [k for k, a in new.items() if k in self.held and a.granted_epoch > self.epoch]
        # commits of revoked vgroups go at the new epoch: the vnode takes one sent at the
        # revoking epoch as the final commit and hands the vgroup on at once
        self.epoch = epoch
        gone = [key for key in self.held if key not in new]
        # fenced there: the vnode already refused us, so there is nothing to commit
        lost = regained + [key for key in gone if self.held[key].fenced]
        revoked = [key for key in gone if not self.held[key].fenced]
        if lost:
            yield from self._let_go("lost", lost)
            yield from self._drop(lost)
        if revoked:
            yield from self._let_go("revoke", revoked)
            # best effort: the vnode may already fence us on a vgroup that moved on
            yield from self._auto_commit(changed_only=False, keys=revoked, level=logging.INFO)
            yield from self._drop([key for key in revoked if key in self.held])
        for key, a in new.items():
            held = self.held.setdefault(key, Held(a.topic, a.database, a.vgroup, a.endpoint))
            held.endpoint, held.fenced = a.endpoint, False
        return bool(gone)

    def assignment(self) -> Flow[list[TopicPartition]]:
        """The assigned vgroups (fresh from the mnode) with their positions and the
        vnodes' current retained ranges."""
        self.check_open()
        if self.consumer_id and not self.in_callback:  # a callback sees what it was told
            yield from self._membership(refresh=True)
            self.raise_callback_error()
        keys = sorted(self.held)
        ranges = yield from self._ranges(keys)
        return [
            TopicPartition(*key, self.held[key].position, *ranges[key])
            for key in keys
            if key in self.held
        ]


def _topic_error(state: pb.TopicState) -> Error:
    if state.dropped:
        return TopicDropped(f"topic {state.topic} was dropped; unsubscribe from it")
    return NoPermission(f"the user may no longer consume topic {state.topic} (REVOKE SUBSCRIBE)")
