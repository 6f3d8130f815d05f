"""The `Mnode` gRPC service: Subscribe, Heartbeat (and Heartbeats, many consumers' at
once), GetAssignment, Unsubscribe, CloseConsumer (and Close, its deprecated first name),
answered from the coordinator; plus the rebalance timer that removes silent consumers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

from sqltopic.errors import (
    ConfigError,
    Error,
    InvalidRequest,
    NoPermission,
    TopicNotFound,
    excerpt,
)
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import call_status
from sqltopic.server.common.group_names import check_text, group_type, shares
from sqltopic.server.common.turns import in_turns
from sqltopic.server.core.engine import Engine
from sqltopic.server.core.users import check_consumer_user
from sqltopic.server.dnode.share_keys import key_source
from sqltopic.server.mnode import access
from sqltopic.server.mnode.auth import Sessions
from sqltopic.server.mnode.coordinator import (
    AssignmentView,
    Coordinator,
    Liveness,
    Member,
    Progress,
)
from sqltopic.server.mnode.share_settings import ShareSettings
from sqltopic.server.rpc.rpc import RESETS, Context, streaming, unary
from sqltopic.sql.model import no_database
from sqltopic.sql.topic.params import subscribed, topic_of

log = logging.getLogger("sqltopic.server")

# TDengine's mnode checks consumers every 2 s: silent consumers are found within a tick.
REBALANCE_INTERVAL_S = 2.0
# Catalog objects per ReadCatalog frame: ~0.5 KB each, a few MB a frame.
CATALOG_OBJECTS_PER_FRAME = 10_000
# Progress reports (SHOW SUBSCRIPTIONS' positions and row counts) are saved this often,
# not at every tick: a save writes the whole group state (~0.1 s of CPU with a thousand
# consumers), and after a crash the counts are at most this old. Memberships and
# assignments are saved before their change is answered; offsets live in the vnodes.
PROGRESS_SAVE_INTERVAL_S = 30.0
# The timer wakes this long after a deadline (and never sooner than this), so that the
# member is past it (expiry is `now > deadline`) despite clock granularity, and a deadline
# in the past cannot make the timer spin.
EXPIRY_SLACK_S = 0.005
# Topics one Subscribe may name: far more than a consumer follows, and a bound on the
# work one request makes the mnode do.
MAX_TOPICS_PER_SUBSCRIBE = 4096
# Beats one Heartbeats call may carry: a client process's consumers of one server, with
# room to spare; a bound on the work (and the answer's size) of one request.
MAX_BEATS_PER_CALL = 10_000
# A host name is at most 253 characters (RFC 1035); room for a port and brackets.
MAX_FQDN = 270
STATUS = {
    "ready": pb.CONSUMER_STATUS_READY,
    "rebalancing": pb.CONSUMER_STATUS_REBALANCING,
    "removed": pb.CONSUMER_STATUS_REMOVED,
}


class MnodeService(pb_grpc.MnodeServicer):
    def __init__(self, engine: Engine, sessions: Sessions, coordinator: Coordinator) -> None:
        self._engine = engine
        self._sessions = sessions
        self._coordinator = coordinator

    @unary
    async def Subscribe(
        self, request: pb.SubscribeRequest, context: Context
    ) -> pb.SubscribeResponse:
        session = self._sessions.session(context.invocation_metadata())
        names = check_subscribe_request(request)
        self._check_user(request.consumer_id, session.user)
        topics = []
        for name in names:
            self._engine.topic_vgroups(name)  # TopicNotFound
            self._engine.check_subscribe(session.user, name)  # NoPermission
            topic = self._engine.catalog.topic(topic_of(name))
            topics.append(subscribed(topic, name))  # ConfigError for a bad binding
        topics = list(dict.fromkeys(topics))
        liveness = Liveness.of(
            request.session_timeout_ms,
            request.max_poll_interval_ms,
            request.heartbeat_interval_ms,
        )
        mode = group_type(request.group_type)
        share = self._share_settings(request, session.user, mode, topics) if shares(mode) else None
        member = self._coordinator.subscribe(
            request.consumer_id,
            request.group_id,
            topics,
            client_id=request.client_id,
            user=session.user,
            fqdn=request.fqdn or context.peer(),
            liveness=liveness,
            parameters=_parameters(request, liveness),
            mode=mode,
            share=share,
        )
        await asyncio.to_thread(self._coordinator.persist)
        return pb.SubscribeResponse(
            consumer_id=member.id,
            epoch=member.epoch,
            status=STATUS[member.status],
            heartbeat_interval_ms=liveness.heartbeat_interval_ms,
            subscriptions=topics,
            offsets_group=member.group,
        )

    @unary
    async def Heartbeat(
        self, request: pb.HeartbeatRequest, context: Context
    ) -> pb.HeartbeatResponse:
        session = self._sessions.session(context.invocation_metadata())
        answer = self._beat(request, session.user)
        if self._coordinator.unsaved:  # a release in it; else no trip to a thread
            await asyncio.to_thread(self._coordinator.persist)
        return answer

    @unary
    async def Heartbeats(
        self, request: pb.HeartbeatsRequest, context: Context
    ) -> pb.HeartbeatsResponse:
        if len(request.beats) > MAX_BEATS_PER_CALL:
            raise InvalidRequest(
                f"Heartbeats: {len(request.beats)} beats in one call, more than "
                f"{MAX_BEATS_PER_CALL}: send them in several calls"
            )
        # a process's consumers beat in one call: answered in turns of the event loop
        results = [self._beat_result(beat) async for beat in in_turns(request.beats)]
        if self._coordinator.unsaved:  # one save for every release of the call
            await asyncio.to_thread(self._coordinator.persist)
        return pb.HeartbeatsResponse(results=results)

    def _beat_result(self, beat: pb.Beat) -> pb.BeatResult:
        """What the beat's own Heartbeat call would have answered, its error included."""
        try:
            session = self._sessions.named(beat.token)
            return pb.BeatResult(heartbeat=self._beat(beat.heartbeat, session.user))
        except Error as err:
            return pb.BeatResult(error=call_status(err))

    def _beat(self, request: pb.HeartbeatRequest, user: str) -> pb.HeartbeatResponse:
        """One consumer's heartbeat by `user` (the caller of its session); the
        coordinator's state may need a save afterwards (`unsaved`)."""
        progress = _progress(request.progress)
        self._check_user(request.consumer_id, user)
        member = self._coordinator.heartbeat(
            request.consumer_id, request.polled, progress, request.progress_changed_only
        )
        if member is None:
            return pb.HeartbeatResponse(
                status=pb.CONSUMER_STATUS_REMOVED, takes_progress_changes=True
            )
        return pb.HeartbeatResponse(
            epoch=member.epoch,
            refresh_assignment=member.epoch > request.epoch,
            status=STATUS[member.status],
            topics=self._topic_states(member),
            takes_progress_changes=True,
            wants_full_progress=member.listed is None,
        )

    def _share_settings(
        self, request: pb.SubscribeRequest, user: str, mode: str, topics: list[str]
    ) -> ShareSettings:
        """A shared group's settings as asked. The server writes its dead letters, so
        the subscriber must hold WRITE on their database (which must exist); a group.key
        (key_shared groups only) must name a column or tag of every topic."""
        share = ShareSettings.of(
            request.ack_timeout_ms, request.max_deliveries, request.dead_letter_table,
            request.group_key,
        )  # fmt: skip
        if share.group_key is not None:
            if mode != "key_shared":
                raise ConfigError(
                    f"group.key: a key_shared group's setting; group {request.group_id} is "
                    f"{mode} (set group.type key_shared, or drop group.key)"
                )
            catalog = self._engine.catalog
            for name in topics:
                key_source(catalog, catalog.topic(topic_of(name)), share.group_key)
        if share.dead_letter_table is not None:
            db_name, table = share.dead_letter_table
            catalog = self._engine.catalog
            db = catalog.database(db_name)  # NotFoundError
            if not access.visible(catalog, user, db):
                raise no_database(db_name)
            if not access.may_write_schema(catalog, user, db):
                raise NoPermission(
                    f"dead.letter.table {db_name}.{table}: user {user} may not create tables "
                    f"and write rows in database {db_name}; GRANT WRITE ON {db_name}.* TO "
                    f"{user}, or name a table in a database of your own"
                )
        return share

    def _check_user(self, consumer_id: int, user: str) -> None:
        """NoPermission when `consumer_id` names another user's live consumer."""
        member = self._coordinator.member(consumer_id)
        if member is not None:
            check_consumer_user(member, user)

    def _topic_states(self, member: Member) -> list[pb.TopicState]:
        states = []
        # the bindings of one topic share its existence and rights: look once per topic
        known: dict[str, pb.TopicState | None] = {}
        for subscription in member.topics:
            topic = topic_of(subscription)
            if topic not in known:
                known[topic] = self._topic_state(member, subscription)
            state = known[topic]
            if state is not None:
                states.append(pb.TopicState(topic=subscription, dropped=state.dropped,
                                            no_privilege=state.no_privilege))  # fmt: skip
        return states

    def _topic_state(self, member: Member, topic: str) -> pb.TopicState | None:
        """The topic's state for its subscriber, None when it may go on consuming."""
        try:
            self._engine.topic_vgroups(topic)
        except TopicNotFound:
            return pb.TopicState(topic=topic, dropped=True)
        # a REVOKE (or DROP USER) reaches a running consumer here; its polls fail
        if not self._engine.may_subscribe(member.user, topic):
            return pb.TopicState(topic=topic, no_privilege=True)
        return None

    @unary
    async def GetAssignment(
        self, request: pb.GetAssignmentRequest, context: Context
    ) -> pb.GetAssignmentResponse:
        session = self._sessions.session(context.invocation_metadata())
        self._check_user(request.consumer_id, session.user)
        # one consistent view: an epoch paired with another epoch's vgroups would
        # leave the consumer short of vgroups with nothing telling it to ask again
        view = self._coordinator.assignment_of(request.consumer_id)
        if view is None:
            return pb.GetAssignmentResponse(status=pb.CONSUMER_STATUS_REMOVED)
        if view.epoch == request.known_epoch:
            return pb.GetAssignmentResponse(
                epoch=view.epoch, unchanged=True, status=STATUS[view.status]
            )
        assignments = await asyncio.to_thread(self._assignments, view)
        return pb.GetAssignmentResponse(
            epoch=view.epoch, assignments=assignments, status=STATUS[view.status]
        )

    @streaming
    async def ReadCatalog(
        self, request: pb.ReadCatalogRequest, context: Context
    ) -> AsyncIterator[pb.ReadCatalogResponse]:
        session = self._sessions.session(context.invocation_metadata())
        rows = await asyncio.to_thread(
            self._engine.catalog_rows, session.user, request.topic, request.database,
            request.table,
        )  # fmt: skip
        for start in range(0, len(rows), CATALOG_OBJECTS_PER_FRAME):
            yield pb.ReadCatalogResponse(objects=[
                pb.CatalogObject(kind=k, key=key, body=body)
                for k, key, body in rows[start : start + CATALOG_OBJECTS_PER_FRAME]
            ])  # fmt: skip

    @unary
    async def Routes(self, request: pb.RoutesRequest, context: Context) -> pb.RoutesResponse:
        session = self._sessions.session(context.invocation_metadata())
        routes = await asyncio.to_thread(self._engine.routes, session.user)
        return pb.RoutesResponse(
            epoch=routes.epoch, routed=routes.routed,
            databases=[
                pb.DatabaseRoutes(database=db, vgroups=[
                    pb.VgroupRoute(vgroup=v, dnode=d, endpoint=e) for v, d, e in vgroups
                ])
                for db, vgroups in routes.databases
            ],
        )  # fmt: skip

    def _assignments(self, view: AssignmentView) -> list[pb.Assignment]:
        out = []
        for topic, vgroup, granted in view.vgroups:
            try:
                db, _ = self._engine.topic_vgroups(topic)
                endpoint, begin, end = self._engine.vgroup_source(vgroup)
            except TopicNotFound:
                continue  # dropped since: the heartbeat reports it
            out.append(
                pb.Assignment(
                    topic=topic, database=db, vgroup=vgroup, endpoint=endpoint,
                    begin=begin, end=end, granted_epoch=granted,
                )
            )  # fmt: skip
        return out

    @unary
    async def Unsubscribe(
        self, request: pb.UnsubscribeRequest, context: Context
    ) -> pb.UnsubscribeResponse:
        session = self._sessions.session(context.invocation_metadata())
        progress = _progress(request.progress)
        self._check_user(request.consumer_id, session.user)
        member = self._coordinator.unsubscribe(request.consumer_id, progress)
        await asyncio.to_thread(self._coordinator.persist)
        return pb.UnsubscribeResponse(epoch=member.epoch)

    @unary
    async def CloseConsumer(self, request: pb.CloseRequest, context: Context) -> pb.CloseResponse:
        return await self._close(request, context)

    @unary
    async def Close(self, request: pb.CloseRequest, context: Context) -> pb.CloseResponse:
        """CloseConsumer's deprecated first name, served for clients that still use it."""
        return await self._close(request, context)

    async def _close(self, request: pb.CloseRequest, context: Context) -> pb.CloseResponse:
        session = self._sessions.session(context.invocation_metadata())
        progress = _progress(request.progress)
        self._check_user(request.consumer_id, session.user)
        self._coordinator.close(request.consumer_id, progress)
        await asyncio.to_thread(self._coordinator.persist)
        return pb.CloseResponse()


