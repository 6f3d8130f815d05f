"""Follows: a poll on a Consume stream that stays open and is answered again after each
message, from that message's end, without another request.

A caught-up follower stands in its vnode's shared pass (server/dnode/live.py): each
pass that finds rows for its topic hands it the message through its sink, which frames
it once for every follower of the topic and sends it on the follower's stream, and the
follower stays where it is in the pass, moving on with it. So a follower costs the
server one sent message per message and nothing else: no request, no fencing, no read
of its own, no new waiter. Credit bounds what it sends ahead of its client (the
`follow` window; the client grants one per message it hands out), and its stream's
backlog what the stream holds for a client that does not read (server/dnode/backlog.py).
When it cannot stand (entries landed before it stood, a message too large or after a
meta event, a catalog change, its credit spent, the backlog full), it goes back to an
ordinary poll from its position, checked as any poll is, once there is credit and room,
and stands again after that poll's answer.

A follow ends with an error, when its consumer's epoch rises (the answer says the new
epoch), or when the server stops; the stream says so with `open` false.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.wire import answer_head, follow_answer_after
from sqltopic.server.dnode.backlog import Backlog, either
from sqltopic.server.dnode.live import LiveHub, Verdict
from sqltopic.server.dnode.poll import Message
from sqltopic.server.dnode.poll_wire import first_frame, limits_of, wait_s, with_names

# Most messages a follow may send ahead of its client's grants: a few keep a follower
# standing through a round trip; more would only pile up in the client's memory.
MAX_FOLLOW_WINDOW = 64
# Framed messages kept for the followers of the next topics of a pass: more than the
# distinct messages one pass delivers to, in the common case.
FRAMED_KEPT = 256

# (request, wait seconds, user) -> an ordinary poll's one frame (its errors raise)
Fetch = Callable[[pb.PollRequest, float, str], Awaitable[pb.PollResponse]]
# (request) -> the shared pass of the poll's vnode
HubOf = Callable[[pb.PollRequest], LiveHub]
# (consumer id) -> its epoch at the coordinator
EpochOf = Callable[[int], int]
# () -> the catalog's generation (it changes with every catalog change)
Generation = Callable[[], int]
# an answer to send on the stream, or one serialized already
Put = Callable[[pb.ConsumeResponse | bytes], None]


@dataclass(eq=False)
class Credit:
    """The messages a follow may still send before its client grants more, and the
    backlog of the stream it sends on (none: unbounded)."""

    window: int
    backlog: Backlog | None = None
    left: int = -1
    _granted: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.left = self.window

    def grant(self, n: int = 1) -> None:
        self.left = min(self.left + n, self.window)
        self._granted.set()

    def spend(self) -> None:
        self.left -= 1

    @property
    def blocked(self) -> bool:
        """Whether the follow may not send now: no credit, or its stream's backlog full."""
        return self.left <= 0 or (self.backlog is not None and self.backlog.full)

    async def wait(self, stopping: asyncio.Event) -> None:
        """Until there is credit and room on the stream (or the server stops)."""
        while self.left <= 0 and not stopping.is_set():
            self._granted.clear()
            await either(self._granted, stopping)
        await self.room(stopping)

    async def room(self, stopping: asyncio.Event) -> None:
        """Until the stream's backlog has room (or the server stops)."""
        if self.backlog is not None:
            await self.backlog.room(stopping)


@dataclass
class _Frames:
    """Messages framed lately: every follower of a topic gets the same message in a
    pass, and topics of one form over the same entries the same blocks (the pass
    evaluates them once, and makes one message of them), so one framing serves them
    all. Kept per message: how many frames it takes and its first frame serialized (a
    follower sends a message of one frame only), with the message itself: the key holds
    its blocks' (or its event's) identities, and `by_id` the message's own (the same
    object, looked up by identity first)."""

    found: dict[tuple[object, ...], tuple[Message, int, bytes]] = field(default_factory=dict)
    by_id: dict[tuple[int, bool], tuple[Message, int, bytes]] = field(default_factory=dict)

    def of(self, message: Message, names: bool) -> tuple[int, bytes]:
        hit = self.by_id.get((id(message), names))
        if hit is not None and hit[0] is message:
            return hit[1], hit[2]
        # a meta message's event is its own (vnodes of one service reach the same
        # versions with other events): its identity is in the key, held by the entry
        key = (message.kind, message.offset, message.end_offset, names, id(message.meta),
               *((id(b.data), b.table_name) for b in message.blocks))  # fmt: skip
        hit = self.found.get(key)
        if hit is None:
            if len(self.found) >= FRAMED_KEPT:
                self.found.clear()
                self.by_id.clear()
            hit = self.found[key] = (message, *first_frame(message, names))
        if len(self.by_id) >= FRAMED_KEPT:
            self.by_id.clear()
        self.by_id[id(message), names] = hit if hit[0] is message else (message, *hit[1:])
        return hit[1], hit[2]


