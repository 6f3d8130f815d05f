"""The consumer's Consume streams (client/streams.py): answers by ticket, a broken
stream failing every open poll, a server without the method; and against a real server,
one stream per endpoint carrying every vgroup's polls."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc

from sqltopic import aio
from sqltopic.client import Connection, streams
from sqltopic.client.consumer import Consumer
from sqltopic.errors import Error, NoPermission, ServerUnavailable
from sqltopic.proto.sqltopic.v1 import sqltopic_pb2 as pb
from sqltopic.proto.status import call_status
from tests.client.support import DEADLINE_S, SELECT, config, drain, drain_async, rows_of
from tests.live_server import ServerProcess


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class Call:
    """A Consume call of our own making: answers what the test puts in, then fails
    with `end` (or ends)."""

    def __init__(self, requests: Iterator[pb.ConsumeRequest]) -> None:
        self.requests = requests
        self.answers: queue.Queue[pb.ConsumeResponse | grpc.RpcError | None] = queue.Queue()
        self.cancelled = False

    def __iter__(self) -> Iterator[pb.ConsumeResponse]:
        while (item := self.answers.get(timeout=DEADLINE_S)) is not None:
            if isinstance(item, grpc.RpcError):
                raise item
            yield item

    def cancel(self) -> None:
        self.cancelled = True
        self.answers.put(Failed(grpc.StatusCode.CANCELLED))


def translate(exc: grpc.RpcError) -> Error:
    return ServerUnavailable(f"failed: {exc.code()}")


def open_stream() -> tuple[streams.ConsumeStream, list[Call]]:
    calls: list[Call] = []

    def start(requests: Iterator[pb.ConsumeRequest], metadata: object) -> Call:
        calls.append(Call(requests))
        return calls[-1]

    return streams.ConsumeStream(start, (), translate), calls


class Answers:
    def __init__(self) -> None:
        self.got: dict[int, Any] = {}
        self.done = threading.Event()
        self.wanted = 0

    def to(self, ticket: int) -> Any:
        def done(answer: Any) -> None:
            self.got[ticket] = answer
            if len(self.got) >= self.wanted:
                self.done.set()

        return done


def test_answers_go_to_their_tickets_and_a_broken_stream_fails_the_rest() -> None:
    stream, (call,) = open_stream()
    answers = Answers()
    answers.wanted = 3
    for ticket in (1, 2, 3):
        stream.fetch(ticket, pb.PollRequest(vgroup=ticket), answers.to(ticket))
    sent = [next(call.requests) for _ in range(3)]
    assert [(r.ticket, r.poll.vgroup) for r in sent] == [(1, 1), (2, 2), (3, 3)]
    call.answers.put(pb.ConsumeResponse(ticket=2, message=pb.PollResponse(epoch=7)))
    refused = call_status(NoPermission("not yours"))
    call.answers.put(pb.ConsumeResponse(ticket=1, error=refused))
    call.answers.put(Failed(grpc.StatusCode.UNAVAILABLE))
    assert answers.done.wait(DEADLINE_S)
    assert answers.got[2] == pb.PollResponse(epoch=7)
    assert isinstance(answers.got[1], NoPermission)
    assert isinstance(answers.got[3], ServerUnavailable)  # open when the stream broke
    assert stream.broken
    late: list[Any] = []
    stream.fetch(4, pb.PollRequest(), late.append)  # a broken stream takes no more
    assert isinstance(late[0], ServerUnavailable)


def test_a_cancelled_ticket_is_withdrawn_and_never_answered() -> None:
    stream, (call,) = open_stream()
    answers = Answers()
    answers.wanted = 1
    stream.fetch(1, pb.PollRequest(), answers.to(1))
    stream.fetch(2, pb.PollRequest(), answers.to(2))
    stream.cancel(1)
    sent = [next(call.requests) for _ in range(3)]
    assert [(r.ticket, r.WhichOneof("action")) for r in sent] == [
        (1, "poll"), (2, "poll"), (1, "cancel"),
    ]  # fmt: skip
    call.answers.put(pb.ConsumeResponse(ticket=1, message=pb.PollResponse(epoch=1)))
    call.answers.put(pb.ConsumeResponse(ticket=2, message=pb.PollResponse(epoch=2)))
    assert answers.done.wait(DEADLINE_S)
    assert answers.got == {2: pb.PollResponse(epoch=2)}


def test_a_server_without_consume_is_reported_as_unstreamed() -> None:
    stream, (call,) = open_stream()
    answers = Answers()
    answers.wanted = 1
    stream.fetch(1, pb.PollRequest(), answers.to(1))
    call.answers.put(Failed(grpc.StatusCode.UNIMPLEMENTED))
    assert answers.done.wait(DEADLINE_S)
    assert isinstance(answers.got[1], streams.Unstreamed)
    assert stream.unimplemented


# --- against a real server -------------------------------------------------------------


def test_a_consumer_polls_every_vgroup_on_one_stream(
    power: Connection, server: ServerProcess
) -> None:
    with Consumer(config(server.address, "g1")) as consumer:
        consumer.subscribe(["overvoltage"])
        delivered = drain(consumer)
        assert len(consumer.assignment()) > 1
        assert list(consumer._streams) == [server.address]  # one stream, every vgroup
        assert consumer._streaming
    assert rows_of(delivered) == Counter(power.execute(SELECT).rows)


def test_an_asyncio_consumer_polls_every_vgroup_on_one_stream(
    power: Connection, server: ServerProcess
) -> None:
    async def run() -> None:
        async with aio.Consumer(config(server.address, "g2")) as consumer:
            await consumer.subscribe(["overvoltage"])
            delivered = await drain_async(consumer)
            assert len(await consumer.assignment()) > 1
            assert list(consumer._streams) == [server.address]
            assert rows_of(delivered) == Counter(power.execute(SELECT).rows)

    asyncio.run(run())