async def rebalance_timer(
    coordinator: Coordinator, stop: asyncio.Event, interval_s: float = REBALANCE_INTERVAL_S
) -> None:
    """Remove consumers whose session or poll interval ran out (checked every
    `interval_s`, and at the earliest deadline known when the timer went to sleep), save
    the group state every `interval_s` if a removal changed it, and the progress reports
    every PROGRESS_SAVE_INTERVAL_S (and at a graceful stop)."""
    clock = coordinator.clock
    tick = clock() + interval_s
    progress_due = clock() + PROGRESS_SAVE_INTERVAL_S
    while not stop.is_set():
        deadline = coordinator.next_deadline()
        wake = tick if deadline is None else min(tick, deadline + EXPIRY_SLACK_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(wake - clock(), EXPIRY_SLACK_S))
        for member in coordinator.expire():
            log.info("consumer %d of group %s removed (no heartbeat or poll in time)",
                     member.id, member.group)  # fmt: skip
        if clock() < tick:
            continue
        tick = clock() + interval_s
        progress = clock() >= progress_due
        if progress:
            progress_due = clock() + PROGRESS_SAVE_INTERVAL_S
        elif not coordinator.unsaved:
            continue  # nothing to save: no trip to a thread
        try:
            await asyncio.to_thread(coordinator.persist, progress)
        except OSError:
            log.exception("saving the consumer group state failed; retrying at the next tick")


