"""`sqltopic.Consumer`: consuming topics with plain (thread-based) grpc.

All protocol logic is in the sans-IO core (core.py); this module performs its
effects: unary calls on one channel per endpoint (plain text or TLS: tls.py), each
vgroup's `Vnode.Poll` stream on a small thread pool (so a held poll on one vgroup never
hides data on another), results through a queue, and a heartbeat thread. A lock keeps
the core consistent between the application's thread, the heartbeat thread and
`commit_async`'s thread; it is never held during I/O.

Not thread-safe for the application: use a consumer from one thread (the heartbeat and
commit_async threads are its own).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import grpc

import sqltopic.client.effects as fx
from sqltopic.client import beats, streams
from sqltopic.client.config import ConsumerConfig, consumer_transport, parse_config
from sqltopic.client.connection import _error_of, _translated
from sqltopic.client.core import ConsumerCore
from sqltopic.client.message import Message, TopicPartition, VgroupLag
from sqltopic.client.readers import STREAM_JOIN_S, handled
from sqltopic.errors import Error, TooLarge
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc
from sqltopic.proto.status import unimplemented

log = logging.getLogger("sqltopic.consumer")
T = TypeVar("T")
C = TypeVar("C")
# A rebalance callback: (consumer, [TopicPartition]); its value is ignored.
RebalanceCallback = Callable[[Any, list[TopicPartition]], object]
Callbacks = dict[fx.RebalanceKind, Any]

# Threads that read streamed Polls (a message over one frame; held polls take none):
# more such messages at once wait their turn.
MAX_POLL_THREADS = 32
# `for msg in consumer` polls in slices this long, so that close() ends the loop.
ITERATION_POLL_S = 1.0
STUBS = {"session": pb_grpc.SessionStub, "mnode": pb_grpc.MnodeStub, "vnode": pb_grpc.VnodeStub}


class Consumer:
    """A member of a consumer group (docs/client.md). `Consumer(config)` checks the config
    (ConfigError) and logs in (AuthenticationFailed); nothing is consumed until
    `subscribe`. Use it as a context manager or call `close()`."""

    def __init__(self, config: Mapping[str, object] | ConsumerConfig) -> None:
        parsed = config if isinstance(config, ConsumerConfig) else parse_config(config)
        self._transport = consumer_transport(parsed)  # ConfigError for a bad PEM file
        self._core = ConsumerCore(parsed)
        self._core.follow_window = streams.FOLLOW_WINDOW
        self._commit_tickets = itertools.count(streams.COMMIT_TICKETS)
        self._lock = threading.Lock()  # guards the core (steps of flows)
        self._calls_lock = threading.Lock()  # guards _calls and _channels
        self._channels: dict[str, grpc.Channel] = {}
        self._shut = False  # channels closed: no more calls
        self._calls: dict[int, Any] = {}  # tickets of polls in flight: their cancel()
        self._streams: dict[str, streams.ConsumeStream] = {}  # vnode endpoint -> its stream
        # streams replaced after a new login, whose readers shutdown still waits for
        self._retired: list[streams.ConsumeStream] = []
        # the ends of cancelled Fetches not handled yet by gRPC (`_cancel`)
        self._ending: list[threading.Event] = []
        self._streaming = True  # until a server answers Consume with UNIMPLEMENTED
        self._results: queue.Queue[fx.Fetched | None] = queue.Queue()
        self._pool = ThreadPoolExecutor(MAX_POLL_THREADS, thread_name_prefix="sqltopic-poll")
        self._committer: ThreadPoolExecutor | None = None
        self._background: set[Future[None]] = set()  # work on the commit thread
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._beats = beats.pool_for(parsed.server)  # heartbeats sent with the process's
        self._callbacks: Callbacks = {}
        try:
            self._run(self._core.login())
        except BaseException:
            self._shutdown()
            raise

    # --- the consumer API (docs/client.md) ---------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Join the group for `topics` (replacing any earlier list; [] = unsubscribe).
        Raises TopicNotFound, NoPermission. A parameterized topic takes its values in
        `params` (with several topics: `{topic: {name: value}}`); each binding is its own
        subscription, for groups and offsets (docs/sql.md, "Parameterized topics").
        The callbacks, as confluent-kafka's, get `(consumer, [TopicPartition])`:
        `on_assign` from poll before new vgroups are fetched, `on_revoke` before vgroups
        are let go (commit them there), `on_lost` when they were taken away (`on_revoke`
        if not given). See docs/client.md."""
        self._callbacks = callbacks(on_assign, on_revoke, on_lost)
        self._run(self._core.subscribe(topics, params))
        self._start_heartbeat()

    def unsubscribe(self) -> None:
        """Drop every topic (committing positions first with auto-commit)."""
        self._run(self._core.unsubscribe())

    def subscription(self) -> list[str]:
        return list(self._core.topics)

    def poll(self, timeout: float | None = 1.0) -> Message | None:
        """The next message, or None after `timeout` seconds (None: wait for one)."""
        return self._run(self._core.poll(timeout))

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """confluent-kafka's batch: up to `num_messages` messages, polling until there
        are that many or `timeout` seconds passed (-1 or None: no limit)."""
        return self._run(self._core.consume(num_messages, timeout))

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        *,
        asynchronous: bool = False,
    ) -> Future[None] | None:
        """Store offsets durably: `message.end_offset` for its vgroup, the given
        `offsets`, or (neither) every assigned vgroup's position. `asynchronous=True`
        (confluent-kafka's keyword) is `commit_async`: its Future is returned."""
        if asynchronous:
            return self.commit_async(message, offsets)
        with self._lock:
            batch = self._core.offsets_to_commit(message, offsets)
        self._run(self._core.commit(batch))
        return None

    def ack(self, message: Message, rows: Sequence[int] | None = None) -> int:
        """Shared groups: accept `rows` of `message` (0-based positions in
        `message.rows()`; None: all): they are never delivered again, durably once this
        returns. The rows settled (a row whose lease ran out is not)."""
        return self._run(self._core.settle("ack", message, rows, pb.ACK_TYPE_ACCEPT))

    def nack(self, message: Message, rows: Sequence[int] | None = None) -> int:
        """Shared groups: release `rows` of `message` (None: all): they are delivered
        again at once, to any consumer of the group, with their delivery count raised."""
        return self._run(self._core.settle("nack", message, rows, pb.ACK_TYPE_RELEASE))

    def commit_async(
        self, message: Message | None = None, offsets: Sequence[TopicPartition] | None = None
    ) -> Future[None]:
        """`commit` on a background thread: the offsets are taken now, stored in call
        order; the Future fails with the commit's error."""
        with self._lock:
            batch = self._core.offsets_to_commit(message, offsets)
        return self._in_background(self._core.commit(batch))

    def _in_background(self, flow: fx.Flow[None]) -> Future[None]:
        """Run `flow` on the commit thread: commits and auto-commits in call order."""
        with self._lock:
            if self._committer is None:
                self._committer = ThreadPoolExecutor(1, thread_name_prefix="sqltopic-commit")
            future = self._committer.submit(self._run, flow)
            self._background.add(future)
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._background.discard(future)

    def assignment(self) -> list[TopicPartition]:
        """Assigned vgroups: offset = position (None before the first poll), begin/end =
        the vnode's retained range now."""
        return self._run(self._core.assignment())

    def position(self, parts: Sequence[TopicPartition]) -> list[TopicPartition]:
        with self._lock:
            return self._core.position(parts)

    def assign(self, parts: Sequence[TopicPartition]) -> None:
        """confluent-kafka's idiom in `on_assign`: seek each of these assigned vgroups to
        its `offset` (a version, OFFSET_BEGINNING -2, OFFSET_END -1; None, -1000 and
        -1001 leave it). Not a manual assignment: the group assigns vgroups."""
        self._run(self._core.assign(parts))

    def pause(self, parts: Sequence[TopicPartition]) -> None:
        """Stop fetching these assigned vgroups (positions kept) until `resume`, or until
        they are let go."""
        with self._lock:
            self._core.pause(parts)

    def resume(self, parts: Sequence[TopicPartition]) -> None:
        with self._lock:
            self._core.resume(parts)

    def paused(self) -> list[TopicPartition]:
        """The paused vgroups, with their positions."""
        with self._lock:
            return self._core.paused_parts()

    def committed(
        self, parts: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """Copies of `parts` with the group's committed offsets (None where it never
        committed); `timeout` (seconds) bounds each call to a vnode."""
        return self._run(self._core.committed(parts, timeout))

    def seek(self, part: TopicPartition) -> None:
        """Next poll of `part`'s vgroup reads from `part.offset` (OffsetOutOfRange outside
        the vnode's [begin, end]); the committed offset is unchanged."""
        self._run(self._core.seek(part))

    def lag(self) -> list[VgroupLag]:
        """How far behind this consumer is on each assigned vgroup: data rows to the
        vnode's end and milliseconds since the first of them was written."""
        return self._run(self._core.lag())

    def offsets_for_times(
        self, parts: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """Kafka's offsets_for_times: copies of `parts`, whose `offset` is a time in
        milliseconds since the epoch, with `offset` the first version ingested at or
        after it (the vnode's `end` when none was) and the retained range."""
        return self._run(self._core.offsets_for_times(parts, timeout))

    def seek_to_time(self, when: int | datetime) -> list[TopicPartition]:
        """Every assigned vgroup's next poll reads from the first version ingested at or
        after `when` (ms since the epoch, or a datetime); the positions set."""
        return self._run(self._core.seek_to_time(when))

    def close(self) -> None:
        """Commit (with auto-commit), leave the group, log out. Idempotent."""
        if self._core.closed:
            return
        self._core.check_not_in_callback("close")  # before the heartbeat stops
        self._stop.set()
        try:
            # a background auto-commit first: the final commit must land after it
            with self._lock:
                under_way = list(self._background)
            wait_all(under_way, timeout=fx.RPC_TIMEOUT_S)
            self._run(self._core.close())
        finally:
            self._shutdown()

    def __iter__(self) -> Iterator[Message]:
        while True:  # until poll raises "closed" (or another error)
            try:
                message = self.poll(ITERATION_POLL_S)
            except Error:
                if self._core.closed:
                    return  # closed, maybe by another thread while polling
                raise
            if message is not None:
                yield message

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- performing effects -------------------------------------------------------------

    def _run(self, flow: fx.Flow[T]) -> T:
        stepper = fx.Stepper(flow)
        while True:
            with self._lock:
                effect = stepper.next()
            if effect is None:
                return stepper.value
            try:
                stepper.answer(self._perform(effect))
            except Error as err:
                stepper.fail(err)

    def _perform(self, effect: fx.Effect) -> Any:
        if isinstance(effect, fx.Rpc):
            return self._call(effect)
        if isinstance(effect, fx.Fetch):
            stub = self._stub("vnode", effect.endpoint)
            with self._calls_lock:
                self._calls[effect.ticket] = None
            self._fetch(stub, effect)
        elif isinstance(effect, fx.Spawn):
            self._in_background(effect.flow)
        elif isinstance(effect, fx.Grant):
            self._grant(effect.tickets)
        elif isinstance(effect, fx.Cancel):
            self._cancel(effect.tickets)
        elif isinstance(effect, fx.Wait):
            try:
                return self._results.get(timeout=effect.seconds)
            except queue.Empty:
                return None
        elif isinstance(effect, fx.Sleep):
            time.sleep(effect.seconds)
        elif isinstance(effect, fx.Wake):
            self._results.put(None)
        elif isinstance(effect, fx.Notify):
            return self._notify(effect)
        return None

    def _call(self, effect: fx.Rpc) -> Any:
        if is_beat(effect) and self._beats.batched:
            answer = self._beats.beat(effect.request, effect.metadata, self._send_beats)
            if answer is not None:
                return answer
        if effect.method == "Commit" and effect.service == "vnode":
            stream = self._stream_for_commit(effect)
            if stream is not None:  # an auto-commit as a message, not a call
                stream.commit(next(self._commit_tickets), effect.request, effect.timeout)
                return pb.CommitResponse()
        method = getattr(self._stub(effect.service, effect.endpoint), effect.method)
        with _translated(self._transport):
            return method(effect.request, metadata=effect.metadata, timeout=effect.timeout)

    def _grant(self, granted: Sequence[int]) -> None:
        with self._calls_lock:
            calls = {t: self._calls.get(t) for t in granted}
        on = {t: (call.stream, t) for t, call in calls.items() if isinstance(call, _Ticket)}
        for stream, tickets in streams.by_stream(granted, on).items():
            stream.grant(tickets)

    def _notify(self, notify: fx.Notify) -> Exception | None:
        """Call the rebalance callback (on this thread, no lock held: it may call the
        consumer); its error is the answer."""
        callback = self._callbacks.get(notify.kind)
        try:
            if callback is not None:
                callback(self, list(notify.parts))
        except Exception as exc:  # raised by the core once its state is whole
            return exc
        return None

    def _send_beats(self, request: pb.HeartbeatsRequest) -> pb.HeartbeatsResponse:
        """One Mnode.Heartbeats call for the process's pool (Unbatched: no such method)."""
        stub = self._stub("mnode", "")
        try:
            answer: pb.HeartbeatsResponse = stub.Heartbeats(request, timeout=fx.RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            if unimplemented(exc):
                raise beats.Unbatched from None
            raise _error_of(exc, self._transport) from None
        return answer

    def _fetch(self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch) -> None:
        """Start one vgroup's poll on the endpoint's Consume stream (or, against a server
        without one, as a unary Fetch); its answer arrives on another thread, so a poll
        the vnode holds for a long time holds no thread here."""
        if not self._streaming:
            self._fetch_unary(stub, fetch)
            return
        stream = self._consume_stream(stub, fetch)
        ticket = _Ticket(stream, fetch.ticket)
        if self._started(fetch.ticket, lambda: ticket) is None:
            return  # cancelled before it started
        if fetch.follow:
            stream.follow(
                fetch.ticket, fetch.request, fetch.follow,
                lambda answer, still_open: self._followed(stub, fetch, answer, still_open),
            )  # fmt: skip
            return
        stream.fetch(
            fetch.ticket, fetch.request, lambda answer: self._answered(stub, fetch, answer)
        )

    def _followed(
        self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch, answer: streams.Answer, still_open: bool
    ) -> None:
        """A follow's answer (on the stream's reader thread): to the queue while the core
        expects the ticket; the last one ends the ticket."""
        if isinstance(answer, streams.Unstreamed):
            self._streaming = False  # an older server: unary Fetches from now on
            self._fetch_unary(stub, fetch)
            return
        result = fx.followed(fetch, answer, still_open)
        if result.open:
            with self._calls_lock:
                expected = fetch.ticket in self._calls
            if expected:
                self._results.put(result)
            return
        with self._calls_lock:
            call = self._calls.get(fetch.ticket)
        self._deliver(fetch.ticket, result)
        if still_open and isinstance(call, _Ticket):  # a malformed answer ended it here
            call.cancel()

    def _stream_for_commit(self, effect: fx.Rpc) -> streams.ConsumeStream | None:
        """The endpoint's open stream, if its server takes commits and the session is
        the commit's."""
        with self._calls_lock:
            stream = self._streams.get(effect.endpoint or self._core.config.server)
        return stream if stream is not None and stream.takes_commits(effect.metadata) else None

    def _consume_stream(self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch) -> streams.ConsumeStream:
        """The endpoint's open stream for the poll's session (a new one after a broken
        stream or a new login)."""
        address = fetch.endpoint or self._core.config.server
        with self._calls_lock:
            found = self._streams.get(address)
            if found is not None and found.serves(fetch.metadata):
                return found
            stream = self._streams[address] = streams.ConsumeStream(
                lambda requests, metadata: stub.Consume(requests, metadata=metadata),
                fetch.metadata,
                lambda exc: _error_of(exc, self._transport),
            )
        if found is not None:
            found.close()  # its polls (of an old session) fail and are polled again
            with self._calls_lock:
                self._retired = [*(r for r in self._retired if r.reading()), found]
        return stream

    def _answered(self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch, answer: streams.Answer) -> None:
        """A ticket's answer (on the stream's reader thread)."""
        if isinstance(answer, streams.Unstreamed):
            self._streaming = False  # an older server: unary Fetches from now on
            self._fetch_unary(stub, fetch)
            return
        try:
            if isinstance(answer, TooLarge):
                self._pool.submit(self._stream, stub, fetch)  # RuntimeError once closed
                return
            if isinstance(answer, Exception):
                raise answer
            result = fx.fetched(fetch, [answer])
        except Exception as exc:  # failed: every poll answers
            result = fx.failed(fetch, exc)
        self._deliver(fetch.ticket, result)

    def _fetch_unary(self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch) -> None:
        """The poll as a unary Fetch; its answer arrives on a gRPC thread (`_fetched`)."""
        request, metadata, timeout = fetch.request, fetch.metadata, fetch.timeout
        try:
            call = self._started(
                fetch.ticket, lambda: stub.Fetch.future(request, metadata=metadata, timeout=timeout)
            )
        except Exception as exc:  # every poll answers, or its vgroup would stall
            self._deliver(fetch.ticket, fx.failed(fetch, exc))
            return
        if call is not None:  # None: cancelled before it started
            call.add_done_callback(lambda done: self._fetched(stub, fetch, done))

    def _fetched(self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch, call: Any) -> None:
        """A Fetch answered: its result goes to the queue; a message over one frame is
        polled again as a streamed Poll of the same position, on a pool thread."""
        try:
            with _translated(self._transport):
                result = fx.fetched(fetch, [call.result()])
        except TooLarge:
            self._pool.submit(self._stream, stub, fetch)
            return
        except Exception as exc:  # cancelled, or failed: every poll answers
            result = fx.failed(fetch, exc)
        self._deliver(fetch.ticket, result)

    def _stream(self, stub: pb_grpc.VnodeStub, fetch: fx.Fetch) -> None:
        request, metadata, timeout = fetch.request, fetch.metadata, fetch.timeout
        try:
            call = self._started(
                fetch.ticket, lambda: stub.Poll(request, metadata=metadata, timeout=timeout)
            )
            if call is None:
                return
            with _translated(self._transport):
                frames = list(call)
            result = fx.fetched(fetch, frames)
        except Exception as exc:  # every poll answers, or its vgroup would stall
            result = fx.failed(fetch, exc)
        self._deliver(fetch.ticket, result)

    def _deliver(self, ticket: int, result: fx.Fetched) -> None:
        with self._calls_lock:
            if self._calls.pop(ticket, False) is False:
                return  # cancelled: the core no longer expects it
        self._results.put(result)

    def _started(self, ticket: int, start: Callable[[], Any]) -> Any:
        """The call `start()` makes, registered under `ticket` so that a cancel reaches
        it; None when the ticket was cancelled already."""
        with self._calls_lock:
            if ticket not in self._calls:
                return None
            call = self._calls[ticket] = start()
            return call

    def _cancel(self, tickets: Sequence[int]) -> None:
        """Cancel the polls of `tickets` still in flight. Of a unary Fetch (a server
        without Consume), the end that gRPC's thread handles later is noted first (the
        cancel makes the call done at once): close() waits for it (client/readers.py)."""
        with self._calls_lock:
            calls = [self._calls.pop(ticket, None) for ticket in tickets]
        ends = [handled(call) for call in calls if _is_fetch(call)]
        if ends:
            with self._calls_lock:
                self._ending = [*(e for e in self._ending if not e.is_set()), *ends]
        for call in calls:
            if call is not None:
                call.cancel()

    def _stub(self, service: str, endpoint: str) -> Any:
        address = endpoint or self._core.config.server
        with self._calls_lock:
            if self._shut:
                raise Error("this consumer is closed; create a new one")
            channel = self._channels.get(address)
            if channel is None:
                channel = self._transport.channel(address, fx.channel_options(endpoint))
                self._channels[address] = channel
        return STUBS[service](channel)

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None and self._core.consumer_id:
            self._heartbeat = threading.Thread(
                target=self._heartbeats, name="sqltopic-heartbeat", daemon=True
            )
            self._heartbeat.start()

    def _heartbeats(self) -> None:
        while not self._stop.wait(beats.aligned_delay(self._core.heartbeat_s)):
            try:
                self._run(self._core.heartbeat())
            except Exception as exc:  # the thread must outlive a failed heartbeat
                if self._stop.is_set():
                    return  # closed while it beat: its channels went first, say nothing
                log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)

    def _shutdown(self) -> None:
        """Stop the threads; closing the channels ends every call still running."""
        self._stop.set()
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        with self._calls_lock:
            self._shut = True
            tickets = list(self._calls)
            channels, self._channels = list(self._channels.values()), {}
            opened, self._streams = list(self._streams.values()), {}
            retired, self._retired = self._retired, []
        self._cancel(tickets)
        for stream in opened:
            stream.close()
        self._results.put(None)  # a poll waiting in another thread looks again
        for channel in channels:
            channel.close()
        deadline = time.monotonic() + STREAM_JOIN_S
        for stream in [*opened, *retired]:
            stream.join(deadline)  # no thread left inside gRPC at exit (client/readers.py)
        with self._calls_lock:
            ending, self._ending = self._ending, []
        for end in ending:
            end.wait(max(0.0, deadline - time.monotonic()))
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._heartbeat is not None:
            self._heartbeat.join()


class _Ticket:
    """A poll on a Consume stream, as `_calls` holds it: what cancels it."""

    def __init__(self, stream: streams.ConsumeStream, ticket: int) -> None:
        self.stream = stream
        self.ticket = ticket

    def cancel(self) -> None:
        self.stream.cancel(self.ticket)


def _is_fetch(call: Any) -> bool:
    """Whether a call of `_calls` is a gRPC call (a unary Fetch, or a streamed Poll),
    not a ticket on a Consume stream (whose stream close() waits for) nor a poll not
    started yet (None)."""
    return call is not None and not isinstance(call, _Ticket)


def is_beat(effect: fx.Rpc) -> bool:
    """A heartbeat to the configured server: what the process's beat pool sends."""
    return effect.service == "mnode" and effect.method == "Heartbeat" and not effect.endpoint


def callbacks(
    on_assign: C | None, on_revoke: C | None, on_lost: C | None
) -> dict[fx.RebalanceKind, C]:
    """The callbacks of `subscribe` by kind; as confluent-kafka, `on_revoke` stands in
    for a missing `on_lost`."""
    given: dict[fx.RebalanceKind, C | None] = {
        "assign": on_assign,
        "revoke": on_revoke,
        "lost": on_lost if on_lost is not None else on_revoke,
    }
    for kind, callback in given.items():
        if callback is not None and not callable(callback):
            raise TypeError(f"subscribe: on_{kind} must be callable, not {callback!r}")
    return {kind: callback for kind, callback in given.items() if callback is not None}