class Follows:
    """Runs follows for a vnode service: its ordinary poll, its shared passes and its
    view of epochs are passed in."""

    def __init__(
        self, fetch: Fetch, hub_of: HubOf, epoch_of: EpochOf, generation: Generation,
        stopping: asyncio.Event,
    ) -> None:  # fmt: skip
        self._fetch = fetch
        self._hub_of = hub_of
        self._epoch_of = epoch_of
        self._generation = generation
        self._stopping = stopping
        self._frames = _Frames()

    async def run(
        self, ticket: int, request: pb.PollRequest, user: str, credit: Credit, put: Put,
        caller: Callable[[], str],
    ) -> None:  # fmt: skip
        """Answer `request` until the follow ends (its errors raise: the stream sends
        them as its last answer)."""
        wait = wait_s(request, None)
        follower = _Follower(ticket, request, credit, put, self._epoch_of, self._frames)
        position = await self._poll(follower, wait, user)
        while position is not None:
            await credit.wait(self._stopping)
            user = caller()  # the session may have ended meanwhile
            if self._stopping.is_set():
                follower.send(_empty(position, self._epoch_of(request.consumer_id)), last=True)
                return
            follower.position = position
            outcome, _, reached = await self._hub_of(request).wait(
                request.topic, position, request.consumer_id, request.epoch,
                follower.limits, wait, follower.deliver, follower.checked,
            )  # fmt: skip
            position = max(follower.position, reached)
            if outcome == "credit":
                continue
            if outcome == "quiet" and not self._ended(request):
                follower.send(_empty(position, self._epoch_of(request.consumer_id)))
                continue
            request.position = position  # look, or woken: an ordinary poll decides
            await credit.room(self._stopping)  # its answer goes on the stream too
            position = await self._poll(follower, wait, user)

    async def _poll(self, follower: _Follower, wait: float, user: str) -> int | None:
        """An ordinary poll's answer sent; where the follow goes on (None: it ended)."""
        follower.checked = self._generation()  # the poll checks the rights at least here
        frame = await self._fetch(follower.request, wait, user)
        last = frame.epoch > follower.request.epoch or self._stopping.is_set()
        follower.send(frame, last=last)
        if frame.WhichOneof("message") not in (None, "empty"):
            follower.credit.spend()
        return None if last else _end_of(frame)

    def _ended(self, request: pb.PollRequest) -> bool:
        return self._stopping.is_set() or self._epoch_of(request.consumer_id) > request.epoch


class _Follower:
    """One follow's sink: frames and sends what the pass delivers while it stands."""

    def __init__(
        self, ticket: int, request: pb.PollRequest, credit: Credit, put: Put,
        epoch_of: EpochOf, frames: _Frames,
    ) -> None:  # fmt: skip
        self.ticket = ticket
        self.request = request
        self.consumer_id = request.consumer_id  # read once: a delivery looks at them
        self.epoch = request.epoch
        self.credit = credit
        self.limits = limits_of(request)
        self.names = with_names(request)
        self.position = request.position
        self.checked = 0  # the catalog generation its last ordinary poll checked it at
        self._put = put
        self._epoch_of = epoch_of
        self._frames = frames
        self._head = answer_head(ticket)

    def deliver(self, message: Message) -> Verdict:
        """The pass's message for this follower, sent unless it must be an ordinary
        poll's (several frames, or the consumer's epoch rose)."""
        count, frame = self._frames.of(message, self.names)
        epoch = self._epoch_of(self.consumer_id)
        credit = self.credit
        if count > 1 or epoch > self.epoch or credit.blocked:
            return "skip"
        self._put(follow_answer_after(self._head, frame, epoch))
        credit.left -= 1
        self.position = message.end_offset
        return "leave" if credit.blocked else "stay"

    def send(self, frame: pb.PollResponse, last: bool = False) -> None:
        self._put(pb.ConsumeResponse(ticket=self.ticket, message=frame, open=not last))


def _end_of(frame: pb.PollResponse) -> int:
    kind = frame.WhichOneof("message")
    if kind is None:
        raise ValueError("a poll's first frame carries its message")
    end: int = getattr(frame, kind).end_offset
    return end


def _empty(position: int, epoch: int) -> pb.PollResponse:
    empty = pb.EmptyMessage(offset=position, end_offset=position)
    return pb.PollResponse(empty=empty, epoch=epoch)