def _progress(reports: Iterable[pb.VgroupProgress]) -> list[tuple[str, int, Progress]]:
    """The progress reports, checked: positions and row counts are never negative (one
    comprehension, then a check: a consumer lists a hundred vgroups every beat)."""
    out = [
        (r.topic, r.vgroup, Progress(r.position or (0 if r.HasField("position") else None), r.rows))
        for r in reports
    ]
    for topic, vgroup, p in out:
        if p.rows < 0 or (p.position is not None and p.position < 0):
            raise ConfigError(
                f"progress of topic {excerpt(topic)} vgroup {vgroup}: position "
                f"{p.position} and rows {p.rows} must not be negative"
            )
    return out


def check_subscribe_request(request: pb.SubscribeRequest) -> list[str]:
    """The request's topics, without repeats, once its fields are checked: a known
    `auto_offset_reset`, a bounded topic list, `fqdn` and `client_id`, and counters that
    are not negative (the liveness settings are checked by `Liveness.of`)."""
    if request.auto_offset_reset not in RESETS:
        raise ConfigError(
            f"auto_offset_reset: unknown value {request.auto_offset_reset}; use "
            "OFFSET_RESET_EARLIEST, _LATEST or _NONE"
        )
    if len(request.topics) > MAX_TOPICS_PER_SUBSCRIBE:
        raise ConfigError(
            f"topics: {len(request.topics)} names; a consumer subscribes to at most "
            f"{MAX_TOPICS_PER_SUBSCRIBE} topics"
        )
    check_text("fqdn", request.fqdn, MAX_FQDN)
    if request.auto_commit_interval_ms < 0:
        raise ConfigError(f"auto_commit_interval_ms: {request.auto_commit_interval_ms} is negative")
    return list(dict.fromkeys(request.topics))


def _parameters(request: pb.SubscribeRequest, liveness: Liveness) -> dict[str, str]:
    """The consumer's settings as SHOW CONSUMERS lists them."""
    return {
        "auto.offset.reset": RESETS[request.auto_offset_reset],
        "enable.auto.commit": str(request.enable_auto_commit).lower(),
        "auto.commit.interval.ms": str(request.auto_commit_interval_ms),
        "session.timeout.ms": str(liveness.session_timeout_ms),
        "max.poll.interval.ms": str(liveness.max_poll_interval_ms),
        "heartbeat.interval.ms": str(liveness.heartbeat_interval_ms),
        "msg.with.table.name": str(request.msg_with_table_name).lower(),
    }
