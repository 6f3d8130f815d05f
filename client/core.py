"""The consumer without I/O, complete: `ConsumerCore` adds polling to the offset flows
(offsets.py) and membership flows (group.py) over the consumer's state
(state.py), so every operation of docs/client.md is a flow of effects
(effects.py). The thread-based `Consumer` (consumer.py) and the asyncio one
(aio.py) both drive this one core.

Positions: a vgroup's position is unset until its first answer; a poll without one lets
the vnode start from the group's committed offset or `auto.offset.reset`, and every
answer (empty ones included) says where it ended. A message moves the position to its
`end_offset` only when it is handed to the application; an empty answer moves it at once.
At most one poll per vgroup is in flight or buffered, so a long poll on one vgroup never
hides data waiting on another; `poll()` hands out ready messages round-robin.
"""

from __future__ import annotations

import logging

from sqltopic.client.effects import Fetch, Fetched, Flow, Grant, Spawn, Wait
from sqltopic.client.group import Membership
from sqltopic.client.message import Empty, Message
from sqltopic.client.state import REBALANCE_RETRY_S, TRANSIENT, Held
from sqltopic.errors import (
    AuthenticationFailed,
    ConfigError,
    ConsumerFenced,
    Error,
    NoPermission,
    TooLarge,
    TopicDropped,
    TopicNotFound,
)
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb

log = logging.getLogger("sqltopic.consumer")

# A held poll answers within fetch.max.wait.ms; this much more lets a large message arrive.
POLL_DEADLINE_MARGIN_S = 30.0
# While the server cannot be reached, poll tries the mnode again this often (not in a loop).
MEMBERSHIP_RETRY_S = 0.5
# consume()'s batch limit: confluent-kafka's (a larger batch is a ValueError there too).
MAX_CONSUME_MESSAGES = 1_000_000


