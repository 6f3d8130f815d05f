"""`sqltopic.aio`: the asyncio client on grpc.aio. `await connect()` gives an async
`Connection` (execute, query, write, close); `Consumer(config)` has the methods of
`sqltopic.Consumer` as coroutines, async iteration and `async with`.

The consumer drives the same sans-IO core as the thread-based one (core.py):
each vgroup's poll is a task, results come through an asyncio.Queue, the heartbeat is a
task. Unlike the sync Consumer it logs in on first use (a constructor cannot await).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from grpc import aio

import sqltopic.client.effects as fx
from sqltopic.client import beats, stream_pool, streams
from sqltopic.client.aio_connection import Connection, connect
from sqltopic.client.config import ConsumerConfig, consumer_transport, parse_config
from sqltopic.client.connection import (
    _error_of,
    _translated,
)
from sqltopic.client.consumer import (
    ITERATION_POLL_S,
    STUBS,
    Callbacks,
    RebalanceCallback,
    callbacks,
    is_beat,
)
from sqltopic.client.core import ConsumerCore
from sqltopic.client.message import Message, TopicPartition, VgroupLag
from sqltopic.errors import Error, ServerUnavailable, TooLarge
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import unimplemented

log = logging.getLogger("sqltopic.consumer")
T = TypeVar("T")

__all__ = ["Connection", "Consumer", "connect"]


class Consumer:
    """A member of a consumer group, for asyncio (see `sqltopic.Consumer`). The config
    is checked at once (ConfigError); the login happens on the first call."""

    def __init__(self, config: Mapping[str, object] | ConsumerConfig) -> None:
        parsed = config if isinstance(config, ConsumerConfig) else parse_config(config)
        self._transport = consumer_transport(parsed)
        self._core = ConsumerCore(parsed)
        self._core.follow_window = streams.FOLLOW_WINDOW
        self._channels: dict[str, aio.Channel] = {}
        self._streams: dict[str, streams.AioConsumeStream] = {}  # vnode endpoint -> its stream
        self._streaming = True  # until a server answers Consume with UNIMPLEMENTED
        self._fetches: dict[int, asyncio.Task[None]] = {}
        # open follows: the core's ticket -> their stream and the stream's ticket
        self._followed: dict[int, tuple[streams.AioConsumeStream, int]] = {}
        self._letting_go: set[asyncio.Task[None]] = set()  # streams being released
        self._spawned: set[asyncio.Task[None]] = set()  # background flows (auto-commits)
        self._results: asyncio.Queue[fx.Fetched | None] = asyncio.Queue()
        self._heartbeat: asyncio.Task[None] | None = None
        self._commits = asyncio.Lock()  # commit_async stores in call order
        self._logged_in = False
        self._callbacks: Callbacks = {}

    async def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """As `sqltopic.Consumer.subscribe`; a callback may be a function or a coroutine
        function (awaited)."""
        self._callbacks = callbacks(on_assign, on_revoke, on_lost)
        await self._run(self._core.subscribe(topics, params))
        if self._heartbeat is None and self._core.consumer_id:
            self._heartbeat = asyncio.create_task(self._heartbeats())

    async def unsubscribe(self) -> None:
        await self._run(self._core.unsubscribe())

    def subscription(self) -> list[str]:
        return list(self._core.topics)

    async def poll(self, timeout: float | None = 1.0) -> Message | None:
        return await self._run(self._core.poll(timeout))

    async def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Up to `num_messages` messages within `timeout` s (-1 or None: no limit)."""
        return await self._run(self._core.consume(num_messages, timeout))

    async def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        *,
        asynchronous: bool = False,
    ) -> asyncio.Task[None] | None:
        """As `sqltopic.Consumer.commit`; `asynchronous=True` returns commit_async's task."""
        if asynchronous:
            return self.commit_async(message, offsets)
        await self._commit(self._core.offsets_to_commit(message, offsets))
        return None

    async def ack(self, message: Message, rows: Sequence[int] | None = None) -> int:
        """As `sqltopic.Consumer.ack`."""
        return await self._run(self._core.settle("ack", message, rows, pb.ACK_TYPE_ACCEPT))

    async def nack(self, message: Message, rows: Sequence[int] | None = None) -> int:
        """As `sqltopic.Consumer.nack`."""
        return await self._run(self._core.settle("nack", message, rows, pb.ACK_TYPE_RELEASE))

    def commit_async(
        self, message: Message | None = None, offsets: Sequence[TopicPartition] | None = None
    ) -> asyncio.Task[None]:
        """Start a commit of the offsets as they are now; the task (await it or add a
        done callback) fails with the commit's error. Commits are stored in call order."""
        return asyncio.create_task(self._commit(self._core.offsets_to_commit(message, offsets)))

    async def _commit(self, batch: list[pb.TopicVgroupOffset]) -> None:
        async with self._commits:
            await self._run(self._core.commit(batch))

    async def assignment(self) -> list[TopicPartition]:
        return await self._run(self._core.assignment())

    def position(self, parts: Sequence[TopicPartition]) -> list[TopicPartition]:
        return self._core.position(parts)

    async def assign(self, parts: Sequence[TopicPartition]) -> None:
        await self._run(self._core.assign(parts))

    def pause(self, parts: Sequence[TopicPartition]) -> None:
        self._core.pause(parts)

    def resume(self, parts: Sequence[TopicPartition]) -> None:
        self._core.resume(parts)

    def paused(self) -> list[TopicPartition]:
        return self._core.paused_parts()

    async def committed(
        self, parts: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        return await self._run(self._core.committed(parts, timeout))

    async def seek(self, part: TopicPartition) -> None:
        await self._run(self._core.seek(part))

    async def lag(self) -> list[VgroupLag]:
        return await self._run(self._core.lag())

    async def offsets_for_times(
        self, parts: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        return await self._run(self._core.offsets_for_times(parts, timeout))

    async def seek_to_time(self, when: int | datetime) -> list[TopicPartition]:
        return await self._run(self._core.seek_to_time(when))

    async def close(self) -> None:
        if self._core.closed:
            return
        self._core.check_not_in_callback("close")  # before the heartbeat stops
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        try:
            # a background auto-commit first: the final commit must land after it
            await asyncio.gather(*self._spawned, return_exceptions=True)
            if self._logged_in:
                await self._run(self._core.close())
            self._core.closed = True
        finally:
            for task in list(self._fetches.values()):
                task.cancel()
            self._results.put_nowait(None)  # a poll waiting in another task looks again
            channels, self._channels = list(self._channels.values()), {}
            opened, self._streams = list(self._streams.values()), {}
            for stream in opened:
                await stream_pool.release(stream)
            for channel in channels:
                await channel.close()

    async def __aiter__(self) -> AsyncIterator[Message]:
        while True:  # until poll raises "closed" (or another error)
            try:
                message = await self.poll(ITERATION_POLL_S)
            except Error:
                if self._core.closed:
                    return  # closed, maybe by another task while polling
                raise
            if message is not None:
                yield message

    async def __aenter__(self) -> Consumer:
        await self._login()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # --- performing effects -------------------------------------------------------------

    async def _login(self) -> None:
        if not self._logged_in:
            await self._run(self._core.login(), login=False)
            self._logged_in = True

    async def _run(self, flow: fx.Flow[T], login: bool = True) -> T:
        if login:
            await self._login()
        stepper = fx.Stepper(flow)
        while (effect := stepper.next()) is not None:
            try:
                stepper.answer(await self._perform(effect))
            except Error as err:
                stepper.fail(err)
        return stepper.value

    async def _perform(self, effect: fx.Effect) -> Any:
        if isinstance(effect, fx.Rpc):
            return await self._call(effect)
        if isinstance(effect, fx.Fetch):
            following = effect.follow and self._streaming
            work = self._follow(effect) if following else self._fetch(effect)
            self._fetches[effect.ticket] = asyncio.create_task(work)
        elif isinstance(effect, fx.Grant):
            self._grant(effect.tickets)
        elif isinstance(effect, fx.Cancel):
            for ticket in effect.tickets:
                task = self._fetches.pop(ticket, None)
                if task is not None:
                    task.cancel()
        elif isinstance(effect, fx.Wait):
            try:
                return await asyncio.wait_for(self._results.get(), effect.seconds)
            except TimeoutError:
                return None
        elif isinstance(effect, fx.Sleep):
            await asyncio.sleep(effect.seconds)
        elif isinstance(effect, fx.Wake):
            self._results.put_nowait(None)
        elif isinstance(effect, fx.Notify):
            return await self._notify(effect)
        elif isinstance(effect, fx.Spawn):
            task = asyncio.create_task(self._run(effect.flow, login=False))
            self._spawned.add(task)
            task.add_done_callback(self._spawned_done)
        return None

    def _spawned_done(self, task: asyncio.Task[None]) -> None:
        self._spawned.discard(task)
        if not task.cancelled() and task.exception() is not None:  # its flow logs errors
            log.warning("background work failed: %r", task.exception())

    async def _call(self, effect: fx.Rpc) -> Any:
        if is_beat(effect):
            pool = beats.aio_pool_for(self._core.config.server)
            if pool.batched:
                answer = await pool.beat(effect.request, effect.metadata, self._send_beats)
                if answer is not None:
                    return answer
        if effect.method == "Commit" and effect.service == "vnode":
            stream = self._streams.get(effect.endpoint or self._core.config.server)
            if stream is not None and stream.takes_commits(effect.metadata):
                # an auto-commit as a message, not a call
                token = beats.token_of(effect.metadata)
                await stream.commit(stream.ticket(), effect.request, effect.timeout, token)
                return pb.CommitResponse()
        method = getattr(self._stub(effect.service, effect.endpoint), effect.method)
        try:
            with _translated(self._transport):
                return await method(
                    effect.request, metadata=effect.metadata, timeout=effect.timeout
                )
        except asyncio.CancelledError:
            # close() in another task closed the channel under this call: that is
            # "closed" for the caller, not a cancellation of its own task
            task = asyncio.current_task()
            if self._core.closed and task is not None and not task.cancelling():
                raise Error("the consumer is closed") from None
            raise

    def _grant(self, granted: Sequence[int]) -> None:
        """Grants to open follows, each on its stream under the stream's ticket."""
        for stream, tickets in streams.by_stream(granted, self._followed).items():
            stream.grant(tickets)

    async def _notify(self, notify: fx.Notify) -> Exception | None:
        """Call the rebalance callback (awaiting a coroutine); its error is the answer."""
        callback = self._callbacks.get(notify.kind)
        try:
            if callback is not None:
                result = callback(self, list(notify.parts))
                if inspect.isawaitable(result):
                    await result
        except Exception as exc:  # raised by the core once its state is whole
            return exc
        return None

    async def _send_beats(self, request: pb.HeartbeatsRequest) -> pb.HeartbeatsResponse:
        """One Mnode.Heartbeats call for the loop's pool (Unbatched: no such method)."""
        stub = self._stub("mnode", "")
        try:
            answer: pb.HeartbeatsResponse = await stub.Heartbeats(request, timeout=fx.RPC_TIMEOUT_S)
        except aio.AioRpcError as exc:
            if unimplemented(exc):
                raise beats.Unbatched from None
            raise _error_of(exc, self._transport) from None
        return answer

    async def _fetch(self, fetch: fx.Fetch) -> None:
        """One vgroup's poll, as a task; its result goes to the queue. A unary Fetch, or,
        for a message over one frame, a streamed Poll of the same position."""
        try:
            stub = self._stub("vnode", fetch.endpoint)
            request, metadata, timeout = fetch.request, fetch.metadata, fetch.timeout
            try:
                frames = [await self._fetch_one(stub, fetch)]
            except TooLarge:  # a message over one frame: the streamed Poll of it
                call = stub.Poll(request, metadata=metadata, timeout=timeout)
                with _translated(self._transport):
                    frames = [frame async for frame in call]
            result = fx.fetched(fetch, frames)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every poll answers, or its vgroup would stall
            result = fx.failed(fetch, exc)
        if self._fetches.pop(fetch.ticket, None) is not None:
            self._results.put_nowait(result)

    async def _follow(self, fetch: fx.Fetch) -> None:
        """One vgroup's follow, as a task that lasts while it does: each answer goes to
        the queue as it arrives. A server without Consume: one poll instead."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[Exception | None] = loop.create_future()

        def answered(answer: streams.Answer, still_open: bool) -> None:
            if isinstance(answer, streams.Unstreamed):
                ended.set_result(answer)
                return
            result = fx.followed(fetch, answer, still_open)
            if self._fetches.get(fetch.ticket) is not None:
                self._results.put_nowait(result)
            if not result.open and not ended.done():
                if still_open:  # a malformed answer ends it here: end it there too
                    stream.unfollow(ticket)
                ended.set_result(None)

        try:
            stream = self._consume_stream(fetch.endpoint, fetch.metadata)
            ticket = stream.ticket()
            self._followed[fetch.ticket] = (stream, ticket)
            token = beats.token_of(fetch.metadata)
            stream.follow(ticket, fetch.request, fetch.follow, answered, token)
            try:
                unstreamed = await ended
            except asyncio.CancelledError:
                stream.unfollow(ticket)
                raise
            finally:
                self._followed.pop(fetch.ticket, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every poll answers, or its vgroup would stall
            if self._fetches.pop(fetch.ticket, None) is not None:
                self._results.put_nowait(fx.failed(fetch, exc))
            return
        if unstreamed is not None:
            self._streaming = False  # an older server: unary Fetches from now on
            await self._fetch(fetch)
            return
        self._fetches.pop(fetch.ticket, None)

    async def _fetch_one(self, stub: Any, fetch: fx.Fetch) -> pb.PollResponse:
        """The poll on the endpoint's Consume stream (or, against a server without one,
        as a unary Fetch), within the poll's own deadline."""
        if self._streaming:
            stream = self._consume_stream(fetch.endpoint, fetch.metadata)
            token = beats.token_of(fetch.metadata)
            try:
                return await asyncio.wait_for(
                    stream.fetch(stream.ticket(), fetch.request, token), fetch.timeout
                )
            except TimeoutError:
                raise ServerUnavailable(
                    f"no answer to a poll within {fetch.timeout:g} s; polling again"
                ) from None
            except streams.Unstreamed:
                self._streaming = False  # an older server: unary Fetches from now on
        with _translated(self._transport):
            answer: pb.PollResponse = await stub.Fetch(
                fetch.request, metadata=fetch.metadata, timeout=fetch.timeout
            )
        return answer

    def _consume_stream(self, endpoint: str, metadata: fx.Metadata) -> streams.AioConsumeStream:
        """The endpoint's open stream, shared with the process's other consumers of the
        same user (client/stream_pool.py); a new one after a broken stream."""
        if self._core.closed:
            raise Error("this consumer is closed; create a new one")
        address = endpoint or self._core.config.server
        found = self._streams.get(address)
        if found is not None and found.serves(metadata):
            return found
        if found is not None:  # broken: its polls failed and are polled again
            task = asyncio.create_task(stream_pool.release(found))
            self._letting_go.add(task)
            task.add_done_callback(self._letting_go.discard)
        stream = self._streams[address] = stream_pool.take(
            address, self._transport, self._core.config.user, fx.channel_options(endpoint),
            metadata, lambda exc: _error_of(exc, self._transport),
        )  # fmt: skip
        return stream

    def _stub(self, service: str, endpoint: str) -> Any:
        if self._core.closed and service != "session":
            raise Error("this consumer is closed; create a new one")
        address = endpoint or self._core.config.server
        channel = self._channels.get(address)
        if channel is None:
            channel = self._transport.aio_channel(address, fx.channel_options(endpoint))
            self._channels[address] = channel
        return STUBS[service](channel)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(beats.aligned_delay(self._core.heartbeat_s))
            try:
                await self._run(self._core.heartbeat())
            except Exception as exc:  # the task must outlive a failed heartbeat
                if self._core.closed:
                    return  # closed while it beat: its channels went first, say nothing
                log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
