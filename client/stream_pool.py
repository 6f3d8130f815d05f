"""The Consume streams an asyncio client process shares among its consumers.

A server sends each message on a stream with a fixed cost (~0.1 ms of CPU on a small
machine, docs/performance.md §9.8), so a process running many consumers of one server
(a dashboard backend, a gateway) keeps one stream per server and user for all of them:
each request carries its consumer's session token (`ConsumeRequest.token`), tickets are
numbered by the stream, and the answers a shared pass has for several of the consumers
arrive batched in one message. Consumers of the same user and TLS settings share; the
pool lives per event loop (streams cannot cross loops), and a stream is closed when the
last consumer using it lets it go. A broken stream is replaced for the consumers that
ask next; the ones holding it poll again as after any broken stream.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

from grpc import aio

from sqltopic.client.effects import Metadata
from sqltopic.client.streams import AioConsumeStream, Translate
from sqltopic.client.tls import Options, Transport
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2_grpc as pb_grpc

# Tickets open on one shared stream before the pool opens another for new consumers:
# half the server's per-stream limit (server/rpc/consume.py MAX_TICKETS), so that the
# consumers already on it can still add polls and commits.
MAX_SHARED_TICKETS = 32_768

Key = tuple[str, Transport, str]  # (address, transport, user)


@dataclass(eq=False)
class _Shared:
    stream: AioConsumeStream
    channel: aio.Channel
    users: int = 1


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Key, _Shared]] = (
    weakref.WeakKeyDictionary()
)
_HELD: weakref.WeakKeyDictionary[AioConsumeStream, _Shared] = weakref.WeakKeyDictionary()


def take(
    address: str, transport: Transport, user: str, options: Options, metadata: Metadata,
    translate: Translate,
) -> AioConsumeStream:  # fmt: skip
    """A stream to `address` for a consumer of `user` (opened with its session's
    `metadata` if none is open); give it back with `release`."""
    pool = _POOLS.setdefault(asyncio.get_running_loop(), {})
    key = (address, transport, user)
    shared = pool.get(key)
    if shared is not None and _room(shared.stream):
        shared.users += 1
        return shared.stream
    channel = transport.aio_channel(address, options)
    call = pb_grpc.VnodeStub(channel).Consume(metadata=metadata)
    stream = AioConsumeStream(call, metadata, translate, shared=True)
    shared = pool[key] = _HELD[stream] = _Shared(stream, channel)
    return stream


def _room(stream: AioConsumeStream) -> bool:
    """Whether a consumer may join `stream`: open, with tickets to spare."""
    return not stream.broken and stream.open_tickets < MAX_SHARED_TICKETS


async def release(stream: AioConsumeStream) -> None:
    """A consumer no longer uses `stream` (its polls on it were cancelled): the last
    one closes it."""
    shared = _HELD.get(stream)
    if shared is None:
        return
    shared.users -= 1
    if shared.users > 0:
        return
    del _HELD[stream]
    pool = _POOLS.get(asyncio.get_running_loop(), {})
    for key, found in list(pool.items()):
        if found is shared:
            del pool[key]
    stream.close()
    await shared.channel.close()