class ConsumerCore(Membership):
    """The whole consumer without I/O: membership, offsets and polling as flows."""

    def poll(self, timeout: float | None) -> Flow[Message | None]:
        """The next message from any assigned vgroup, or None once `timeout` seconds
        passed (None: wait as long as it takes)."""
        self.check_open()
        self.check_not_in_callback("poll")
        if timeout is not None and timeout < 0:
            raise ConfigError(f"poll: timeout {timeout} is negative; give seconds >= 0 or None")
        self.polled = True
        deadline = None if timeout is None else self.clock() + timeout
        if self.sharing:  # what the last polls handed out is done (Kafka share groups)
            yield from self._auto_commit(changed_only=True)
        while True:
            yield from self._maintain()
            yield from self._announce()
            self.raise_callback_error()
            message = yield from self._handed_out()
            if message is not None:
                return message
            yield from self._launch()
            done: Fetched | None = yield Wait(self._wait_s(deadline))
            if done is not None:
                self._on_fetched(done)
            # answers without a message (empties, refusals) may keep coming: the
            # deadline holds all the same, once what arrived was looked at
            if deadline is not None and self.clock() >= deadline:
                return (yield from self._handed_out())

    def _handed_out(self) -> Flow[Message | None]:
        """A message ready now, if any (its follow granted what it is owed)."""
        message = self._take_ready()
        if message is not None:
            yield from self._grant()
        return message

    def consume(self, num_messages: int, timeout: float | None) -> Flow[list[Message]]:
        """confluent-kafka's batch: up to `num_messages` messages, polling until there
        are that many or `timeout` seconds passed (negative or None: no limit)."""
        if isinstance(num_messages, bool) or not isinstance(num_messages, int):
            raise ConfigError(f"consume: num_messages {num_messages!r} is not an int")
        if not 1 <= num_messages <= MAX_CONSUME_MESSAGES:
            raise ConfigError(
                f"consume: num_messages {num_messages} is out of range 1..{MAX_CONSUME_MESSAGES}"
            )
        deadline = None if timeout is None or timeout < 0 else self.clock() + timeout
        messages: list[Message] = []
        while len(messages) < num_messages:
            left = None if deadline is None else max(0.0, deadline - self.clock())
            message = yield from self.poll(left)
            if message is not None:
                messages.append(message)
            elif deadline is not None and self.clock() >= deadline:
                break
        return messages

    def _maintain(self) -> Flow[None]:
        """What the heartbeat, a fenced poll or the clock asked for, before polling on."""
        if self.clock() >= self._membership_at:
            try:
                yield from self._membership()
            except TRANSIENT as err:
                # the server is unreachable (restarting) or catching up: poll on, retry soon
                log.info("membership call failed, retrying: %s", err)
                self._membership_at = self.clock() + MEMBERSHIP_RETRY_S
        for topic in self.topics:
            if topic in self.topic_errors:
                raise self.topic_errors[topic].with_traceback(None)
        if self.config.enable_auto_commit and self.clock() >= self._commit_at:
            if self.sharing:  # no call: the next polls carry the acknowledgements
                yield from self._auto_commit(changed_only=True)
            elif not self.auto_committing:
                # in the background, as Kafka's clients do: a poll hands out what
                # arrived meanwhile instead of waiting out the commit's durable round
                # trip (a process's consumers commit at one instant: their messages
                # waited ~100 ms each time, the p99 of docs/performance.md §9.12). The
                # positions are taken now: what earlier polls handed out, not the
                # message this one is about to (at least once)
                self._commit_at = self.next_commit_at()
                offsets = self.changed_offsets()
                if offsets:
                    self.auto_committing = True
                    yield Spawn(self.background_commit(offsets))

    def _launch(self) -> Flow[None]:
        now = self.clock()
        for key, held in list(self.held.items()):
            busy = held.ticket is not None or held.ready is not None or key in self.paused
            if busy or held.retry_at > now or held.topic in self.topic_errors:
                continue
            if held.endpoint and held.endpoint not in self.tokens:
                try:  # a cluster's dnode: its own session first
                    yield from self.login_at(held.endpoint)
                except TRANSIENT:
                    held.retry_at = now + REBALANCE_RETRY_S  # the dnode is away
                    continue
            held.ticket, held.retry_at = next(self._tickets), 0.0
            self._in_flight[held.ticket] = key
            timeout = self.config.fetch_max_wait_ms / 1000 + POLL_DEADLINE_MARGIN_S
            acks = self.pending_acks.pop(key, None)
            if acks:
                self.acks_in_flight[held.ticket] = (key, acks)
            request = self._poll_request(held, acks)
            follow = 0 if self.sharing or held.no_follow else self.follow_window
            held.following, held.no_follow = follow > 0, False
            yield Fetch(
                held.ticket, held.topic, held.database, held.vgroup, held.endpoint,
                request, self.metadata_at(held.endpoint), timeout, follow,
            )  # fmt: skip

    def _wait_s(self, deadline: float | None) -> float | None:
        """How long a poll may wait for a fetch before it must look again."""
        now = self.clock()
        due = [held.retry_at for held in self.held.values() if held.retry_at > now]
        if self.need_login or self.need_refresh or (self.need_rejoin and self.topics):
            due.append(self._membership_at)
        if deadline is not None:
            due.append(deadline)
        if self.status == pb.CONSUMER_STATUS_REBALANCING:
            due.append(self._recheck_at)
        if self.config.enable_auto_commit:
            due.append(self._commit_at)
        return max(0.0, min(due) - now) if due else None

    def _on_fetched(self, done: Fetched) -> None:
        if done.epoch > self.epoch:
            self.need_refresh = True  # our assignment moved on: take it up now
        self.acks_in_flight.pop(done.ticket, None)  # answered: the vnode applied them
        if done.open:
            key = self._in_flight.get(done.ticket)
        else:
            key = self._in_flight.pop(done.ticket, None)
        held = self.held.get(key) if key is not None else None
        if held is None or held.ticket != done.ticket:
            return  # a poll of a vgroup since dropped or seeked
        if not done.open:
            held.ticket = None
            self.grants.pop(done.ticket, None)
        result = done.result
        if isinstance(result, TooLarge) and held.following:
            held.no_follow = True  # the message needs several frames: one Poll reads it
        elif isinstance(result, Message | Empty):
            if held.ready is not None:  # a follow's: in order, behind the one ready
                held.more.append(result)
            elif isinstance(result, Empty):
                held.position = result.end_offset
            else:
                held.ready = result
        else:
            self._on_poll_error(held, result)

    def _on_poll_error(self, held: Held, error: Error) -> None:
        if isinstance(error, (ConsumerFenced, *TRANSIENT)):
            # Fenced: the assignment moved on (refresh it); else a vnode or server away.
            # (a poll is also refused on a vgroup being revoked, which is still committable)
            self.need_refresh = self.need_refresh or isinstance(error, ConsumerFenced)
            held.retry_at = self.clock() + REBALANCE_RETRY_S
            return
        if isinstance(error, AuthenticationFailed):
            # the session died (its node restarted): log in there again
            if held.endpoint:
                self.tokens.pop(held.endpoint, None)
            else:
                self.need_login = True
            return
        if isinstance(error, TopicNotFound):
            # it existed when we subscribed: what the heartbeat will report as dropped
            error = TopicDropped(f"topic {held.topic} was dropped; unsubscribe from it")
        if isinstance(error, TopicDropped | NoPermission):
            self.topic_errors[held.topic] = error
        raise error

    def _take_ready(self) -> Message | None:
        keys = list(self.held)
        for step in range(len(keys)):
            index = (self._turn + step) % len(keys)
            if keys[index] in self.paused:
                continue  # kept until resumed
            held = self.held[keys[index]]
            message, held.ready = held.ready, None
            if message is not None:
                held.position = message.end_offset
                held.rows += message.row_count
                self._turn = index + 1
                self._behind(held)
                self.delivered(message)
                return message
        return None

    def _grant(self) -> Flow[None]:
        """Grant what the follows are owed, in halves of the window: a follow keeps at
        least half its window while the application keeps up, and sends one grant
        for every few messages instead of one each."""
        due = max(self.follow_window // 2, 1)
        tickets = [t for t, n in self.grants.items() if n >= due for _ in range(n)]
        if tickets:
            for ticket in set(tickets):
                del self.grants[ticket]
            yield Grant(tuple(tickets))

    def _behind(self, held: Held) -> None:
        """After `held.ready` was handed out: its follow may send one more, and what
        arrived behind it moves up (empties move the position)."""
        if held.following and held.ticket is not None:
            self.grants[held.ticket] = self.grants.get(held.ticket, 0) + 1
        while held.more and held.ready is None:
            item = held.more.popleft()
            if isinstance(item, Empty):
                held.position = item.end_offset
            else:
                held.ready = item
